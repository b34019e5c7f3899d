// cuda_model_runner.cpp — see cuda_model_runner.h.
#include "reference/device/cuda_model_runner.h"

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <map>
#include <unordered_set>

#include "kernels/common/error.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/device_info.h"
#include "kernels/cuda/fused_norm_kernels.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/kv_append.h"
#include "kernels/cuda/norm_kernels.h"
#include "kernels/cuda/paged_decode_attention.h"
#include "kernels/cuda/paged_prefill_attention.h"
#include "kernels/cuda/paged_prefill_attention_mma.h"
#include "kernels/cuda/quant_dequantize.h"
#include "kernels/cuda/quant_gemv.h"
#include "kernels/cuda/rope_kernels.h"
#include "kernels/cuda/sampling_kernels.h"
#include "reference/device/cuda_weights.h"
#include "reference/device/device_step_plan.h"

namespace servelab {
namespace {

using bf16 = __nv_bfloat16;
template <typename T>
using DeviceBuffer = cuda::DeviceBuffer<T>;

constexpr size_t kCublasWorkspaceBytes = size_t(32) << 20;  // cuBLAS's advice for Hopper

int64_t ceil_div(int64_t a, int64_t b) {
    return (a + b - 1) / b;
}

// The decode attention's shape for `num_seqs` sequences whose block
// tables have `max_blocks_per_seq` columns.
cuda::PagedDecodeShape decode_shape_of(const ModelConfig& c, const CudaRunnerOptions& options,
                                       int64_t num_seqs, int64_t max_blocks_per_seq) {
    return {.num_seqs = num_seqs,
            .num_heads = c.num_heads,
            .num_kv_heads = c.num_kv_heads,
            .head_dim = c.head_dim,
            .block_size = options.block_size,
            .max_blocks_per_seq = max_blocks_per_seq,
            .max_context_len = c.context_length};
}

// The graph bucket for a decode batch of `num_seqs`: the next power of two,
// so at most half of a replayed batch is padding, and log2(256) + 1 = 9
// graphs cover every size.
int64_t graph_bucket(int64_t num_seqs, int64_t max_graph_batch) {
    return std::min(int64_t(std::bit_ceil(uint64_t(num_seqs))), max_graph_batch);
}

// The distinct ids among the last `window` tokens of `history` (0 = all):
// the tokens the repetition penalty divides, each once, as the CPU does.
void penalty_ids(std::span<const TokenId> history, int32_t window, int64_t vocab_size,
                 std::vector<int32_t>& out) {
    const size_t start =
        (window > 0 && history.size() > size_t(window)) ? history.size() - size_t(window) : 0;
    std::unordered_set<TokenId> seen;
    for (size_t i = start; i < history.size(); ++i) {
        const TokenId id = history[i];
        if (id >= 0 && id < vocab_size && seen.insert(id).second) out.push_back(id);
    }
}

}  // namespace

int64_t cuda_kv_blocks_for_budget(const ModelConfig& config, int64_t block_size,
                                  int64_t budget_bytes) {
    const int64_t block_bytes =
        2 * config.num_layers * block_size * config.kv_dim() * int64_t(sizeof(bf16));
    return std::max<int64_t>(1, budget_bytes / block_bytes);
}

int64_t cuda_device_memory_bytes() {
    const cuda::DeviceQuery query = cuda::query_devices();
    if (query.devices.empty()) {
        throw Error("--device cuda: no usable GPU (" +
                    (query.error.empty() ? std::string("no devices") : query.error) + ")");
    }
    return int64_t(query.devices[0].total_memory_bytes);
}

// Activations for a step of up to `tokens` tokens — and so up to `tokens`
// sequences, each computing at least one.
struct Activations {
    Activations(const ModelConfig& c, int64_t tokens, int64_t max_blocks_per_seq,
                int64_t decode_workspace_floats)
        : capacity_tokens(tokens),
          x(size_t(tokens * c.dim)),
          normed(size_t(tokens * c.dim)),
          q(size_t(tokens * c.q_dim())),
          k(size_t(tokens * c.kv_dim())),
          v(size_t(tokens * c.kv_dim())),
          attn(size_t(tokens * c.attn_out_dim())),
          delta(size_t(tokens * c.dim)),
          gate(size_t(tokens * c.ffn_dim)),
          up(size_t(tokens * c.ffn_dim)),
          act(size_t(tokens * c.ffn_dim)),
          last_hidden(size_t(tokens * c.dim)),
          logits(size_t(tokens * c.vocab_size)),
          // The plan: 3 arrays of tokens, 3 of sequences (+1) and the tables.
          plan(size_t(6 * tokens + 1 + tokens * max_blocks_per_seq)),
          decode_workspace(size_t(decode_workspace_floats)) {}

