// tiny_model.cpp — see tiny_model.h.
#include "reference/model/tiny_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "kernels/common/error.h"
#include "reference/model/gguf_writer.h"
#include "reference/model/tiny_model_plan.h"
#include "reference/model/tokenizer.h"

namespace servelab {
namespace {

// Normal draws from raw 64-bit words (Box–Muller), so a seed gives the same
// model on every platform and standard library.
class NormalSource {
  public:
    explicit NormalSource(uint64_t seed) : rng_(seed) {}
    float next() {
        const double u1 = (double(rng_() >> 11) + 0.5) * 0x1.0p-53;
        const double u2 = double(rng_() >> 11) * 0x1.0p-53;
        return float(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
    }

  private:
    std::mt19937_64 rng_;
};

struct TinyVocab {
    std::vector<std::string> tokens;
    std::vector<int32_t> token_types;
    std::vector<std::string> merges;
};

TinyVocab make_vocab(int64_t min_size, const std::vector<std::string>& user_tokens) {
    TinyVocab vocab;
    // Control tokens first, as SmolLM2 numbers them: 0 endoftext, 1 im_start, 2 im_end.
    for (const char* special : {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}) {
        vocab.tokens.emplace_back(special);
        vocab.token_types.push_back(3);  // control
    }
    for (int byte = 0; byte < 256; ++byte) {
        vocab.tokens.push_back(byte_alphabet_text(uint8_t(byte)));
        vocab.token_types.push_back(1);  // normal
    }
    // A few merges so BPE has work to do ("Ġ" is the space byte).
    const std::vector<std::pair<std::string, std::string>> merges = {
        {"Ġ", "t"}, {"h", "e"}, {"Ġt", "he"}, {"i", "n"}, {"e", "r"}, {"Ġ", "a"}, {"o", "n"}};
    for (const auto& [left, right] : merges) {
        vocab.merges.push_back(left + " " + right);
        vocab.tokens.push_back(left + right);
        vocab.token_types.push_back(1);
    }
    for (const std::string& text : user_tokens) {
        vocab.tokens.push_back(text);
        vocab.token_types.push_back(4);  // user-defined
    }
    // Padding up to a real model's vocabulary (a benchmark's logits cost):
    // tokens BPE never produces, which decode to their own text.
    for (int64_t i = 0; int64_t(vocab.tokens.size()) < min_size; ++i) {
        vocab.tokens.push_back("<extra_" + std::to_string(i) + ">");
        vocab.token_types.push_back(1);
    }
    return vocab;
}

}  // namespace

GgmlType parse_weight_type(const std::string& name) {
    if (name == "f32") return GgmlType::kF32;
    if (name == "f16") return GgmlType::kF16;
    if (name == "bf16") return GgmlType::kBF16;
    if (name == "q8_0") return GgmlType::kQ8_0;
    if (name == "q4_0") return GgmlType::kQ4_0;
    if (name == "q4_1") return GgmlType::kQ4_1;
    throw Error(
        fmt::format("unknown weight type '{}' (expected f32, f16, bf16, q8_0, q4_0, q4_1)", name));
}

namespace {

// The hyperparameter keys. llama: head_dim = dim / num_heads. deepseek2
// (MLA): per-head widths and latent ranks are explicit; DeepSeek-V2 stores
// head_count_kv = head_count (after up-projection every head has its own K/V).
void add_hyperparameters(GgufWriter& writer, const TinyModelOptions& o, int64_t vocab_size) {
    const std::string arch = o.mla ? "deepseek2" : "llama";
    const auto key = [&arch](const char* name) { return arch + "." + name; };
    writer.add_string("general.architecture", arch);
    writer.add_string("general.name", o.mla ? fmt::format("servelab-tiny-mla-seed{}", o.seed)
                                            : fmt::format("servelab-tiny-seed{}", o.seed));
    writer.add_uint32(key("block_count"), uint32_t(o.num_layers));
    writer.add_uint32(key("context_length"), uint32_t(o.context_length));
    writer.add_uint32(key("embedding_length"), uint32_t(o.dim));
    writer.add_uint32(key("feed_forward_length"), uint32_t(o.ffn_dim));
    writer.add_uint32(key("attention.head_count"), uint32_t(o.num_heads));
    writer.add_uint32(key("attention.head_count_kv"),
                      uint32_t(o.mla ? o.num_heads : o.num_kv_heads));
    writer.add_float32(key("rope.freq_base"), o.rope_freq_base);
    writer.add_uint32(key("rope.dimension_count"),
                      uint32_t(o.mla ? o.qk_rope_dim : o.dim / o.num_heads));
    writer.add_float32(key("attention.layer_norm_rms_epsilon"), 1e-5f);
    writer.add_uint32(key("vocab_size"), uint32_t(vocab_size));
    if (o.mla) {
        writer.add_uint32(key("attention.kv_lora_rank"), uint32_t(o.kv_lora_rank));
        writer.add_uint32(key("attention.q_lora_rank"), uint32_t(o.q_lora_rank));
        writer.add_uint32(key("attention.key_length"), uint32_t(o.qk_nope_dim + o.qk_rope_dim));
        writer.add_uint32(key("attention.value_length"), uint32_t(o.v_head_dim));
        writer.add_uint32(key("leading_dense_block_count"), uint32_t(o.num_layers));
    }
}

void check_options(const TinyModelOptions& o) {
    for (size_t i = 0; i < o.user_tokens.size(); ++i) {
        const bool repeated = std::find(o.user_tokens.begin(), o.user_tokens.begin() + long(i),
                                        o.user_tokens[i]) != o.user_tokens.begin() + long(i);
        if (o.user_tokens[i].empty() || repeated) {
            throw Error("tiny model: each added token must be a new, non-empty text");
        }
    }
    if (o.mla) {
        if (o.kv_lora_rank < 1 || o.q_lora_rank < 0 || o.qk_nope_dim < 1 || o.qk_rope_dim < 2 ||
            o.qk_rope_dim % 2 != 0 || o.v_head_dim < 1) {
            throw Error(
                "tiny model: MLA needs kv_lora_rank, qk_nope_dim, v_head_dim >= 1, "
                "q_lora_rank >= 0 and an even qk_rope_dim >= 2");
        }
    } else if (o.dim % o.num_heads != 0 || o.num_heads % o.num_kv_heads != 0) {
        throw Error("tiny model: dim must divide by num_heads, num_heads by num_kv_heads");
    }
}

// One layer's tensors, in file order.
void plan_layer(const TinyModelOptions& o, int64_t layer, int64_t head_dim, int64_t v_head_dim,
                std::vector<TinyTensorPlan>& tensors) {
    // Weights ~ N(0, 1/in_features) keep activations O(1) through the layers.
    const auto matrix = [&](const std::string& name, int64_t in_features, int64_t out_features) {
        tensors.push_back({name,
                           {in_features, out_features},
                           o.weight_type,
                           TinyInit::kScaled,
                           1.0f / std::sqrt(float(in_features))});
    };
    const auto norm = [&](const std::string& name, int64_t width) {
        tensors.push_back({name, {width}, GgmlType::kF32, TinyInit::kNorm});
    };
    const std::string p = fmt::format("blk.{}.", layer);
    norm(p + "attn_norm.weight", o.dim);
    if (o.mla && o.q_lora_rank > 0) {
        matrix(p + "attn_q_a.weight", o.dim, o.q_lora_rank);
        norm(p + "attn_q_a_norm.weight", o.q_lora_rank);
        matrix(p + "attn_q_b.weight", o.q_lora_rank, o.num_heads * head_dim);
    } else {
        matrix(p + "attn_q.weight", o.dim, o.num_heads * head_dim);
    }
    if (o.mla) {
        matrix(p + "attn_kv_a_mqa.weight", o.dim, o.kv_lora_rank + o.qk_rope_dim);
        norm(p + "attn_kv_a_norm.weight", o.kv_lora_rank);
        matrix(p + "attn_kv_b.weight", o.kv_lora_rank,
               o.num_heads * (o.qk_nope_dim + o.v_head_dim));
    } else {
        matrix(p + "attn_k.weight", o.dim, o.num_kv_heads * head_dim);
        matrix(p + "attn_v.weight", o.dim, o.num_kv_heads * head_dim);
    }
    matrix(p + "attn_output.weight", o.num_heads * v_head_dim, o.dim);
    norm(p + "ffn_norm.weight", o.dim);
    matrix(p + "ffn_gate.weight", o.dim, o.ffn_dim);
    matrix(p + "ffn_up.weight", o.dim, o.ffn_dim);
    matrix(p + "ffn_down.weight", o.ffn_dim, o.dim);
}

// The sequential stream: every value in file order from one NormalSource.
GgufWriter build_tiny_model(const TinyModelOptions& o) {
    TinyModelPlan plan = plan_tiny_model(o);
    NormalSource normal(o.seed);
    for (const TinyTensorPlan& tensor : plan.tensors) {
        std::vector<float> values(size_t(tensor.num_values()));
        if (tensor.init == TinyInit::kNorm) {
            for (float& v : values) v = 1.0f + 0.1f * normal.next();
        } else {
            for (float& v : values) v = normal.next() * tensor.scale;
        }
        plan.metadata.add_tensor_from_floats(tensor.name, tensor.dims, tensor.type, values);
    }
    return std::move(plan.metadata);
}

}  // namespace

int64_t TinyTensorPlan::num_values() const {
    int64_t n = 1;
    for (const int64_t dim : dims) n *= dim;
    return n;
}

TinyModelPlan plan_tiny_model(const TinyModelOptions& o) {
    check_options(o);
    const TinyVocab vocab = make_vocab(o.vocab_size, o.user_tokens);
    const auto vocab_size = int64_t(vocab.tokens.size());
    const int64_t head_dim = o.mla ? o.qk_nope_dim + o.qk_rope_dim : o.dim / o.num_heads;
    const int64_t v_head_dim = o.mla ? o.v_head_dim : head_dim;

    TinyModelPlan plan;
    GgufWriter& writer = plan.metadata;
    add_hyperparameters(writer, o, vocab_size);
    writer.add_string("tokenizer.ggml.model", "gpt2");
    writer.add_string("tokenizer.ggml.pre", "smollm");
    writer.add_string_array("tokenizer.ggml.tokens", vocab.tokens);
    writer.add_int32_array("tokenizer.ggml.token_type", vocab.token_types);
    writer.add_string_array("tokenizer.ggml.merges", vocab.merges);
    writer.add_uint32("tokenizer.ggml.bos_token_id", 1);
    writer.add_uint32("tokenizer.ggml.eos_token_id", 2);
    writer.add_bool("tokenizer.ggml.add_bos_token", false);
    if (!o.chat_template.empty()) writer.add_string("tokenizer.chat_template", o.chat_template);

    // Embedding rows ~ N(0, 1/dim): the first RMSNorm rescales them to unit
    // size anyway, and with a tied head this keeps logits O(1), so sampling
    // tests see a spread-out distribution rather than one certain token.
    plan.tensors.push_back({"token_embd.weight",
                            {o.dim, vocab_size},
                            o.weight_type,
                            TinyInit::kScaled,
                            1.0f / std::sqrt(float(o.dim))});
    for (int64_t layer = 0; layer < o.num_layers; ++layer) {
        plan_layer(o, layer, head_dim, v_head_dim, plan.tensors);
    }
    plan.tensors.push_back({"output_norm.weight", {o.dim}, GgmlType::kF32, TinyInit::kNorm});
    if (!o.tied_embeddings) {
        plan.tensors.push_back({"output.weight",
                                {o.dim, vocab_size},
                                o.weight_type,
                                TinyInit::kScaled,
                                1.0f / std::sqrt(float(o.dim))});
    }
    return plan;
}

std::vector<uint8_t> make_tiny_model(const TinyModelOptions& options) {
    if (options.write_threads > 0) return make_tiny_model_streaming(options);
    return build_tiny_model(options).to_bytes();
}

void write_tiny_model(const TinyModelOptions& options, const std::string& path) {
    if (options.write_threads > 0) {
        write_tiny_model_streaming(options, path);
        return;
    }
    build_tiny_model(options).write_file(path);
}

}  // namespace servelab
