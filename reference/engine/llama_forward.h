// llama_forward.h — the llama forward pass on the CPU: one walk through the layers to logits.
//
// Part of the engine (Lab 1, chapter 11.2: the pass every decoding step
// runs; llama2.c's `forward`). Given the rows of one step, runs every
// layer and returns logits:
//
//   x = embed[tokens]
//   for each layer:
//     h = rmsnorm(x);  q, k, v = h·Wqᵀ, h·Wkᵀ, h·Wvᵀ;  rope(q, k)
//     append k, v to the cache;  x += attention(q, K, V) · Woᵀ
//     h = rmsnorm(x);  x += (silu(h·Wgateᵀ) * h·Wupᵀ) · Wdownᵀ
//   logits = rmsnorm(x) · Woutputᵀ
//
// Where keys and values go (KvTarget) is the only thing that differs
// between the cache layouts; the walk is the same for all three:
//   no cache (Lab 1, naive decoding): the step is the WHOLE sequence from
//     position 0, and attention sees only this step's keys;
//   contiguous (Lab 2): the step is the new tokens; each layer appends its
//     keys and values and attends over everything cached
//     (reference/attention/cached_attention.h);
//   paged (Lab 4): the same, in the blocks of a pool that each chunk's block
//     table names (kernels/cpu/paged_flash_attention.h). A step may hold
//     chunks of several sequences (Lab 5): the projections and the MLP run
//     once over all their rows, attention per sequence.
// MLA models (deepseek2, Lab 3) swap the attention block for
// reference/attention/mla_block.h; split models (Lab 7) run the same walk
// on this rank's shard, with an all-reduce after wo and after w_down
// (reference/parallel/parallel_linear.h).
//
// Kernel fusion (chapter 11.7, docs/kernel_fusion.md): four steps of the
// walk have a fused form (fusion_plan.h). The plan picks each step's
// kernels once, when the walk is built (or set_fusions changes the plan);
// the walk itself never asks which. A fused step falls back to its plain
// kernels where the weights cannot take it (fp32 activations, matrices not
// repacked). The logits are the same bits either way.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <vector>

#include "kernels/cpu/fused_qkv_rope.h"
#include "kernels/cpu/quant_matmul_fast.h"
#include "reference/attention/mla_block.h"
#include "reference/engine/activation_observer.h"
#include "reference/engine/fusion_plan.h"
#include "reference/engine/step_input.h"
#include "reference/kv/kv_cache.h"
#include "reference/kv/paged_kv_cache.h"
#include "reference/model/model_config.h"
#include "reference/model/model_weights.h"
#include "reference/parallel/communicator.h"
#include "reference/parallel/tensor_parallel.h"

namespace servelab {

// Where a step's keys and values go: nowhere (Lab 1), a contiguous cache
// (Lab 2) or a paged one (Lab 4, the chunks' block tables). At most one
// is set; without the paged cache there is exactly one chunk.
struct KvTarget {
    KvCache* contiguous = nullptr;
    PagedKvCache* paged = nullptr;
};

// One thread at a time: a pass writes the walk's activation buffers.
class LlamaForward {
  public:
    // Keeps references: config, weights and comm must outlive the walk.
    // `shard` is this rank's part of the model and `comm` its group (a whole
    // model: rank 0 of 1 and a communicator whose collectives do nothing).
    LlamaForward(const ModelConfig& config, const ModelWeights& weights,
                 const TensorParallelShard& shard, Communicator& comm, const FusionPlan& fusions,
                 MlaMode mla_mode);

    // The logits of the chunks' rows that ask for them, (rows, vocab_size):
    // per chunk in order its last token's row (kLastToken) or every token's
    // (kAllTokens). Valid until the next pass. The caller has checked the
    // chunks (model_runner.h): token ids, positions, and the cache they
    // continue.
    std::span<const float> run(std::span<const SequenceChunk> chunks, KvTarget kv);

    const FusionPlan& fusions() const { return fusions_; }
    // Picks every fused step's kernels again, from `plan`.
    void set_fusions(const FusionPlan& plan);
    // From now on every pass shows `observer` (null: none) the inputs of each
    // layer's projections (Lab 10's calibration). Needs exact matmul mode: a
    // pass that finds quantized activations instead throws.
    void set_activation_observer(ActivationObserver* observer) { observer_ = observer; }

    // Tokens pushed through the layers so far, over all passes.
    int64_t num_tokens_computed() const { return num_tokens_computed_; }
    // Rows that went through the output head so far.
    int64_t num_logit_rows_computed() const { return num_logit_rows_computed_; }

  private:
    // The projections reading one norm's output (its "readers").
    using Readers = std::initializer_list<const WeightMatrix*>;

