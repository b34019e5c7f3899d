// e2e_bench.cpp — the whole engine on the GPU: decode tokens/s by batch size, prefill tokens/s.
//
// CUDA backend (issue 7), run by tools/gpu_check.sh on the GPU machine. The
// model is SmolLM2-135M: the real GGUF when data/models holds it, otherwise
// a random Q4_1 model of exactly its shapes (30 layers, dim 576, 9 query and 3 KV
// heads, FFN 1536, vocabulary 49152, tied head) — the same bytes move and
// the same FLOPs run, so the speed is the same; only the text is noise.
//
// Measured through the real Engine (scheduler, paged pool, CUDA graphs,
// sampling on the device), greedy, ignore_eos:
//   decode: B requests of 32-token prompts, 128 tokens each; tokens/s over
//     the decode-only steps (prefill steps excluded), for B = 1, 8, 64, 256;
//   prefill: 16 prompts of 512 tokens, 1 token each, chunks of 2048 tokens.
// And the batch-1 roofline (METHOD.md): a decode step must read every weight
// once, so steps/s ≤ copy bandwidth / weight bytes; the fraction reached is
// printed. The copy bandwidth is measured here first (1 GiB device copy).
// Prints a table, and one JSON line per figure for the logs.
//
// With --model PATH it runs that GGUF instead (issue 48: the 1B and 8B
// shapes that tools/gpu_check.sh writes and llama.cpp runs too), and prints
// the bytes a batch-1 step reads: servelab's GPU copies, and the file's own
// blocks (what llama.cpp reads), both without the embedding table when the
// head is separate (a step gathers one row of it).
//   cuda_e2e_bench [--model PATH] [--batches 1,64,256] [--decode-tokens N]
//                  [--prompt-tokens N] [--no-prefill] [--gpu-weights bf16|native]
// `--gpu-weights bf16|native` picks the weights' form on the GPU (default
// native: the file's blocks; issue 48); gpu_check.sh runs both on SmolLM2.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/device_info.h"
#include "reference/device/cuda_model_runner.h"
#include "reference/engine/engine.h"
#include "reference/model/model.h"
#include "reference/model/tiny_model.h"

namespace {

using namespace servelab;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
    return std::chrono::duration<double>(Clock::now() - start).count();
}

// Device-to-device copy bandwidth in GB/s (bytes read + written), best of 5.
double copy_bandwidth_gbs() {
    const size_t bytes = size_t(1) << 30;
    cuda::DeviceBuffer<char> a(bytes), b(bytes);
    a.fill_bytes(1);
    double best_s = 1e9;
    for (int i = 0; i < 6; ++i) {
        const auto start = Clock::now();
        SERVELAB_CUDA_CHECK(cudaMemcpy(b.data(), a.data(), bytes, cudaMemcpyDeviceToDevice));
        SERVELAB_CUDA_CHECK(cudaDeviceSynchronize());
        if (i > 0) best_s = std::min(best_s, seconds_since(start));
    }
    return 2.0 * double(bytes) / best_s / 1e9;
}

struct BenchOptions {
    std::string model_path;  // empty: SmolLM2-135M or its shape
    std::vector<int64_t> batches = {1, 8, 64, 256};
    int32_t decode_tokens = 128;
    int64_t prompt_tokens = 32;
    bool prefill = true;
    GpuWeights weights = GpuWeights::kNative;  // --gpu-weights bf16|native
};

// Exits with a one-line message on a bad flag: a benchmark's options.
BenchOptions parse_options(int argc, char** argv) {
    BenchOptions o;
    const auto value = [&](int& i) -> const char* {
        if (i + 1 >= argc) {
            std::fprintf(stderr, "e2e_bench: %s needs a value\n", argv[i]);
            std::exit(2);
        }
        return argv[++i];
    };
    for (int i = 1; i < argc; ++i) {
        const std::string flag = argv[i];
        if (flag == "--model") {
            o.model_path = value(i);
        } else if (flag == "--batches") {
            o.batches.clear();
            std::stringstream list(value(i));
            for (std::string item; std::getline(list, item, ',');) {
                o.batches.push_back(std::atoll(item.c_str()));
                if (o.batches.back() < 1) o.batches.clear();
            }
        } else if (flag == "--decode-tokens") {
            o.decode_tokens = std::atoi(value(i));
        } else if (flag == "--prompt-tokens") {
            o.prompt_tokens = std::atoll(value(i));
        } else if (flag == "--no-prefill") {
            o.prefill = false;
        } else if (flag == "--gpu-weights") {
            o.weights = parse_gpu_weights(value(i));
        } else {
            std::fprintf(stderr,
                         "e2e_bench: unknown flag %s (--model, --batches, --decode-tokens, "
                         "--prompt-tokens, --no-prefill, --gpu-weights)\n",
                         argv[i]);
            std::exit(2);
        }
    }
    if (o.batches.empty() || o.decode_tokens < 2 || o.prompt_tokens < 1) {
        std::fprintf(stderr,
                     "e2e_bench: --batches takes sizes >= 1 (1,64,256), --decode-tokens >= 2, "
                     "--prompt-tokens >= 1\n");
        std::exit(2);
    }
    return o;
}

