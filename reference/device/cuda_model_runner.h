// cuda_model_runner.h — the engine's forward pass and sampling on an NVIDIA GPU.
//
// Part of the CUDA backend (issue 7; chapters 11.2-11.5 on a GPU). The same
// StepRunner contract as the CPU ModelRunner (reference/engine/step_runner.h),
// so the same Engine — scheduler, paged cache, continuous batching — drives
// it; `--device cuda` picks it. What lives where:
//   host:   the scheduler, the block allocator and block tables (bookkeeping
//           only: the PagedKvCache is created with KvStorage::kDevice), and
//           the plan step that flattens a step into integer arrays
//           (device_step_plan.h);
//   device: the weights (cuda_weights.h: bf16, or with --gpu-weights native
//           the file's Q4_0/Q4_1/Q8_0 blocks), the KV block pool (one key and
//           one value pool per layer, rows indexed exactly as the host
//           allocator's block ids say), the activations, and sampling. Only
//           the plan goes down and only token ids come back.
// One layer on the device, for the step's T tokens:
//   add_rmsnorm (residual += last sub-block's output; fused)  → q, k, v (a
//   projection: cuBLAS on bf16 weights; on native ones the quantized GEMV
//   up to 8 tokens, dequantize + cuBLAS beyond)
//   → RoPE → KV append into the pool → attention (FlashAttention-style over
//   the pool for prefill chunks; split-K GQA decode for decode-only steps)
//   → wo → add_rmsnorm → gate, up → SiLU·up → down (each a projection)
// Decode-only steps run as CUDA graphs, one per batch-size bucket (1, 2, 4,
// … 256 sequences, padded): a decode step is 15 kernels per layer, each a
// few microseconds, and launching them one by one from the host would cost
// as much as running them; a graph replays the whole step in one launch.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "reference/device/gpu_weights.h"
#include "reference/engine/step_runner.h"
#include "reference/model/model_config.h"
#include "reference/model/model_weights.h"

namespace servelab {

struct CudaRunnerOptions {
    int64_t num_kv_blocks = 1024;  // the device pool; cuda_kv_blocks_for_budget sizes it
    int64_t block_size = 16;
    int64_t max_tokens_per_step = 2048;  // activation buffers; larger steps grow them
    bool cuda_graphs = true;
    int64_t max_graph_batch = 256;  // decode steps with more sequences run without a graph
    // --gpu-weights: native keeps Q4_0/Q4_1/Q8_0 projections as blocks
    // (quantized GEMV up to 8 tokens, dequantize + cuBLAS beyond); bf16 is
    // the first GPU path, every projection through cuBLAS.
    GpuWeights weights = GpuWeights::kNative;
    // Prefill attention on the tensor cores (paged_prefill_attention_mma.h)
    // where the head width is one it takes (64, 128); false forces the
    // scalar kernel (paged_prefill_attention.h), to compare the two.
    bool tensor_core_prefill = true;
};

// Blocks of a bf16 device pool that fit `budget_bytes` (at least 1).
int64_t cuda_kv_blocks_for_budget(const ModelConfig& config, int64_t block_size,
                                  int64_t budget_bytes);
// Total memory of GPU 0, for --kv-memory fractions; throws without a GPU.
int64_t cuda_device_memory_bytes();

class CudaModelRunner : public StepRunner {
  public:
    // Uploads the weights and allocates the pool. Throws servelab::Error
    // without a usable GPU, for an MLA model, or when memory runs out.
    CudaModelRunner(const ModelConfig& config, const ModelWeights& weights,
                    const CudaRunnerOptions& options);
    ~CudaModelRunner() override;
    CudaModelRunner(const CudaModelRunner&) = delete;
    CudaModelRunner& operator=(const CudaModelRunner&) = delete;

    // The pool is the bookkeeping of this runner's device pool: created with
    // KvStorage::kDevice and options.block_size, with at most
    // options.num_kv_blocks blocks (a smaller one uses the first of them:
    // runner_generate.h's one-request pools).
    StepResult run_step(const StepBatch& batch, PagedKvCache& cache) override;
    int64_t num_tokens_computed() const override { return num_tokens_computed_; }
    KvStorage kv_storage() const override { return KvStorage::kDevice; }
    // The device sampler has temperature, top-k/p, min-p and the repetition
    // penalty; presence/frequency penalties and logit bias are the CPU's.
    // Logprobs are computed on the host from a copy of the asking rows.
    void check_sampling(const SamplingParams& params) const override;

    // The same forward pass, returning the logits of each chunk's last token
    // ((chunks, vocab) fp32, downloaded) instead of sampling: for tests
    // against the CPU runner.
    std::vector<float> forward_logits(const StepBatch& batch, PagedKvCache& cache);

    int64_t weight_bytes() const;
    int64_t kv_pool_bytes() const;
    int64_t num_graphs_captured() const;
    int64_t num_graph_launches() const { return num_graph_launches_; }

    struct Device;  // every CUDA object; opaque here, so this header needs no CUDA

  private:
    // Runs the forward pass up to the logits (on the device, not synchronized).
    void forward(const StepBatch& batch, PagedKvCache& cache);
    // Copy-on-write copies the host made since the last step, on the device.
    void replay_block_copies(std::span<const BlockCopy> copies, int64_t num_blocks);
    // The logprobs of the samples that ask for them, computed on the host.
    void add_logprobs(const StepBatch& batch, StepResult& result);

    const ModelConfig& config_;
    CudaRunnerOptions options_;
    std::unique_ptr<Device> device_;
    int64_t num_tokens_computed_ = 0;
    int64_t num_graph_launches_ = 0;
    int64_t last_num_seqs_ = 0;  // rows of logits the last forward left
};

}  // namespace servelab