    int64_t capacity_tokens;
    DeviceBuffer<bf16> x, normed, q, k, v, attn, delta, gate, up, act, last_hidden;
    DeviceBuffer<float> logits;
    DeviceBuffer<int32_t> plan;
    DeviceBuffer<float> decode_workspace;
};

struct CudaModelRunner::Device {
    cudaStream_t stream = nullptr;
    cuda::CublasHandle cublas;
    DeviceBuffer<uint8_t> cublas_workspace{kCublasWorkspaceBytes};
    CudaWeights weights;
    DeviceBuffer<float> rope_table{0};
    std::vector<DeviceBuffer<bf16>> key_pools, value_pools;  // (num_layers)
    std::unique_ptr<Activations> act;
    int64_t max_blocks_per_seq = 0;             // the widest block table: the whole context
    int64_t num_sms = 0;                        // sizes the split-K decode's grid
    std::map<int64_t, cudaGraphExec_t> graphs;  // decode step, by batch bucket
    // Copy-on-write pairs and sampling inputs of the current step.
    DeviceBuffer<int32_t> copy_pairs{0};
    DeviceBuffer<cuda::DeviceSample> samples{0};
    DeviceBuffer<int32_t> penalty_tokens{0};
    DeviceBuffer<uint64_t> mask_words{0};  // constrained samples' grammar masks (Lab 12)
    DeviceBuffer<int32_t> sampled{0};
    DeviceBuffer<float> sampling_workspace{0};
    // Native weights (cuda_weights.h): the GEMV's int8 activations (up to 8
    // tokens of the widest input) and the bf16 scratch a native matrix is
    // dequantized into for cuBLAS past 8 tokens. Empty with bf16 weights.
    DeviceBuffer<int8_t> x_codes{0};
    DeviceBuffer<float2> x_scales{0};
    DeviceBuffer<bf16> dequant_scratch{0};