// The bytes of the file's blocks a batch-1 decode step reads: every tensor,
// less the embedding table when a separate head exists (a step gathers one
// row of it). What llama.cpp reads per token, which keeps the file's blocks.
int64_t file_bytes_read_per_token(const GgufFile& file) {
    int64_t bytes = 0;
    const bool untied = file.find_tensor("output.weight") != nullptr;
    for (const GgufTensorInfo& tensor : file.tensors()) {
        if (untied && tensor.name == "token_embd.weight") continue;
        bytes += int64_t(tensor.size_bytes);
    }
    return bytes;
}

Model smollm2_or_its_shape(std::string& source, GpuWeights weights) {
    const std::string path =
        std::string(SERVELAB_SOURCE_DIR) + "/data/models/SmolLM2-135M-Instruct.Q4_1.gguf";
    if (std::ifstream(path)) {
        source = std::string("SmolLM2-135M-Instruct Q4_1 (") + gpu_weights_name(weights) +
                 " on the GPU)";
        return Model::load(path);
    }
    source = std::string("random Q4_1 weights of SmolLM2-135M's shapes (") +
             gpu_weights_name(weights) + " on the GPU)";
    TinyModelOptions o;
    o.seed = 7;
    o.num_layers = 30;
    o.dim = 576;
    o.num_heads = 9;
    o.num_kv_heads = 3;
    o.ffn_dim = 1536;
    o.context_length = 8192;
    o.rope_freq_base = 100000.0f;
    // Q4_1, as the real file: native weights then read the same bytes it would.
    o.weight_type = GgmlType::kQ4_1;
    o.vocab_size = 49152;
    return Model::from_gguf(GgufFile::parse(make_tiny_model(o)));
}

struct Figures {
    double tokens_per_s = 0;
    double steps_per_s = 0;
    int64_t graph_launches = 0;
};

// Runs `num_requests` prompts of `prompt_tokens` through a fresh engine;
// times the decode-only steps (decode = true) or every step (prefill).
Figures run(const Model& model, CudaModelRunner& runner, const EngineConfig& config,
            int64_t num_requests, int64_t prompt_tokens, int32_t max_tokens, bool decode,
            std::mt19937& rng) {
    Engine engine(model, runner, config);
    SamplingParams params;
    params.max_tokens = max_tokens;
    params.ignore_eos = true;
    std::uniform_int_distribution<int> token(0, int(model.config.vocab_size) - 1);
    for (int64_t r = 0; r < num_requests; ++r) {
        std::vector<TokenId> prompt;
        for (int64_t i = 0; i < prompt_tokens; ++i) prompt.push_back(token(rng));
        engine.add_request(std::move(prompt), params);
    }
    const int64_t launches_before = runner.num_graph_launches();
    double timed_s = 0;
    int64_t timed_tokens = 0, timed_steps = 0;
    while (engine.has_unfinished()) {
        const auto start = Clock::now();
        const StepOutput out = engine.step();
        const double s = seconds_since(start);
        if (decode && out.num_prefill_tokens > 0) continue;
        timed_s += s;
        timed_tokens += decode ? int64_t(out.tokens.size()) : out.num_prefill_tokens;
        ++timed_steps;
    }
    return {double(timed_tokens) / timed_s, double(timed_steps) / timed_s,
            runner.num_graph_launches() - launches_before};
}

// A fresh engine's config: room for 256 requests of a few hundred tokens.
EngineConfig bench_engine_config() {
    EngineConfig config;
    config.block_size = 16;
    config.num_kv_blocks = 8192;  // 131k tokens: 256 requests of 160 fit many times over
    config.scheduler.max_num_seqs = 256;
    config.scheduler.max_num_batched_tokens = 2048;
    // No fair-prefill cap: the prefill case times whole 512-token prompts,
    // four to a step, not 16 chunks of the cap's size.
    config.scheduler.long_prefill_tokens = 0;
    return config;
}

