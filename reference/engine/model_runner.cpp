// model_runner.cpp — see model_runner.h.
#include "reference/engine/model_runner.h"

#include <fmt/format.h>

#include <algorithm>
#include <memory>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/fused_add_rmsnorm.h"
#include "kernels/cpu/fused_gate_up_swiglu.h"
#include "kernels/cpu/fused_qkv_rope.h"
#include "kernels/cpu/fused_rmsnorm_quantize.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/paged_flash_attention.h"
#include "kernels/cpu/residual.h"
#include "kernels/cpu/rmsnorm.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/swiglu.h"
#include "reference/attention/cached_attention.h"
#include "reference/attention/mla_attention.h"
#include "reference/common/error.h"
#include "reference/common/exercise_files.h"
#include "reference/parallel/parallel_linear.h"
#include "reference/speculative/verify_drafts.h"

namespace servelab {

ModelRunner::ModelRunner(const ModelConfig& config, const ModelWeights& weights, MlaMode mla_mode)
    : config_(config), weights_(weights), mla_mode_(mla_mode), shard_(plan_shard(config, 1, 0)) {}

ModelRunner::ModelRunner(const ModelConfig& config, const ModelWeights& weights,
                         const TensorParallelShard& shard, Communicator& comm)
    : config_(config),
      weights_(weights),
      mla_mode_(MlaMode::kAbsorbed),
      shard_(shard),
      comm_(&comm) {
    if (comm.size() != shard.num_ranks || comm.rank() != shard.rank) {
        throw Error(
            fmt::format("tensor parallel: the shard is rank {} of {}, the communicator {} of {}",
                        shard.rank, shard.num_ranks, comm.rank(), comm.size()));
    }
    if (config.is_mla() && shard.num_ranks > 1) {
        throw Error("tensor parallel: MLA models cannot be split");
    }
}

void ModelRunner::set_fusions(const FusionPlan& wanted) {
    const FusionPlan allowed = plan_fusions(true, reference_exercise_file_linked);
    fusions_ = {.rmsnorm_quantize = wanted.rmsnorm_quantize && allowed.rmsnorm_quantize,
                .add_rmsnorm = wanted.add_rmsnorm && allowed.add_rmsnorm,
                .rope_in_qkv = wanted.rope_in_qkv && allowed.rope_in_qkv,
                .swiglu_in_gate_up = wanted.swiglu_in_gate_up && allowed.swiglu_in_gate_up};
}

void ModelRunner::check_step(const StepInput& step) const {
    if (step.tokens.empty()) throw Error("forward: a step needs at least one token");
    const int64_t end_position = step.start_position + int64_t(step.tokens.size());
    if (step.start_position < 0 || end_position > config_.context_length) {
        throw Error(fmt::format("forward: positions [{}, {}) exceed the context length {}",
                                step.start_position, end_position, config_.context_length));
    }
    for (TokenId id : step.tokens) {
        if (id < 0 || id >= config_.vocab_size) {
            throw Error(fmt::format("forward: token id {} is outside the vocabulary [0, {})", id,
                                    config_.vocab_size));
        }
    }
}

void ModelRunner::check_cache(const StepInput& step, const KvCache* cache) const {
    // Without a KV cache there are no earlier keys to attend to, so a step
    // must hold the whole sequence from position 0; with one, it continues
    // exactly where the cache ends.
    if (cache == nullptr && step.start_position != 0) {
        throw Error("forward: without a KV cache a step must start at position 0");
    }
    if (cache != nullptr && step.start_position != cache->num_tokens()) {
        throw Error(
            fmt::format("forward: step starts at position {} but the KV cache holds {} "
                        "tokens",
                        step.start_position, cache->num_tokens()));
    }
    const int64_t step_end = step.start_position + int64_t(step.tokens.size());
    if (cache != nullptr && step_end > cache->max_tokens()) {
        throw Error(fmt::format("forward: step ends at position {}, past the KV cache's {} tokens",
                                step_end, cache->max_tokens()));
    }
}

void ModelRunner::resize_buffers(int64_t num_tokens) {
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
    if (config_.is_mla()) {
        q_a_.resize(n(config_.q_lora_rank));
        q_nope_.resize(n(config_.num_heads * config_.qk_nope_dim));
        q_pe_.resize(n(config_.num_heads * config_.rope_dim));
        kv_a_.resize(n(config_.kv_lora_rank + config_.rope_dim));
        c_kv_.resize(n(config_.kv_lora_rank));
        k_pe_.resize(n(config_.rope_dim));
    }
}

std::vector<float> ModelRunner::forward(const StepInput& step, KvCache* cache) {
    check_step(step);
    check_cache(step, cache);
    const SequenceChunk chunk{step, nullptr};
    const std::span<const float> logits = run_layers(std::span(&chunk, 1), {.contiguous = cache});
    return {logits.begin(), logits.end()};
}

std::vector<float> ModelRunner::forward(const StepInput& step, PagedKvCache& cache,
                                        const BlockTable& table) {
    const SequenceChunk chunk{step, &table};
    return forward_batch(std::span(&chunk, 1), cache);
}

std::vector<float> ModelRunner::forward_batch(std::span<const SequenceChunk> chunks,
                                              PagedKvCache& cache) {
    const std::span<const float> logits = run_batch(chunks, cache);
    return {logits.begin(), logits.end()};
}

std::span<const float> ModelRunner::run_batch(std::span<const SequenceChunk> chunks,
                                              PagedKvCache& cache) {
    if (chunks.empty()) throw Error("forward: a batch needs at least one sequence");
    if (config_.is_mla()) throw Error("forward: MLA models do not run on a paged cache yet");
    for (const SequenceChunk& chunk : chunks) {
        check_step(chunk.step);
        const int64_t step_end = chunk.step.start_position + int64_t(chunk.step.tokens.size());
        if (chunk.table == nullptr || step_end != chunk.table->num_tokens()) {
            throw Error(
                fmt::format("forward: step ends at position {} but the block table has {} "
                            "slots reserved",
                            step_end, chunk.table == nullptr ? 0 : chunk.table->num_tokens()));
        }
    }
    return run_layers(chunks, KvTarget{.paged = &cache});
}

StepResult ModelRunner::run_step(const StepBatch& batch, PagedKvCache& cache) {
    const std::span<const float> logits = run_batch(batch.chunks, cache);
    const size_t vocab_size = size_t(config_.vocab_size);
    // Where each chunk's rows end in `logits`: one row per chunk, or one per
    // token for chunks that asked for all (verification).
    std::vector<size_t>& rows_end = rows_end_;
    rows_end.clear();
    size_t num_rows = 0;
    for (const SequenceChunk& chunk : batch.chunks) {
        num_rows += chunk.step.logits_for == LogitsFor::kLastToken ? 1 : chunk.step.tokens.size();
        rows_end.push_back(num_rows);
    }
    const auto check_row = [&](int64_t row, const char* what) {
        if (row < 0 || size_t(row) >= batch.chunks.size()) {
            throw Error(fmt::format("run_step: {} of row {} in a batch of {} chunks", what, row,
                                    batch.chunks.size()));
        }
    };
    StepResult result;
    for (const SampleRequest& sample : batch.samples) {
        check_row(sample.row, "sample");
        const auto first =
            logits.begin() + std::ptrdiff_t((rows_end[size_t(sample.row)] - 1) * vocab_size);
        // A copy: the sampler edits it, and siblings share the row.
        sample_row_.assign(first, first + std::ptrdiff_t(vocab_size));
        if (sample.sampler->params().logprobs < 0) {
            result.sampled.push_back(sample.sampler->sample(sample_row_, sample.history));
            continue;
        }
        result.logprobs.resize(batch.samples.size());
        SampledLogprobs& logprobs = result.logprobs[result.sampled.size()].emplace();
        result.sampled.push_back(sample.sampler->sample(sample_row_, sample.history, &logprobs));
    }
    for (const VerifyRequest& verify : batch.verifications) {
        check_row(verify.row, "verification");
        const size_t rows = verify.drafts.size() + 1;
        const SequenceChunk& chunk = batch.chunks[size_t(verify.row)];
        if (chunk.step.logits_for != LogitsFor::kAllTokens || chunk.step.tokens.size() < rows) {
            throw Error("run_step: a verification's chunk must carry logits for its drafts");
        }
        const size_t first_row = rows_end[size_t(verify.row)] - rows;
        result.verified.push_back(
            verify_drafts(*verify.sampler, verify.history, verify.drafts, verify.draft_probs,
                          std::span(logits).subspan(first_row * vocab_size, rows * vocab_size),
                          config_.vocab_size));
    }
    share_rank0_tokens(result);
    return result;
}

// Every rank computed the same logits and drew with the same seeds, so the
// tokens already agree; taking rank 0's anyway makes that a guarantee, not
// an assumption about floating point, for the scheduler decisions that
// depend on them on every rank.
void ModelRunner::share_rank0_tokens(StepResult& result) {
    if (comm().size() == 1) return;
    broadcast_vector(comm(), result.sampled, 0);
    broadcast_vector(comm(), result.verified, 0);
    // Logprobs travel flat: per sample a count (-1: none asked), then the
    // chosen token and the top ones.
    std::vector<int32_t> counts;
    std::vector<TokenLogprob> flat;
    for (const std::optional<SampledLogprobs>& logprobs : result.logprobs) {
        counts.push_back(logprobs ? int32_t(logprobs->top.size()) : -1);
        if (!logprobs) continue;
        flat.push_back(logprobs->chosen);
        flat.insert(flat.end(), logprobs->top.begin(), logprobs->top.end());
    }
    broadcast_vector(comm(), counts, 0);
    broadcast_vector(comm(), flat, 0);
    result.logprobs.assign(counts.size(), std::nullopt);
    size_t next = 0;
    for (size_t i = 0; i < counts.size(); ++i) {
        if (counts[i] < 0) continue;
        SampledLogprobs& logprobs = result.logprobs[i].emplace();
        logprobs.chosen = flat.at(next++);
        for (int32_t j = 0; j < counts[i]; ++j) logprobs.top.push_back(flat.at(next++));
    }
}

std::span<const float> ModelRunner::run_layers(std::span<const SequenceChunk> chunks, KvTarget kv) {
    int64_t num_tokens = 0;
    for (const SequenceChunk& chunk : chunks) num_tokens += int64_t(chunk.step.tokens.size());
    resize_buffers(num_tokens);
    num_tokens_computed_ += num_tokens;

    // The step's rows: every chunk's tokens, one chunk after another.
    step_tokens_.clear();
    int64_t row = 0;
    for (const SequenceChunk& chunk : chunks) {
        for (size_t t = 0; t < chunk.step.tokens.size(); ++t, ++row) {
            positions_[size_t(row)] = chunk.step.start_position + int64_t(t);
            step_tokens_.push_back(chunk.step.tokens[t]);
        }
    }
    vocab_parallel_embedding(step_tokens_, weights_.token_embedding, shard_, x_.data(), comm());
    residual_pending_ = false;
    rope_table_filled_ = false;

    // MLA attends through its latent cache even in naive decoding: without a
    // cache the step gets a scratch one holding just this step's tokens,
    // which is what attention without a cache sees anyway.
    KvCache* mla_cache = kv.contiguous;
    std::unique_ptr<KvCache> step_cache;
    if (mla_cache == nullptr && config_.is_mla()) {
        step_cache = std::make_unique<KvCache>(config_, num_tokens);
        mla_cache = step_cache.get();
    }
    for (int64_t layer = 0; layer < config_.num_layers; ++layer) {
        if (config_.is_mla()) {
            mla_attention_block(layer, chunks[0].step, *mla_cache);
        } else {
            attention_block(layer, chunks, kv);
        }
        mlp_block(layer, num_tokens);
    }
    flush_residual();
    if (kv.contiguous != nullptr) kv.contiguous->commit(num_tokens);
    return logits_of(chunks);
}

// Only the rows that need logits go through the final norm and the head:
// the vocabulary projection is the largest matmul.
std::span<const float> ModelRunner::logits_of(std::span<const SequenceChunk> chunks) {
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
                          config_.vocab_size, logits_.data(), comm());
    return std::span(logits_).first(num_logits);
}

