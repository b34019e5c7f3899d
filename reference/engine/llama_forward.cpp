// llama_forward.cpp — see llama_forward.h.
#include "reference/engine/llama_forward.h"

#include "kernels/common/error.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/fused_add_rmsnorm.h"
#include "kernels/cpu/fused_gate_up_swiglu.h"
#include "kernels/cpu/fused_rmsnorm_quantize.h"
#include "kernels/cpu/paged_flash_attention.h"
#include "kernels/cpu/residual.h"
#include "kernels/cpu/rmsnorm.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/swiglu.h"
#include "reference/attention/cached_attention.h"
#include "reference/parallel/parallel_linear.h"

namespace servelab {

LlamaForward::LlamaForward(const ModelConfig& config, const ModelWeights& weights,
                           const TensorParallelShard& shard, Communicator& comm,
                           const FusionPlan& fusions, MlaMode mla_mode)
    : config_(config),
      weights_(weights),
      shard_(shard),
      comm_(comm),
      split_(shard.num_ranks > 1),
      mla_(config.is_mla() ? std::make_unique<MlaBlock>(config, mla_mode) : nullptr) {
    set_fusions(fusions);
}

void LlamaForward::set_fusions(const FusionPlan& plan) {
    fusions_ = plan;
    norm_ = plan.rmsnorm_quantize ? &LlamaForward::norm_to_int8 : &LlamaForward::norm_to_floats;
    add_residual_ = plan.add_rmsnorm ? &LlamaForward::add_residual_with_next_norm
                                     : &LlamaForward::add_residual_now;
    qkv_rope_ = plan.rope_in_qkv ? &LlamaForward::qkv_with_rope : &LlamaForward::qkv_then_rope;
    gate_up_swiglu_ = plan.swiglu_in_gate_up ? &LlamaForward::gate_up_with_swiglu
                                             : &LlamaForward::gate_up_then_swiglu;
}

std::span<const float> LlamaForward::run(std::span<const SequenceChunk> chunks, KvTarget kv) {
    const int64_t num_tokens = start_step(chunks);
    const int64_t dim = config_.dim;
    // x = embed[tokens] (each rank holds some rows of the table; a sum completes x)
    vocab_parallel_embedding(step_tokens_, weights_.token_embedding, shard_, x_.data(), comm_);
    // MLA attends through its latent cache even in naive decoding: without a
    // cache the step gets a scratch one holding just this step's tokens,
    // which is what attention without a cache sees anyway.
    std::unique_ptr<KvCache> scratch;
    if (mla_ && kv.contiguous == nullptr) scratch = std::make_unique<KvCache>(config_, num_tokens);
    KvCache* latent_cache = scratch ? scratch.get() : kv.contiguous;

    for (int64_t l = 0; l < config_.num_layers; ++l) {
        const LayerWeights& layer = weights_.layers[size_t(l)];
        if (mla_) {
            (this->*norm_)(layer.attn_norm, {});  // fp32 rows: MLA's matmuls read floats
            mla_attention(l, chunks[0].step, *latent_cache);
        } else {
            // h = rmsnorm(x); q, k, v = h·Wᵀ; rope(q, k) (this rank's heads)
            const bool int8 = (this->*norm_)(layer.attn_norm, {&layer.wq, &layer.wk, &layer.wv});
            observe(l, LinearInput::kAttentionIn, normed_, dim, int8);
            (this->*qkv_rope_)(layer, int8);
            // append k, v to the cache; attention of each sequence over its own tokens
            attend_chunks(l, chunks, kv);
            // delta = attention · Woᵀ (each rank's heads' share, summed over ranks)
            observe(l, LinearInput::kAttentionOut, attn_out_, config_.q_dim());
            row_parallel_linear(attn_out_.data(), layer.wo, delta_.data(), num_tokens, comm_);
        }
        (this->*add_residual_)();  // x += delta
        // h = rmsnorm(x); gate = silu(h·W_gateᵀ) * h·W_upᵀ (this rank's ffn features)
        const bool int8 = (this->*norm_)(layer.ffn_norm, {&layer.w_gate, &layer.w_up});
        observe(l, LinearInput::kMlpIn, normed_, dim, int8);
        (this->*gate_up_swiglu_)(layer, int8);
        // delta = gate · W_downᵀ (summed over ranks); x += delta
        observe(l, LinearInput::kMlpHidden, gate_, config_.ffn_dim);
        row_parallel_linear(gate_.data(), layer.w_down, delta_.data(), num_tokens, comm_);
        (this->*add_residual_)();
    }
    flush_residual();
    if (kv.contiguous != nullptr) kv.contiguous->commit(num_tokens);
    return logits_of(chunks);  // rmsnorm(x) · Woutputᵀ, for the rows that need logits
}

int64_t LlamaForward::start_step(std::span<const SequenceChunk> chunks) {
    int64_t num_tokens = 0;
    for (const SequenceChunk& chunk : chunks) num_tokens += int64_t(chunk.step.tokens.size());
    const auto n = [num_tokens](int64_t width) { return size_t(num_tokens * width); };
    x_.resize(n(config_.dim));
    normed_.resize(n(config_.dim));
    q_.resize(n(config_.q_dim()));
    k_.resize(n(config_.kv_dim()));
    v_.resize(n(config_.kv_dim()));
    attn_out_.resize(n(config_.attn_out_dim()));
    delta_.resize(n(config_.dim));
    gate_.resize(n(config_.ffn_dim));
    up_.resize(n(config_.ffn_dim));
    positions_.resize(size_t(num_tokens));
    step_tokens_.clear();
    int64_t row = 0;
    for (const SequenceChunk& chunk : chunks) {
        for (size_t t = 0; t < chunk.step.tokens.size(); ++t, ++row) {
            positions_[size_t(row)] = chunk.step.start_position + int64_t(t);
            step_tokens_.push_back(chunk.step.tokens[t]);
        }
    }
    num_tokens_computed_ += num_tokens;
    residual_pending_ = false;
    rope_table_filled_ = false;
    return num_tokens;
}

// Everything else runs over the whole step at once; attention is per
// sequence, each over its own cached tokens.
void LlamaForward::attend_chunks(int64_t layer_index, std::span<const SequenceChunk> chunks,
                                 KvTarget kv) {
    int64_t row = 0;
    for (const SequenceChunk& chunk : chunks) {
        attend_chunk(layer_index, chunk, row, kv);
        row += int64_t(chunk.step.tokens.size());
    }
}

void LlamaForward::attend_chunk(int64_t layer_index, const SequenceChunk& chunk, int64_t row,
                                KvTarget kv) {
    const StepInput& step = chunk.step;
    const int64_t num_tokens = int64_t(step.tokens.size());
    const float* q = q_.data() + row * config_.q_dim();
    const float* k = k_.data() + row * config_.kv_dim();
    const float* v = v_.data() + row * config_.kv_dim();
    float* out = attn_out_.data() + row * config_.q_dim();
    if (kv.contiguous != nullptr) {
        attend_with_cache(*kv.contiguous, layer_index, step.start_position, num_tokens, q, k, v,
                          out, config_);
    } else if (kv.paged != nullptr) {
        // Lab 4: store this step's keys and values in the table's blocks,
        // then attend over every token the table maps.
        kv.paged->write(layer_index, *chunk.table, step.start_position, k, v, num_tokens);
        const AttentionShape shape{num_tokens, step.start_position + num_tokens, config_.num_heads,
                                   config_.num_kv_heads, config_.head_dim};
        // FlashAttention's tiles for prefill, the key split for decode (Lab 9):
        // every thread busy even for one query, and each query computed the
        // same whatever shares its step.
        paged_flash_attention(q, kv.paged->keys(layer_index), kv.paged->values(layer_index),
                              chunk.table->blocks().data(), kv.paged->block_size(), out, shape);
    } else {
        // Without a cache the keys and values are exactly this step's: the
        // whole sequence, recomputed every step (Lab 1).
        const AttentionShape shape{num_tokens, num_tokens, config_.num_heads, config_.num_kv_heads,
                                   config_.head_dim};
        attention_causal(q, k, v, out, shape);
    }
}

// DeepSeek-V2 attention (one chunk: MLA runs on a contiguous cache only).
// An MLA model is never split, so wo is a plain matmul.
void LlamaForward::mla_attention(int64_t layer_index, const StepInput& step, KvCache& cache) {
    const LayerWeights& layer = weights_.layers[size_t(layer_index)];
    mla_->attend(layer_index, layer, normed_.data(), positions_, step.start_position, cache,
                 attn_out_.data());
    layer.wo.multiply(attn_out_.data(), delta_.data(), int64_t(positions_.size()));
}

// Only the rows that need logits go through the final norm and the head:
// the vocabulary projection is the largest matmul.
std::span<const float> LlamaForward::logits_of(std::span<const SequenceChunk> chunks) {
    const int64_t dim = config_.dim;
    int64_t num_rows = 0;
    int64_t chunk_first_row = 0;
    for (const SequenceChunk& chunk : chunks) {
        const int64_t n = int64_t(chunk.step.tokens.size());
        const int64_t first = chunk.step.logits_for == LogitsFor::kLastToken ? n - 1 : 0;
        for (int64_t t = first; t < n; ++t, ++num_rows) {
            rmsnorm(x_.data() + (chunk_first_row + t) * dim, weights_.output_norm.data(),
                    normed_.data() + num_rows * dim, dim, config_.rms_norm_eps);
        }
        chunk_first_row += n;
    }
    num_logit_rows_computed_ += num_rows;
    const size_t num_logits = size_t(num_rows * config_.vocab_size);
    if (logits_.size() < num_logits) logits_.resize(num_logits);
    vocab_parallel_logits(normed_.data(), weights_.output_head(), num_rows, shard_,
                          config_.vocab_size, logits_.data(), comm_);
    return std::span(logits_).first(num_logits);
}

// A whole model runs the matrices as one pass over the input; a split one
// multiplies by this rank's columns of each (column-parallel).
void LlamaForward::project(std::span<const WeightMatrix* const> matrices,
                           std::span<float* const> outputs, bool int8_input) {
    const int64_t num_tokens = int64_t(positions_.size());
    if (int8_input) {
        multiply_same_input_quantized(matrices, activations_, outputs);
    } else if (!split_) {
        multiply_same_input(matrices, normed_.data(), outputs, num_tokens);
    } else {
        for (size_t i = 0; i < matrices.size(); ++i) {
            column_parallel_linear(normed_.data(), *matrices[i], outputs[i], num_tokens);
        }
    }
}

void LlamaForward::observe(int64_t layer_index, LinearInput input, const std::vector<float>& rows,
                           int64_t cols, bool quantized) {
    if (observer_ == nullptr) return;
    if (quantized) {
        throw Error(
            "an activation observer needs exact matmul mode (--cpu-kernels exact): in fast "
            "mode the normed activations exist only as int8 blocks");
    }
    observer_->observe(layer_index, input, rows.data(), int64_t(positions_.size()), cols);
}

// ---------------------------------------------------------------- the fused steps

bool LlamaForward::norm_to_floats(const std::vector<float>& norm, Readers) {
    const int64_t num_tokens = int64_t(positions_.size());
    const float eps = config_.rms_norm_eps;
    if (residual_pending_) {
        residual_pending_ = false;
        add_rmsnorm_rows(x_.data(), delta_.data(), norm.data(), normed_.data(), num_tokens,
                         config_.dim, eps);
    } else {
        rmsnorm_rows(x_.data(), norm.data(), normed_.data(), num_tokens, config_.dim, eps);
    }
    return false;
}

bool LlamaForward::norm_to_int8(const std::vector<float>& norm, Readers readers) {
    bool readers_take_int8 = !split_ && readers.size() > 0;
    for (const WeightMatrix* m : readers) {
        readers_take_int8 =
            readers_take_int8 && m->takes_quantized_input() && m->cols() == config_.dim;
    }
    if (!readers_take_int8) return norm_to_floats(norm, readers);
    const int64_t num_tokens = int64_t(positions_.size());
    const float eps = config_.rms_norm_eps;
    if (residual_pending_) {
        residual_pending_ = false;
        add_rmsnorm_quantize_rows(x_.data(), delta_.data(), norm.data(), num_tokens, config_.dim,
                                  eps, activations_);
    } else {
        rmsnorm_quantize_rows(x_.data(), norm.data(), num_tokens, config_.dim, eps, activations_);
    }
    return true;
}

void LlamaForward::add_residual_now() {
    add_inplace(x_.data(), delta_.data(), int64_t(positions_.size()) * config_.dim);
}

void LlamaForward::add_residual_with_next_norm() {
    residual_pending_ = true;
}

// The pending residual, where no norm follows (after the last layer).
void LlamaForward::flush_residual() {
    if (!residual_pending_) return;
    add_inplace(x_.data(), delta_.data(), int64_t(positions_.size()) * config_.dim);
    residual_pending_ = false;
}

void LlamaForward::qkv_then_rope(const LayerWeights& layer, bool int8_input) {
    const int64_t num_tokens = int64_t(positions_.size());
    const WeightMatrix* qkv[] = {&layer.wq, &layer.wk, &layer.wv};
    float* outputs[] = {q_.data(), k_.data(), v_.data()};
    project(qkv, outputs, int8_input);
    const RopeParams rope{config_.head_dim, config_.rope_dim, config_.rope_freq_base};
    rope_apply_rows(q_.data(), positions_.data(), num_tokens, config_.num_heads, rope);
    rope_apply_rows(k_.data(), positions_.data(), num_tokens, config_.num_kv_heads, rope);
}

void LlamaForward::qkv_with_rope(const LayerWeights& layer, bool int8_input) {
    const bool repacked =
        layer.wq.is_repacked() && layer.wk.is_repacked() && layer.wv.is_repacked();
    if (!int8_input || !repacked) return qkv_then_rope(layer, int8_input);
    const RopeParams rope{config_.head_dim, config_.rope_dim, config_.rope_freq_base};
    // The angles depend on the position only: once per step, for every layer.
    if (!rope_table_filled_) {
        fill_rope_table(positions_.data(), int64_t(positions_.size()), rope, rope_table_);
        rope_table_filled_ = true;
    }
    qkv_matmul_rope(activations_, layer.wq.repacked(), layer.wk.repacked(), layer.wv.repacked(),
                    q_.data(), k_.data(), v_.data(), rope, rope_table_);
}

void LlamaForward::gate_up_then_swiglu(const LayerWeights& layer, bool int8_input) {
    const WeightMatrix* gate_up[] = {&layer.w_gate, &layer.w_up};
    float* outputs[] = {gate_.data(), up_.data()};
    project(gate_up, outputs, int8_input);
    // Element-wise: a split model's rank needs no other rank's features.
    swiglu(gate_.data(), up_.data(), gate_.data(), int64_t(positions_.size()) * config_.ffn_dim);
}

void LlamaForward::gate_up_with_swiglu(const LayerWeights& layer, bool int8_input) {
    if (!int8_input || !layer.w_gate.is_repacked() || !layer.w_up.is_repacked()) {
        return gate_up_then_swiglu(layer, int8_input);
    }
    gate_up_matmul_swiglu(activations_, layer.w_gate.repacked(), layer.w_up.repacked(),
                          gate_.data());
}

}  // namespace servelab