// servelab's bytes per batch-1 step: its GPU copies of the weights, less the
// embedding's share when the head is separate (the copies have one format,
// so the share is the embedding's share of the parameters).
double servelab_bytes_read_per_token(const Model& model, const CudaModelRunner& runner) {
    const double weight_bytes = double(runner.weight_bytes());
    if (model.config.tied_embeddings) return weight_bytes;
    const ModelConfig& c = model.config;
    const double embedding = double(c.vocab_size) * double(c.dim);
    const double per_layer = double(c.dim) * double(c.num_heads * c.head_dim) * 2 +
                             double(c.dim) * double(c.num_kv_heads * c.head_dim) * 2 +
                             double(c.dim) * double(c.ffn_dim) * 3;
    const double total = per_layer * double(c.num_layers) + 2 * embedding;
    return weight_bytes * (1.0 - embedding / total);
}

}  // namespace

int main(int argc, char** argv) {
    const BenchOptions options = parse_options(argc, argv);
    const cuda::DeviceQuery query = cuda::query_devices();
    if (query.devices.empty()) {
        std::printf("e2e_bench: no usable GPU (%s)\n", query.error.c_str());
        return 0;
    }
    std::string source = options.model_path;
    const Model model = options.model_path.empty() ? smollm2_or_its_shape(source, options.weights)
                                                   : Model::load(options.model_path);
    const double copy_gbs = copy_bandwidth_gbs();

    const EngineConfig config = bench_engine_config();
    CudaModelRunner runner(model.config, model.weights,
                           {.num_kv_blocks = config.num_kv_blocks,
                            .block_size = config.block_size,
                            .max_tokens_per_step = 2048,
                            .weights = options.weights});
    const double weight_gb = double(runner.weight_bytes()) / 1e9;
    std::mt19937 rng(1234);
    run(model, runner, config, 8, 32, 8, true, rng);  // warm-up: loads kernels, captures graphs

    std::printf("\nend to end on %s: %s\n", query.devices[0].name.c_str(), source.c_str());
    std::printf("weights %.3f GB on the GPU (--gpu-weights %s), copy bandwidth %.0f GB/s\n",
                weight_gb, gpu_weights_name(options.weights), copy_gbs);
    if (!options.model_path.empty()) {
        const int64_t file_read = file_bytes_read_per_token(GgufFile::open(options.model_path));
        const double servelab_read = servelab_bytes_read_per_token(model, runner);
        std::printf("bytes read per batch-1 step: servelab %.3f GB, the file's blocks %.3f GB\n",
                    servelab_read / 1e9, double(file_read) / 1e9);
        std::fprintf(
            stderr,
            "{\"case\": \"model\", \"path\": \"%s\", \"copy_gbs\": %.1f, "
            "\"servelab_read_bytes_per_token\": %.0f, \"file_read_bytes_per_token\": %lld}\n",
            options.model_path.c_str(), copy_gbs, servelab_read, (long long)file_read);
    }
    std::printf("%-34s %12s %12s %12s\n", "case", "tokens/s", "steps/s", "roofline");
    for (const int64_t batch : options.batches) {
        const Figures f = run(model, runner, config, batch, options.prompt_tokens,
                              options.decode_tokens, true, rng);
        // Every step reads every weight once: the batch-1 ceiling.
        const double roofline_steps_per_s = copy_gbs / weight_gb;
        std::printf("%-34s %12.0f %12.1f %11.0f%%\n",
                    ("decode, batch " + std::to_string(batch)).c_str(), f.tokens_per_s,
                    f.steps_per_s, 100.0 * f.steps_per_s / roofline_steps_per_s);
        std::fprintf(stderr,
                     "{\"case\": \"decode\", \"batch\": %lld, \"tokens_per_s\": %.1f, "
                     "\"steps_per_s\": %.2f, \"graph_launches\": %lld}\n",
                     (long long)batch, f.tokens_per_s, f.steps_per_s, (long long)f.graph_launches);
    }
    if (!options.prefill) return 0;
    const Figures prefill = run(model, runner, config, 16, 512, 1, false, rng);
    std::printf("%-34s %12.0f %12.1f %12s\n", "prefill, 16 x 512 tokens", prefill.tokens_per_s,
                prefill.steps_per_s, "");
    std::fprintf(stderr, "{\"case\": \"prefill\", \"tokens_per_s\": %.1f}\n", prefill.tokens_per_s);
    return 0;
}