    // The step's rows (every chunk's tokens, one chunk after another): their
    // tokens and positions, and buffers sized for them. Returns T.
    int64_t start_step(std::span<const SequenceChunk> chunks);
    // Attention of each chunk over its own cached tokens: q_, k_, v_ → attn_out_.
    void attend_chunks(int64_t layer_index, std::span<const SequenceChunk> chunks, KvTarget kv);
    void attend_chunk(int64_t layer_index, const SequenceChunk& chunk, int64_t row, KvTarget kv);
    // MLA's attention, then delta_ = its output · Woᵀ.
    void mla_attention(int64_t layer_index, const StepInput& step, KvCache& cache);
    std::span<const float> logits_of(std::span<const SequenceChunk> chunks);
    // y_i = h·W_iᵀ for matrices that read the same h (int8_input: the int8
    // blocks in activations_, else the fp32 rows in normed_).
    void project(std::span<const WeightMatrix* const> matrices, std::span<float* const> outputs,
                 bool int8_input);
    // Shows the observer (if any) rows of fp32 activations; `quantized` says
    // they exist only as int8 blocks, which an observer cannot see.
    void observe(int64_t layer_index, LinearInput input, const std::vector<float>& rows,
                 int64_t cols, bool quantized = false);

    // The fused steps, each in its plain and its fused form. set_fusions
    // points norm_, add_residual_, qkv_rope_ and gate_up_swiglu_ at one of each.
    //
    // h = rmsnorm(x) with the sub-block's `norm` (adding the residual that
    // add_rmsnorm left pending): fp32 rows in normed_ (returns false), or
    // (rmsnorm_quantize) int8 blocks in activations_ where every reader
    // takes them (returns true; they then skip their own quantization).
    bool norm_to_floats(const std::vector<float>& norm, Readers readers);
    bool norm_to_int8(const std::vector<float>& norm, Readers readers);
    // x += delta_: now, or (add_rmsnorm) in the next norm's pass over x.
    void add_residual_now();
    void add_residual_with_next_norm();
    void flush_residual();
    // q, k, v = h·W{q,k,v}ᵀ, then RoPE on q and k; or (rope_in_qkv) RoPE in
    // the matmul's epilogue, q and k rotated as their rows are computed.
    void qkv_then_rope(const LayerWeights& layer, bool int8_input);
    void qkv_with_rope(const LayerWeights& layer, bool int8_input);
    // gate_ = silu(h·W_gateᵀ) * h·W_upᵀ; or (swiglu_in_gate_up) SwiGLU in the
    // matmul's epilogue, the gate and up outputs never reaching memory.
    void gate_up_then_swiglu(const LayerWeights& layer, bool int8_input);
    void gate_up_with_swiglu(const LayerWeights& layer, bool int8_input);

    const ModelConfig& config_;
    const ModelWeights& weights_;
    const TensorParallelShard& shard_;
    Communicator& comm_;
    // A split model's projections read fp32 rows (column_parallel_linear).
    const bool split_;
    std::unique_ptr<MlaBlock> mla_;           // MLA models only
    ActivationObserver* observer_ = nullptr;  // Lab 10's calibration; null: none
    int64_t num_tokens_computed_ = 0;
    int64_t num_logit_rows_computed_ = 0;

    // The plan, and the kernels it picked for each fused step.
    FusionPlan fusions_;
    bool (LlamaForward::*norm_)(const std::vector<float>&, Readers) = nullptr;
    void (LlamaForward::*add_residual_)() = nullptr;
    void (LlamaForward::*qkv_rope_)(const LayerWeights&, bool) = nullptr;
    void (LlamaForward::*gate_up_swiglu_)(const LayerWeights&, bool) = nullptr;
    // True between a sub-block's end and the next norm when add_rmsnorm is
    // on: x_ still lacks delta_, which the next norm adds.
    bool residual_pending_ = false;

    // Activations of the current step, sized for num_tokens (T) on demand
    // (llama2.c's RunState, one step at a time). They only grow, so once the
    // largest step has run, a decode step allocates nothing here.
    std::vector<float> x_;              // (T, dim) residual stream
    std::vector<float> normed_;         // (T, dim) rmsnorm(x)
    std::vector<float> q_;              // (T, num_heads, head_dim)
    std::vector<float> k_;              // (T, num_kv_heads, head_dim)
    std::vector<float> v_;              // (T, num_kv_heads, head_dim)
    std::vector<float> attn_out_;       // (T, num_heads, v_head_dim)
    std::vector<float> delta_;          // (T, dim) output of a sub-block, added to x
    std::vector<float> gate_;           // (T, ffn_dim) gate, then silu(gate) * up
    std::vector<float> up_;             // (T, ffn_dim)
    std::vector<int64_t> positions_;    // (T)
    std::vector<TokenId> step_tokens_;  // (T) every chunk's tokens, in row order
    std::vector<float> logits_;         // (rows, vocab) the step's logits
    // Fused kernels only.
    QuantizedActivations activations_;  // (T, dim) int8 blocks of rmsnorm(x), fast mode
    RopeTable rope_table_;              // (T, rope_dim / 2) cos and sin of this step's angles
    bool rope_table_filled_ = false;    // rope_table_ holds this step's positions
};

}  // namespace servelab
