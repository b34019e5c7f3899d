// model_runner.h — the llama forward pass on the CPU.
//
// Part of the engine (Lab 1; chapter: why decoding is serial). Given the
// token ids of one step, runs every layer and returns logits:
//
//   x = embed[tokens]
//   for each layer:
//     h = rmsnorm(x);  q, k, v = h·Wqᵀ, h·Wkᵀ, h·Wvᵀ;  rope(q, k)
//     x += attention(q, k, v) · Woᵀ
//     h = rmsnorm(x);  x += (silu(h·Wgateᵀ) * h·Wupᵀ) · Wdownᵀ
//   logits = rmsnorm(x) · Woutputᵀ
//
// Without a KV cache (Lab 1, naive decoding) every step passes the WHOLE
// sequence, starting at position 0, and attention sees only this step's keys.
// With a cache (Lab 2) a step passes only the new tokens, starting at the
// cache's end: each layer appends its keys and values to the cache and
// attends over everything cached (reference/attention/cached_attention.h).
// The walk through the layers is the same either way.
//
// With a paged cache (Lab 4) the same, except that the keys and values live
// in the blocks of a pool that the sequence's block table names, and
// attention gathers them through the table (kernels/cpu/paged_attention.h).
//
// Split over N ranks (Lab 7, tensor parallelism) each rank's runner holds
// its shard (reference/parallel/shard_loader.h) and runs the same walk: the
// projections are column- and row-parallel layers, with an all-reduce after
// wo and after w_down, the embedding and the head are vocab-parallel
// (reference/parallel/parallel_linear.h). A whole model is the case N = 1,
// with a communicator whose collectives do nothing.
//
// Kernel fusion (chapter 11.7, docs/kernel_fusion.md): where the plan
// allows (reference/engine/fusion_plan.h) the walk is the same with four
// pairs of kernels merged: x += delta with the next rmsnorm, rmsnorm with
// fast mode's activation quantization, RoPE into the Q/K/V matmul and
// silu(gate)·up into the gate/up matmul. The logits are the same bits.
//
// MLA models (deepseek2, Lab 3) replace the q/k/v projections with
// mla_attention_block: queries as before, but the layer caches only the
// latent c_kv and the shared RoPE key k_pe (reference/attention/mla_attention.h).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/cpu/fused_qkv_rope.h"
#include "kernels/cpu/quant_matmul_fast.h"
#include "reference/engine/activation_observer.h"
#include "reference/engine/fusion_plan.h"
#include "reference/engine/step_input.h"
#include "reference/engine/step_runner.h"
#include "reference/kv/block_table.h"
#include "reference/kv/kv_cache.h"
#include "reference/kv/paged_kv_cache.h"
#include "reference/model/model_config.h"
#include "reference/model/model_weights.h"
#include "reference/model/tokenizer.h"
#include "reference/parallel/communicator.h"
#include "reference/parallel/tensor_parallel.h"

namespace servelab {

// How MLA layers read the latent cache (both give the same logits).
enum class MlaMode { kAbsorbed, kNaive };

// One thread at a time: a forward pass writes the runner's activation
// buffers. Threads that compute at once need a runner each (they may share
// the config and weights, which are only read).
class ModelRunner : public StepRunner {
  public:
    // The runner keeps references: config and weights must outlive it.
    ModelRunner(const ModelConfig& config, const ModelWeights& weights,
                MlaMode mla_mode = MlaMode::kAbsorbed);
    // One rank of a split model (Lab 7): `config` is the shard's
    // local_config, `weights` its shard, `comm` the group's communicator
    // (which must outlive the runner). Logits come back whole on every rank;
    // the tokens run_step returns are rank 0's, broadcast, so every rank's
    // engine makes the same decisions. (Single-request decoding through
    // forward() — generator.h, the contiguous and no-cache layouts — samples
    // on each rank from the logits alone: identical on every rank as long
    // as the all-reduce gives every rank the same bits, which the ring does
    // by construction and MPI's reductions do in practice.)
    ModelRunner(const ModelConfig& config, const ModelWeights& weights,
                const TensorParallelShard& shard, Communicator& comm);

    // Returns logits, (rows, vocab_size) row-major with rows = 1 for
    // kLastToken and tokens.size() for kAllTokens. With a cache, the step must
    // start at cache->num_tokens() and its tokens are appended to the cache.
    // Throws servelab::Error on an empty step, an out-of-range token id, a
    // position past the context or a start position the cache does not match.
    std::vector<float> forward(const StepInput& step, KvCache* cache = nullptr);
    // The same over a paged cache (Lab 4). The step's slots must already be
    // reserved in `table` (the step ends at table.num_tokens()); its keys and
    // values are written to the blocks the table names.
    std::vector<float> forward(const StepInput& step, PagedKvCache& cache, const BlockTable& table);
    // One forward pass over chunks of several sequences at once (Lab 5). The
    // projections and the MLP run once over every token of the step — one
    // matmul per weight matrix for the whole batch, which is what batching
    // buys — and attention runs per sequence, through its block table. Each
    // chunk must end at its table's num_tokens(); no two chunks may share a
    // table. Logits: for each chunk in order, the row of its last token
    // (kLastToken) or of each of its tokens (kAllTokens).
    std::vector<float> forward_batch(std::span<const SequenceChunk> chunks, PagedKvCache& cache);

    // Tokens pushed through the layers so far, over all steps: the prefill
    // work a prefix-cache hit saves shows up here (Lab 4).
    int64_t num_tokens_computed() const override { return num_tokens_computed_; }
    // Rows that went through the output head so far (the head's all-gather).
    int64_t num_logit_rows_computed() const { return num_logit_rows_computed_; }