    ~Device() {
        drop_graphs();
        if (stream != nullptr) cudaStreamDestroy(stream);
    }
    // Graphs hold the activation pointers they were captured with.
    void drop_graphs() {
        for (auto& [bucket, exec] : graphs) cudaGraphExecDestroy(exec);
        graphs.clear();
    }
};

namespace {

// Grows `buffer` to at least `count` elements (contents are not kept).
template <typename T>
void ensure_size(DeviceBuffer<T>& buffer, size_t count) {
    if (buffer.size() < count) buffer = DeviceBuffer<T>(std::max(count, 2 * buffer.size()));
}

template <typename T>
void upload_async(DeviceBuffer<T>& buffer, std::span<const T> host, cudaStream_t stream) {
    ensure_size(buffer, host.size());
    SERVELAB_CUDA_CHECK(cudaMemcpyAsync(buffer.data(), host.data(), host.size_bytes(),
                                        cudaMemcpyHostToDevice, stream));
}

}  // namespace

CudaModelRunner::CudaModelRunner(const ModelConfig& config, const ModelWeights& weights,
                                 const CudaRunnerOptions& options)
    : config_(config), options_(options) {
    cuda_device_memory_bytes();  // throws, with the runtime's reason, without a GPU
    if (config.is_mla()) throw Error("--device cuda: MLA models run on the CPU only for now");
    if (options.num_kv_blocks < 1 || options.block_size < 1) {
        throw Error("--device cuda: the KV pool needs at least one block of at least one token");
    }
    if (options.num_kv_blocks * options.block_size >= (int64_t(1) << 31)) {
        throw Error("--device cuda: the KV pool's rows must be addressable by int32 slots");
    }
    SERVELAB_CUDA_CHECK(cudaSetDevice(0));
    device_ = std::make_unique<Device>();
    Device& d = *device_;
    SERVELAB_CUDA_CHECK(cudaStreamCreateWithFlags(&d.stream, cudaStreamNonBlocking));
    // One stream and one workspace for the handle's whole life (gemm.cu
    // keeps both), so a decode step can be captured in a graph.
    if (cublasSetStream(d.cublas.get(), d.stream) != CUBLAS_STATUS_SUCCESS ||
        cublasSetWorkspace(d.cublas.get(), d.cublas_workspace.data(), kCublasWorkspaceBytes) !=
            CUBLAS_STATUS_SUCCESS) {
        throw Error("--device cuda: could not bind cuBLAS to the runner's stream and workspace");
    }
    d.weights = CudaWeights::upload(config, weights, options.weights);
    const int64_t widest = d.weights.widest_native_cols();
    d.x_codes = DeviceBuffer<int8_t>(size_t(cuda::kQuantGemvMaxTokens * widest));
    d.x_scales = DeviceBuffer<float2>(size_t(cuda::kQuantGemvMaxTokens * widest / 32));
    d.dequant_scratch = DeviceBuffer<bf16>(size_t(d.weights.largest_layer_native_elements()));

    const RopeParams rope{config.head_dim, config.rope_dim, config.rope_freq_base};
    const std::vector<float> table = cuda::rope_cos_sin_table(rope, config.context_length);
    d.rope_table = DeviceBuffer<float>(table.size());
    d.rope_table.upload(table);

    const size_t pool_elements =
        size_t(options.num_kv_blocks * options.block_size * config.kv_dim());
    for (int64_t layer = 0; layer < config.num_layers; ++layer) {
        for (auto* pools : {&d.key_pools, &d.value_pools}) {
            pools->emplace_back(pool_elements);
            // Rows past a sequence's end are never read, but zeros keep a
            // stray read from turning into NaN.
            pools->back().fill_bytes(0);
        }
    }
    d.max_blocks_per_seq = ceil_div(config.context_length, options.block_size);
    d.num_sms = cuda::query_devices().devices.at(0).multiprocessors;
}

CudaModelRunner::~CudaModelRunner() = default;

int64_t CudaModelRunner::weight_bytes() const {
    return device_->weights.bytes();
}

int64_t CudaModelRunner::kv_pool_bytes() const {
    return 2 * config_.num_layers * options_.num_kv_blocks * options_.block_size *
           config_.kv_dim() * int64_t(sizeof(bf16));
}

int64_t CudaModelRunner::num_graphs_captured() const {
    return int64_t(device_->graphs.size());
}

namespace {

// One input of several projections (Q, K and V read the same normed rows):
// quantized for the GEMV at most once, by the first native projection.
struct ProjectionInput {
    const bf16* x;  // (num_tokens, cols)
    int64_t num_tokens;
    int64_t cols;
    bool quantized = false;
};

void gemm_out(CudaModelRunner::Device& d, const bf16* x, const bf16* w, bf16* y, int64_t stride,
              int64_t tokens, int64_t cols, int64_t rows) {
    cuda::gemm_bf16_strided(d.cublas, x, w, y, stride, tokens, cols, rows, d.stream);
}
void gemm_out(CudaModelRunner::Device& d, const bf16* x, const bf16* w, float* y, int64_t stride,
              int64_t tokens, int64_t cols, int64_t rows) {
    cuda::gemm_bf16_f32_out_strided(d.cublas, x, w, y, stride, tokens, cols, rows, d.stream);
}
void gemv_out(CudaModelRunner::Device& d, const cuda::QuantMatrixView& w,
              const cuda::QuantizedActivationsView& x, bf16* y) {
    cuda::quant_gemv_fast(w, x, y, d.stream);
}
void gemv_out(CudaModelRunner::Device& d, const cuda::QuantMatrixView& w,
              const cuda::QuantizedActivationsView& x, float* y) {
    cuda::quant_gemv_fast_f32_out(w, x, y, d.stream);
}

// y (num_tokens, w.rows) = x · Wᵀ, W as the weights hold it:
//   bf16: cuBLAS, as issue 7 built it;
//   native, ≤ 8 tokens: x quantized to int8 blocks (once per input), then
//     the quantized GEMV, which reads W's blocks once;
//   native, more tokens: W dequantized to bf16 into the scratch and cuBLAS,
//     in chunks of rows the scratch holds (all of a layer's matrix at once;
//     an untied output head in several).
template <typename Out>
void project(CudaModelRunner::Device& d, ProjectionInput& in, const CudaMatrix& w, Out* y) {
    if (!w.is_native()) {
        gemm_out(d, in.x, w.bf16.data(), y, w.rows, in.num_tokens, in.cols, w.rows);
        return;
    }
    const cuda::QuantMatrixView blocks = w.native_view();
    if (in.num_tokens <= cuda::kQuantGemvMaxTokens) {
        const cuda::QuantizedActivationsView xq{d.x_codes.data(), d.x_scales.data(), in.num_tokens,
                                                in.cols};
        if (!in.quantized) cuda::quantize_activations_int8(in.x, xq, d.stream);
        in.quantized = true;
        gemv_out(d, blocks, xq, y);
        return;
    }
    const int64_t chunk_rows =
        std::clamp<int64_t>(int64_t(d.dequant_scratch.size()) / w.cols, 1, w.rows);
    const int64_t code_bytes = cuda::quant_code_bytes(w.native_type);
    const int64_t scale_halves = cuda::quant_scale_halves(w.native_type);
    for (int64_t first = 0; first < w.rows; first += chunk_rows) {
        cuda::QuantMatrixView chunk = blocks;
        chunk.rows = std::min(chunk_rows, w.rows - first);
        chunk.codes += first * blocks.blocks_per_row() * code_bytes;
        chunk.scales += first * blocks.blocks_per_row() * scale_halves;
        cuda::dequantize_to_bf16(chunk, d.dequant_scratch.data(), d.stream);
        gemm_out(d, in.x, d.dequant_scratch.data(), y + first, w.rows, in.num_tokens, in.cols,
                 chunk.rows);
    }
}

// The shape of one forward pass: everything a kernel launch depends on
// besides the device arrays. A graph is valid for as long as this holds.
struct StepShape {
    int64_t num_tokens = 0;
    int64_t num_seqs = 0;
    int64_t max_blocks_per_seq = 0;
    int64_t max_query_len = 0;
    bool decode_only = false;
    int64_t num_splits = 0;  // decode only
};

// logits (S, vocab) fp32 = the S gathered last rows · the head: the tied
// embedding (bf16, cuBLAS), or an untied head as the weights hold it.
void enqueue_logits(const ModelConfig& c, CudaModelRunner::Device& d, int64_t S) {
    Activations& a = *d.act;
    if (d.weights.output_is_tied()) {
        cuda::gemm_bf16_f32_out(d.cublas, a.last_hidden.data(), d.weights.token_embedding.data(),
                                a.logits.data(), S, c.dim, c.vocab_size, d.stream);
        return;
    }
    ProjectionInput last{a.last_hidden.data(), S, c.dim};
    project(d, last, d.weights.output, a.logits.data());
}

// One layer's attention of the step's queries (a.q) over the pool, into
// a.attn: the split-K decode kernel for a decode-only step, else the prefill
// kernel. Prefill runs on the tensor cores (paged_prefill_attention_mma.h)
// for heads 64 and 128 wide; other widths, and options.tensor_core_prefill =
// false, run the scalar kernel (paged_prefill_attention.h), which takes any
// width up to 256.
void enqueue_attention(const ModelConfig& c, const CudaRunnerOptions& options,
                       const StepShape& shape, Activations& a, const bf16* key_pool,
                       const bf16* value_pool, const int32_t* query_start,
                       const int32_t* context_lens, const int32_t* block_tables,
                       cudaStream_t stream) {
    if (shape.decode_only) {
        cuda::paged_decode_attention_splitk_bf16(
            a.q.data(), key_pool, value_pool, block_tables, context_lens, a.attn.data(),
            decode_shape_of(c, options, shape.num_seqs, shape.max_blocks_per_seq), shape.num_splits,
            cuda::kDecodeMinPieceTokens, a.decode_workspace.data(), stream);
        return;
    }
    const cuda::PagedPrefillShape prefill_shape{.num_seqs = shape.num_seqs,
                                                .num_query_tokens = shape.num_tokens,
                                                .max_query_len = shape.max_query_len,
                                                .num_heads = c.num_heads,
                                                .num_kv_heads = c.num_kv_heads,
                                                .head_dim = c.head_dim,
                                                .block_size = options.block_size,
                                                .max_blocks_per_seq = shape.max_blocks_per_seq};
    if (options.tensor_core_prefill && cuda::paged_prefill_mma_supports_head_dim(c.head_dim)) {
        cuda::paged_prefill_attention_mma_bf16(a.q.data(), key_pool, value_pool, block_tables,
                                               query_start, context_lens, a.attn.data(),
                                               prefill_shape, stream);
    } else {
        cuda::paged_prefill_attention_bf16(a.q.data(), key_pool, value_pool, block_tables,
                                           query_start, context_lens, a.attn.data(), prefill_shape,
                                           stream);
    }
}

// Enqueues the forward pass of one planned step on `stream`: from the
// token ids in the plan array to the logits of each sequence's last token.
// Launches only (graph-capturable): no host synchronization, no allocation.
void enqueue_forward(const ModelConfig& c, const CudaRunnerOptions& options,
                     CudaModelRunner::Device& d, const StepShape& shape) {
    Activations& a = *d.act;
    const cudaStream_t stream = d.stream;
    const int64_t T = shape.num_tokens;
    const int64_t S = shape.num_seqs;
    // The plan's arrays, at the offsets device_step_plan.h lays out.
    const int32_t* plan = a.plan.data();
    const int32_t* token_ids = plan;
    const int32_t* positions = plan + T;
    const int32_t* slots = plan + 2 * T;
    const int32_t* last_rows = plan + 3 * T;
    const int32_t* query_start = last_rows + S;
    const int32_t* context_lens = query_start + S + 1;
    const int32_t* block_tables = context_lens + S;

    const RopeParams rope{c.head_dim, c.rope_dim, c.rope_freq_base};

    cuda::embedding_gather_bf16(d.weights.token_embedding.data(), token_ids, a.x.data(), T, c.dim,
                                c.vocab_size, stream);
    for (int64_t l = 0; l < c.num_layers; ++l) {
        const CudaLayerWeights& w = d.weights.layers[size_t(l)];
        bf16* key_pool = d.key_pools[size_t(l)].data();
        bf16* value_pool = d.value_pools[size_t(l)].data();
        // x += the previous layer's MLP output (none before layer 0); normed = rmsnorm(x).
        cuda::add_rmsnorm_bf16(a.x.data(), l == 0 ? nullptr : a.delta.data(), w.attn_norm.data(),
                               a.normed.data(), T, c.dim, c.rms_norm_eps, stream);
        ProjectionInput normed{a.normed.data(), T, c.dim};
        project(d, normed, w.wq, a.q.data());
        project(d, normed, w.wk, a.k.data());
        project(d, normed, w.wv, a.v.data());
        cuda::rope_bf16(a.q.data(), positions, d.rope_table.data(), T, c.num_heads, rope, stream);
        cuda::rope_bf16(a.k.data(), positions, d.rope_table.data(), T, c.num_kv_heads, rope,
                        stream);
        // The step's keys and values join the pool first, so attention reads
        // every key — cached ones and this step's — the same way.
        cuda::kv_append_bf16(a.k.data(), a.v.data(), slots, key_pool, value_pool, T, c.kv_dim(),
                             stream);
        enqueue_attention(c, options, shape, a, key_pool, value_pool, query_start, context_lens,
                          block_tables, stream);
        ProjectionInput attn{a.attn.data(), T, c.attn_out_dim()};
        project(d, attn, w.wo, a.delta.data());
        cuda::add_rmsnorm_bf16(a.x.data(), a.delta.data(), w.ffn_norm.data(), a.normed.data(), T,
                               c.dim, c.rms_norm_eps, stream);
        ProjectionInput ffn_in{a.normed.data(), T, c.dim};
        project(d, ffn_in, w.w_gate, a.gate.data());
        project(d, ffn_in, w.w_up, a.up.data());
        cuda::silu_mul_fast_bf16(a.gate.data(), a.up.data(), a.act.data(), T * c.ffn_dim, stream);
        ProjectionInput act{a.act.data(), T, c.ffn_dim};
        project(d, act, w.w_down, a.delta.data());
    }
    cuda::add_rmsnorm_bf16(a.x.data(), a.delta.data(), d.weights.output_norm.data(),
                           a.normed.data(), T, c.dim, c.rms_norm_eps, stream);
    // Only each sequence's last row needs logits: the vocabulary projection
    // is the largest matmul of the step. The gather reuses the embedding
    // kernel, the step's rows being the "table".
    cuda::embedding_gather_bf16(a.normed.data(), last_rows, a.last_hidden.data(), S, c.dim, T,
                                stream);
    enqueue_logits(c, d, S);
}

}  // namespace

void CudaModelRunner::forward(const StepBatch& batch, PagedKvCache& cache) {
    Device& d = *device_;
    if (cache.storage() != KvStorage::kDevice || cache.num_blocks() > options_.num_kv_blocks ||
        cache.block_size() != options_.block_size) {
        throw Error(fmt::format(
            "--device cuda: the paged cache ({} blocks of {}) is not one the GPU pool "
            "can mirror ({} blocks of {}, device storage)",
            cache.num_blocks(), cache.block_size(), options_.num_kv_blocks, options_.block_size));
    }
    const DeviceStepLimits limits{config_.vocab_size, config_.context_length, cache.num_blocks(),
                                  cache.block_size()};
    const bool decode_only =
        std::all_of(batch.chunks.begin(), batch.chunks.end(),
                    [](const SequenceChunk& c) { return c.step.tokens.size() == 1; });
    const int64_t num_real_seqs = int64_t(batch.chunks.size());
    const bool use_graph = options_.cuda_graphs && decode_only && num_real_seqs > 0 &&
                           num_real_seqs <= options_.max_graph_batch;
    const int64_t bucket = use_graph ? graph_bucket(num_real_seqs, options_.max_graph_batch) : 0;
    // A graph's block tables have the fixed stride of a whole context.
    const DeviceStepPlan plan =
        plan_device_step(batch.chunks, limits, bucket, use_graph ? d.max_blocks_per_seq : 0);

    // Decode attention's splits: a graph is replayed while its contexts grow,
    // so its splits are sized for the longest context the model allows (the
    // kernel's minimum piece keeps today's short contexts from being cut
    // into slivers); a step run directly is sized for the contexts it has.
    cuda::PagedDecodeShape splits_for =
        decode_shape_of(config_, options_, plan.num_seqs, plan.max_blocks_per_seq);
    if (!use_graph) splits_for.max_context_len = plan.max_context_len;
    StepShape shape{.num_tokens = plan.num_tokens,
                    .num_seqs = plan.num_seqs,
                    .max_blocks_per_seq = plan.max_blocks_per_seq,
                    .max_query_len = plan.max_query_len,
                    .decode_only = plan.decode_only,
                    .num_splits = cuda::paged_decode_num_splits(splits_for, d.num_sms)};

    // Buffers: grown (and the graphs, which point into them, dropped) when a
    // step is larger than any before.
    if (!d.act || d.act->capacity_tokens < plan.num_tokens) {
        const int64_t tokens =
            std::max({plan.num_tokens, options_.max_tokens_per_step, options_.max_graph_batch,
                      d.act ? 2 * d.act->capacity_tokens : int64_t(0)});
        const cuda::PagedDecodeShape widest =
            decode_shape_of(config_, options_, tokens, d.max_blocks_per_seq);
        d.drop_graphs();
        d.act.reset();  // free the old buffers before allocating the new ones
        d.act = std::make_unique<Activations>(
            config_, tokens, d.max_blocks_per_seq,
            cuda::paged_decode_workspace_floats(
                widest, cuda::paged_decode_max_splits(config_.context_length)));
    }

    // Copy-on-write copies the host made since the last step, before any
    // of this step's writes (a copied block's source is never written by
    // the step that copies it: the sequence writes into the copy).
    if (!batch.block_copies.empty()) replay_block_copies(batch.block_copies, cache.num_blocks());

    SERVELAB_CUDA_CHECK(cudaMemcpyAsync(d.act->plan.data(), plan.data.data(),
                                        plan.data.size() * sizeof(int32_t), cudaMemcpyHostToDevice,
                                        d.stream));
    if (!use_graph) {
        enqueue_forward(config_, options_, d, shape);
    } else if (const auto found = d.graphs.find(bucket); found != d.graphs.end()) {
        SERVELAB_CUDA_CHECK(cudaGraphLaunch(found->second, d.stream));
        ++num_graph_launches_;
    } else {
        // First step of this bucket: run it directly (which also loads every
        // kernel and lets cuBLAS pick its algorithms outside a capture),
        // then capture the same launches for the steps to come.
        enqueue_forward(config_, options_, d, shape);
        cudaGraph_t graph = nullptr;
        SERVELAB_CUDA_CHECK(cudaStreamBeginCapture(d.stream, cudaStreamCaptureModeThreadLocal));
        try {
            enqueue_forward(config_, options_, d, shape);
        } catch (...) {
            cudaStreamEndCapture(d.stream, &graph);
            if (graph != nullptr) cudaGraphDestroy(graph);
            throw;
        }
        SERVELAB_CUDA_CHECK(cudaStreamEndCapture(d.stream, &graph));
        cudaGraphExec_t exec = nullptr;
        const cudaError_t instantiated = cudaGraphInstantiate(&exec, graph, 0);
        cudaGraphDestroy(graph);
        SERVELAB_CUDA_CHECK(instantiated);
        d.graphs[bucket] = exec;
    }
    num_tokens_computed_ += plan.num_tokens - (plan.num_seqs - num_real_seqs);
    last_num_seqs_ = num_real_seqs;
}

void CudaModelRunner::replay_block_copies(std::span<const BlockCopy> copies, int64_t num_blocks) {
    Device& d = *device_;
    // One launch copies its pairs in parallel, so a pair must not read a
    // block an earlier pair of the same launch writes, nor write one it
    // reads. (Rare, but possible: a block copied from, then freed and
    // reallocated as another copy's target in the same step.) Such a pair
    // starts a new launch; launches run in order on the stream.
    std::vector<int32_t> pairs;
    std::vector<size_t> group_starts = {0};  // in pairs
    std::unordered_set<int32_t> sources, targets;
    for (const BlockCopy& copy : copies) {
        if (copy.from < 0 || copy.from >= num_blocks || copy.to < 0 || copy.to >= num_blocks) {
            throw Error("--device cuda: a block copy names a block outside the pool");
        }
        if (targets.count(copy.from) > 0 || sources.count(copy.to) > 0) {
            group_starts.push_back(pairs.size() / 2);
            sources.clear();
            targets.clear();
        }
        sources.insert(copy.from);
        targets.insert(copy.to);
        pairs.push_back(copy.from);
        pairs.push_back(copy.to);
    }
    group_starts.push_back(pairs.size() / 2);
    upload_async(d.copy_pairs, std::span<const int32_t>(pairs), d.stream);
    for (size_t g = 0; g + 1 < group_starts.size(); ++g) {
        const int32_t* group = d.copy_pairs.data() + 2 * group_starts[g];
        const int64_t count = int64_t(group_starts[g + 1] - group_starts[g]);
        for (int64_t l = 0; l < config_.num_layers; ++l) {
            for (auto* pools : {&d.key_pools, &d.value_pools}) {
                cuda::kv_copy_blocks_bf16((*pools)[size_t(l)].data(), group, count,
                                          options_.block_size, config_.kv_dim(), d.stream);
            }
        }
    }
}

namespace {

// The step's samples as the device sampler takes them. Their repetition
// penalties' ids go to `penalized`, and a constrained sample's grammar mask
// to `mask_words` (its bitmask's 64-bit words, as TokenBitmask keeps them),
// uploaded with the rest of the step's sampling inputs.
std::vector<cuda::DeviceSample> device_samples(const StepBatch& batch, int64_t num_rows,
                                               int64_t vocab_size, std::vector<int32_t>& penalized,
                                               std::vector<uint64_t>& mask_words) {
    std::vector<cuda::DeviceSample> samples;
    for (const SampleRequest& request : batch.samples) {
        if (request.row < 0 || request.row >= num_rows) {
            throw Error(fmt::format("run_step: sample of row {} in a batch of {} chunks",
                                    request.row, num_rows));
        }
        const SamplingParams& p = request.sampler->params();
        cuda::DeviceSample sample;
        sample.logits_row = int32_t(request.row);
        sample.temperature = p.temperature;
        sample.top_k = p.top_k;
        sample.top_p = p.top_p;
        sample.min_p = p.min_p;
        sample.repetition_penalty = p.repetition_penalty;
        sample.penalty_begin = int32_t(penalized.size());
        if (p.repetition_penalty != 1.0f) {
            penalty_ids(request.history, p.repetition_window, vocab_size, penalized);
        }
        sample.penalty_end = int32_t(penalized.size());
        if (request.allowed != nullptr) {
            if (request.allowed->size() != vocab_size) {
                throw Error("run_step: a grammar mask's size is not the vocabulary's");
            }
            sample.mask_offset = int64_t(mask_words.size());
            const auto words = request.allowed->words();
            mask_words.insert(mask_words.end(), words.begin(), words.end());
        }
        // The request's own random stream, drawn exactly when the CPU sampler
        // would draw (once per non-greedy token).
        sample.uniform = p.temperature > 0.0f ? request.sampler->next_uniform() : 0.0;
        samples.push_back(sample);
    }
    return samples;
}

}  // namespace

StepResult CudaModelRunner::run_step(const StepBatch& batch, PagedKvCache& cache) {
    if (!batch.verifications.empty()) {
        throw Error(
            "--device cuda: speculative decoding runs on the CPU runner only for now "
            "(drop --speculate or use --device cpu)");
    }
    forward(batch, cache);
    Device& d = *device_;
    StepResult result;
    std::vector<TokenId>& tokens = result.sampled;
    tokens.resize(batch.samples.size());
    if (batch.samples.empty()) {
        SERVELAB_CUDA_CHECK(cudaStreamSynchronize(d.stream));
        return result;
    }
    std::vector<int32_t> penalized;
    std::vector<uint64_t> mask_words;
    const std::vector<cuda::DeviceSample> samples =
        device_samples(batch, last_num_seqs_, config_.vocab_size, penalized, mask_words);
    const int64_t n = int64_t(samples.size());
    upload_async(d.samples, std::span<const cuda::DeviceSample>(samples), d.stream);
    if (!penalized.empty())
        upload_async(d.penalty_tokens, std::span<const int32_t>(penalized), d.stream);
    ensure_size(d.penalty_tokens, 1);  // a valid pointer even when no sample penalizes
    if (!mask_words.empty())
        upload_async(d.mask_words, std::span<const uint64_t>(mask_words), d.stream);
    ensure_size(d.mask_words, 1);  // and when none is constrained
    ensure_size(d.sampled, size_t(n));
    ensure_size(d.sampling_workspace,
                size_t(cuda::sampling_workspace_floats(n, config_.vocab_size)));
    cuda::sample_tokens(d.act->logits.data(), d.samples.data(), d.penalty_tokens.data(),
                        d.mask_words.data(), d.sampled.data(), n, config_.vocab_size,
                        d.sampling_workspace.data(), d.stream);
    std::vector<int32_t> ids(size_t(n), 0);
    SERVELAB_CUDA_CHECK(cudaMemcpyAsync(ids.data(), d.sampled.data(), size_t(n) * sizeof(int32_t),
                                        cudaMemcpyDeviceToHost, d.stream));
    SERVELAB_CUDA_CHECK(cudaStreamSynchronize(d.stream));
    for (size_t i = 0; i < ids.size(); ++i) tokens[i] = TokenId(ids[i]);
    add_logprobs(batch, result);
    return result;
}

// The requests that ask for logprobs are few, so their rows come to the
// host, where their own Sampler computes the numbers for the token the GPU
// drew, over the distribution it drew from (the same pipeline, so the same
// kept set). Everyone else still gets token ids only.
void CudaModelRunner::add_logprobs(const StepBatch& batch, StepResult& result) {
    Device& d = *device_;
    std::vector<float> row;  // sized at the first sample that asks
    for (size_t i = 0; i < batch.samples.size(); ++i) {
        const SampleRequest& request = batch.samples[i];
        if (request.sampler->params().logprobs < 0) continue;
        row.resize(size_t(config_.vocab_size));
        SERVELAB_CUDA_CHECK(cudaMemcpy(row.data(),
                                       d.act->logits.data() + request.row * config_.vocab_size,
                                       row.size() * sizeof(float), cudaMemcpyDeviceToHost));
        result.logprobs.resize(batch.samples.size());
        result.logprobs[i] =
            request.sampler->logprobs_of(row, request.history, result.sampled[i], request.allowed);
    }
}

std::vector<float> CudaModelRunner::forward_logits(const StepBatch& batch, PagedKvCache& cache) {
    forward(batch, cache);
    Device& d = *device_;
    std::vector<float> logits(size_t(last_num_seqs_ * config_.vocab_size));
    SERVELAB_CUDA_CHECK(cudaMemcpyAsync(logits.data(), d.act->logits.data(),
                                        logits.size() * sizeof(float), cudaMemcpyDeviceToHost,
                                        d.stream));
    SERVELAB_CUDA_CHECK(cudaStreamSynchronize(d.stream));
    return logits;
}

void CudaModelRunner::check_sampling(const SamplingParams& params) const {
    if (params.presence_penalty != 0.0f || params.frequency_penalty != 0.0f ||
        !params.logit_bias.empty()) {
        throw Error(
            "presence_penalty, frequency_penalty and logit_bias are applied by the CPU "
            "sampler only, not on --device cuda yet");
    }
}

}  // namespace servelab