// h = rmsnorm(x) with the sub-block's `norm`, the input of its first
// matmuls (`readers`): as int8 blocks in activations_ where every reader
// takes them and rmsnorm_quantize is on (returns true; the readers then
// skip their own quantization), else as fp32 rows in normed_ (false). A
// residual the previous sub-block left pending is added to x_ in the same pass.
bool ModelRunner::block_input(const std::vector<float>& norm,
                              std::span<const WeightMatrix* const> readers) {
    const int64_t num_tokens = int64_t(positions_.size());
    const int64_t dim = config_.dim;
    const float eps = config_.rms_norm_eps;
    bool quantized = fusions_.rmsnorm_quantize && !readers.empty();
    for (const WeightMatrix* m : readers) {
        quantized = quantized && m->takes_quantized_input() && m->cols() == dim;
    }
    const bool add = residual_pending_;
    residual_pending_ = false;
    if (add && quantized) {
        add_rmsnorm_quantize_rows(x_.data(), delta_.data(), norm.data(), num_tokens, dim, eps,
                                  activations_);
    } else if (add) {
        add_rmsnorm_rows(x_.data(), delta_.data(), norm.data(), normed_.data(), num_tokens, dim,
                         eps);
    } else if (quantized) {
        rmsnorm_quantize_rows(x_.data(), norm.data(), num_tokens, dim, eps, activations_);
    } else {
        rmsnorm_rows(x_.data(), norm.data(), normed_.data(), num_tokens, dim, eps);
    }
    return quantized;
}