    // The engine's step on the CPU (step_runner.h): forward_batch, then each
    // sample drawn by its request's Sampler from a copy of its row.
    StepResult run_step(const StepBatch& batch, PagedKvCache& cache) override;

    const TensorParallelShard& shard() const { return shard_; }
    // The fused kernels this runner uses: plan_fusions() when it was built.
    const FusionPlan& fusions() const { return fusions_; }
    // Tests and benchmarks compare the paths. A fusion whose reference
    // kernel is not linked stays off whatever is asked.
    void set_fusions(const FusionPlan& wanted);
    // From now on every forward pass shows `observer` (null: none) the inputs
    // of each layer's projections (Lab 10's calibration). Needs exact matmul
    // mode: a pass that finds quantized activations instead throws.
    void set_activation_observer(ActivationObserver* observer) { observer_ = observer; }
    // What this rank's collectives moved so far (the cost model's counters).
    const CommStats& comm_stats() const { return comm_ ? comm_->stats() : solo_.stats(); }

  private:
    // Where a step's keys and values go: nowhere (Lab 1), a contiguous cache
    // (Lab 2) or a paged one (Lab 4, the chunks' block tables). At most one
    // is set; without the paged cache there is exactly one chunk.
    struct KvTarget {
        KvCache* contiguous = nullptr;
        PagedKvCache* paged = nullptr;
    };
    // The step's logits, in logits_ (valid until the next step).
    std::span<const float> run_layers(std::span<const SequenceChunk> chunks, KvTarget kv);
    std::span<const float> run_batch(std::span<const SequenceChunk> chunks, PagedKvCache& cache);
    void check_step(const StepInput& step) const;
    void check_cache(const StepInput& step, const KvCache* cache) const;
    void resize_buffers(int64_t num_tokens);
    void attention_block(int64_t layer_index, std::span<const SequenceChunk> chunks, KvTarget kv);
    // Attention of one chunk, whose tokens are rows [row, row + n) of the step.
    void attend_chunk(int64_t layer_index, const SequenceChunk& chunk, int64_t row, KvTarget kv);
    std::span<const float> logits_of(std::span<const SequenceChunk> chunks);
    void mla_attention_block(int64_t layer_index, const StepInput& step, KvCache& cache);
    void mlp_block(int64_t layer_index, int64_t num_tokens);
    // Shows the observer (if any) rows of fp32 activations; `quantized` says
    // they exist only as int8 blocks, which an observer cannot see.
    void observe(int64_t layer_index, LinearInput input, const std::vector<float>& rows,
                 int64_t cols, bool quantized = false);
    bool block_input(const std::vector<float>& norm, std::span<const WeightMatrix* const> readers);
    void add_residual();
    void flush_residual();
    void share_rank0_tokens(StepResult& result);

    const ModelConfig& config_;
    const ModelWeights& weights_;
    MlaMode mla_mode_;
    Communicator& comm() { return comm_ ? *comm_ : solo_; }

    SoloCommunicator solo_;         // a whole model's (its collectives do nothing)
    TensorParallelShard shard_;     // this rank's part (a whole model: rank 0 of 1)
    Communicator* comm_ = nullptr;  // a split model's group; null: solo_
    int64_t num_tokens_computed_ = 0;
    int64_t num_logit_rows_computed_ = 0;
    FusionPlan fusions_ = plan_fusions();
    // True between a sub-block's end and the next block_input when
    // add_rmsnorm is on: x_ still lacks delta_, which the next norm adds.
    bool residual_pending_ = false;
    ActivationObserver* observer_ = nullptr;  // Lab 10's calibration; null: none

    // Activations of the current step, sized for num_tokens (T) on demand
    // (llama2.c's RunState, one step at a time). They only grow, so once the
    // largest step has run, a decode step allocates nothing here.
    std::vector<float> x_;              // (T, dim) residual stream
    std::vector<float> normed_;         // (T, dim) rmsnorm(x)
    std::vector<float> q_;              // (T, num_heads, head_dim)
    std::vector<float> k_;              // (T, num_kv_heads, head_dim)
    std::vector<float> v_;              // (T, num_kv_heads, head_dim)
    std::vector<float> attn_out_;       // (T, num_heads, head_dim)
    std::vector<float> delta_;          // (T, dim) output of a sub-block, added to x
    std::vector<float> gate_;           // (T, ffn_dim) gate, then silu(gate) * up
    std::vector<float> up_;             // (T, ffn_dim)
    std::vector<int64_t> positions_;    // (T)
    std::vector<TokenId> step_tokens_;  // (T) every chunk's tokens, in row order
    std::vector<float> logits_;         // (rows, vocab) the step's logits
    std::vector<float> sample_row_;     // (vocab) run_step's copy of the row a sample reads
    std::vector<size_t> rows_end_;      // run_step: where each chunk's logits rows end
    // Fused kernels only.
    QuantizedActivations activations_;  // (T, dim) int8 blocks of rmsnorm(x), fast mode
    RopeTable rope_table_;              // (T, rope_dim / 2) cos and sin of this step's angles
    bool rope_table_filled_ = false;    // rope_table_ holds this step's positions
    // MLA only.
    std::vector<float> q_a_;     // (T, q_lora_rank) the query bottleneck
    std::vector<float> q_nope_;  // (T, num_heads, qk_nope_dim)
    std::vector<float> q_pe_;    // (T, num_heads, rope_dim)
    std::vector<float> kv_a_;    // (T, kv_lora_rank + rope_dim): c_kv | k_pe before norm / RoPE
    std::vector<float> c_kv_;    // (T, kv_lora_rank)
    std::vector<float> k_pe_;    // (T, rope_dim)
};

}  // namespace servelab