// x += delta_, the sub-block's output: now, or (add_rmsnorm) in the next
// block_input's pass over x.
void ModelRunner::add_residual() {
    if (fusions_.add_rmsnorm) {
        residual_pending_ = true;
    } else {
        add_inplace(x_.data(), delta_.data(), int64_t(positions_.size()) * config_.dim);
    }
}

// The pending residual, where no norm follows (after the last layer).
void ModelRunner::flush_residual() {
    if (!residual_pending_) return;
    add_inplace(x_.data(), delta_.data(), int64_t(positions_.size()) * config_.dim);
    residual_pending_ = false;
}

void ModelRunner::attention_block(int64_t layer_index, std::span<const SequenceChunk> chunks,
                                  KvTarget kv) {
    const LayerWeights& layer = weights_.layers[size_t(layer_index)];
    const int64_t num_tokens = int64_t(positions_.size());
    // Column-parallel: this rank's heads (all of them when not split). A
    // whole model runs the three as one pass over the normed activations.
    const bool whole = shard_.num_ranks == 1;
    const WeightMatrix* qkv[] = {&layer.wq, &layer.wk, &layer.wv};
    float* outputs[] = {q_.data(), k_.data(), v_.data()};
    const bool quantized =
        block_input(layer.attn_norm, whole ? std::span(qkv) : std::span<const WeightMatrix*>());
    observe(layer_index, LinearInput::kAttentionIn, normed_, config_.dim, quantized);
    const RopeParams rope{config_.head_dim, config_.rope_dim, config_.rope_freq_base};
    const bool repacked =
        layer.wq.is_repacked() && layer.wk.is_repacked() && layer.wv.is_repacked();
    if (quantized && repacked && fusions_.rope_in_qkv) {
        // RoPE in the epilogue: q and k are rotated as their rows are computed.
        // The angles depend on the position only: once per step, for every layer.
        if (!rope_table_filled_) {
            fill_rope_table(positions_.data(), num_tokens, rope, rope_table_);
            rope_table_filled_ = true;
        }
        qkv_matmul_rope(activations_, layer.wq.repacked(), layer.wk.repacked(), layer.wv.repacked(),
                        q_.data(), k_.data(), v_.data(), rope, rope_table_);
    } else {
        if (quantized) {
            multiply_same_input_quantized(qkv, activations_, outputs);
        } else if (whole) {
            multiply_same_input(qkv, normed_.data(), outputs, num_tokens);
        } else {
            column_parallel_linear(normed_.data(), layer.wq, q_.data(), num_tokens);
            column_parallel_linear(normed_.data(), layer.wk, k_.data(), num_tokens);
            column_parallel_linear(normed_.data(), layer.wv, v_.data(), num_tokens);
        }
        rope_apply_rows(q_.data(), positions_.data(), num_tokens, config_.num_heads, rope);
        rope_apply_rows(k_.data(), positions_.data(), num_tokens, config_.num_kv_heads, rope);
    }

    // Everything above ran over the whole step at once; attention is per
    // sequence, each over its own cached tokens.
    int64_t row = 0;
    for (const SequenceChunk& chunk : chunks) {
        attend_chunk(layer_index, chunk, row, kv);
        row += int64_t(chunk.step.tokens.size());
    }

    // Row-parallel: this rank's heads' share of the output, summed over ranks.
    observe(layer_index, LinearInput::kAttentionOut, attn_out_, config_.q_dim());
    row_parallel_linear(attn_out_.data(), layer.wo, delta_.data(), num_tokens, comm());
    add_residual();
}

void ModelRunner::attend_chunk(int64_t layer_index, const SequenceChunk& chunk, int64_t row,
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

// DeepSeek-V2 attention. Per head, queries are [q_nope | q_pe]; the layer
// caches c_kv = RMSNorm(first kv_lora_rank of x·W_kv_aᵀ) and k_pe = RoPE(the
// last rope_dim), and the chosen MLA form attends over them.
void ModelRunner::mla_attention_block(int64_t layer_index, const StepInput& step, KvCache& cache) {
    const LayerWeights& layer = weights_.layers[size_t(layer_index)];
    const ModelConfig& c = config_;
    const int64_t num_tokens = int64_t(step.tokens.size());
    block_input(layer.attn_norm, {});  // fp32 rows: MLA's matmuls read floats

    // Queries, optionally through the low-rank bottleneck (q_lora_rank > 0).
    if (c.q_lora_rank > 0) {
        matmul(normed_.data(), layer.wq_a.data(), q_a_.data(), num_tokens, c.dim, c.q_lora_rank);
        rmsnorm_rows(q_a_.data(), layer.q_a_norm.data(), q_a_.data(), num_tokens, c.q_lora_rank,
                     c.rms_norm_eps);
        matmul(q_a_.data(), layer.wq_b.data(), q_.data(), num_tokens, c.q_lora_rank, c.q_dim());
    } else {
        layer.wq.multiply(normed_.data(), q_.data(), num_tokens);
    }
    for (int64_t row = 0; row < num_tokens * c.num_heads; ++row) {  // split [nope | pe]
        const float* q_head = q_.data() + row * c.head_dim;
        std::copy(q_head, q_head + c.qk_nope_dim, q_nope_.data() + row * c.qk_nope_dim);
        std::copy(q_head + c.qk_nope_dim, q_head + c.head_dim, q_pe_.data() + row * c.rope_dim);
    }

    // The latent and the shared RoPE key: all this layer caches.
    const int64_t kv_a_width = c.kv_lora_rank + c.rope_dim;
    matmul(normed_.data(), layer.wkv_a.data(), kv_a_.data(), num_tokens, c.dim, kv_a_width);
    for (int64_t t = 0; t < num_tokens; ++t) {
        const float* row = kv_a_.data() + t * kv_a_width;
        rmsnorm(row, layer.kv_a_norm.data(), c_kv_.data() + t * c.kv_lora_rank, c.kv_lora_rank,
                c.rms_norm_eps);
        std::copy(row + c.kv_lora_rank, row + kv_a_width, k_pe_.data() + t * c.rope_dim);
    }
    const RopeParams rope{c.rope_dim, c.rope_dim, c.rope_freq_base};
    rope_apply_rows(q_pe_.data(), positions_.data(), num_tokens, c.num_heads, rope);
    rope_apply_rows(k_pe_.data(), positions_.data(), num_tokens, 1, rope);
    cache.write(layer_index, step.start_position, k_pe_.data(), c_kv_.data(), num_tokens);

    const MlaShape shape{.num_queries = num_tokens,
                         .num_keys = step.start_position + num_tokens,
                         .num_heads = c.num_heads,
                         .qk_nope_dim = c.qk_nope_dim,
                         .rope_dim = c.rope_dim,
                         .v_head_dim = c.v_head_dim,
                         .kv_lora_rank = c.kv_lora_rank};
    const auto attend = mla_mode_ == MlaMode::kNaive ? mla_attention_naive : mla_attention_absorbed;
    attend(q_nope_.data(), q_pe_.data(), cache.keys(layer_index), cache.values(layer_index),
           layer.wkv_b.data(), attn_out_.data(), shape);

    layer.wo.multiply(attn_out_.data(), delta_.data(), num_tokens);
    add_residual();
}

void ModelRunner::mlp_block(int64_t layer_index, int64_t num_tokens) {
    const LayerWeights& layer = weights_.layers[size_t(layer_index)];
    const int64_t ffn_dim = config_.ffn_dim;
    // gate and up column-parallel over this rank's ffn features; SwiGLU is
    // element-wise, so it needs no other rank's; down row-parallel.
    const bool whole = shard_.num_ranks == 1;
    const WeightMatrix* gate_up[] = {&layer.w_gate, &layer.w_up};
    float* outputs[] = {gate_.data(), up_.data()};
    const bool quantized =
        block_input(layer.ffn_norm, whole ? std::span(gate_up) : std::span<const WeightMatrix*>());
    observe(layer_index, LinearInput::kMlpIn, normed_, config_.dim, quantized);
    if (quantized && layer.w_gate.is_repacked() && layer.w_up.is_repacked() &&
        fusions_.swiglu_in_gate_up) {
        // silu(gate)·up in the epilogue: the gate and up outputs never reach memory.
        gate_up_matmul_swiglu(activations_, layer.w_gate.repacked(), layer.w_up.repacked(),
                              gate_.data());
    } else {
        if (quantized) {
            multiply_same_input_quantized(gate_up, activations_, outputs);
        } else if (whole) {  // one pass over the normed activations, as for Q, K, V
            multiply_same_input(gate_up, normed_.data(), outputs, num_tokens);
        } else {
            column_parallel_linear(normed_.data(), layer.w_gate, gate_.data(), num_tokens);
            column_parallel_linear(normed_.data(), layer.w_up, up_.data(), num_tokens);
        }
        swiglu(gate_.data(), up_.data(), gate_.data(), num_tokens * ffn_dim);
    }
    observe(layer_index, LinearInput::kMlpHidden, gate_, ffn_dim);
    row_parallel_linear(gate_.data(), layer.w_down, delta_.data(), num_tokens, comm());
    add_residual();
}

void ModelRunner::observe(int64_t layer_index, LinearInput input, const std::vector<float>& rows,
                          int64_t cols, bool quantized) {
    if (observer_ == nullptr) return;
    if (quantized) {
        throw Error(
            "an activation observer needs exact matmul mode (--cpu-kernels exact): in fast "
            "mode the normed activations exist only as int8 blocks");
    }
    observer_->observe(layer_index, input, rows.data(), int64_t(positions_.size()), cols);
}

}  // namespace servelab
