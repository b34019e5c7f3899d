// model_config_test.cpp — reading hyperparameters and refusing inconsistent models.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <functional>

#include "kernels/common/error.h"
#include "reference/model/gguf_writer.h"
#include "reference/model/model.h"
#include "reference/model/tiny_model.h"
#include "tests/unit/test_util.h"

namespace servelab {
namespace {

// A tiny model re-written with some metadata changed and/or a tensor dropped.
std::vector<uint8_t> rewrite(const std::function<void(std::string&, GgufValue&)>& edit,
                             const std::string& drop_key = "", const std::string& drop_tensor = "",
                             const std::string& reshape_tensor = "") {
    const std::vector<uint8_t> original = make_tiny_model({});
    const GgufFile file = GgufFile::parse(original);
    GgufWriter writer;
    for (auto [key, value] : file.metadata()) {
        if (key == drop_key) continue;
        edit(key, value);
        writer.add_value(key, value);
    }
    for (const GgufTensorInfo& t : file.tensors()) {
        if (t.name == drop_tensor) continue;
        std::vector<int64_t> dims = t.dims;
        if (t.name == reshape_tensor) std::swap(dims[0], dims[1]);
        writer.add_tensor(t.name, dims, t.type,
                          std::vector<uint8_t>(t.data, t.data + t.size_bytes));
    }
    return writer.to_bytes();
}

std::string load_error(const std::vector<uint8_t>& bytes) {
    return test::error_of([&] { Model::from_gguf(GgufFile::parse(bytes)); });
}

void set_uint(std::string& key, GgufValue& value, const std::string& target, uint64_t v) {
    if (key == target) value.as_uint = v;
}

TEST(ModelConfig, ReadsTinyModel) {
    const auto bytes = make_tiny_model(
        {.num_layers = 3, .dim = 96, .num_heads = 6, .num_kv_heads = 2, .ffn_dim = 80});
    const ModelConfig c = ModelConfig::from_gguf(GgufFile::parse(bytes));
    EXPECT_EQ(c.num_layers, 3);
    EXPECT_EQ(c.dim, 96);
    EXPECT_EQ(c.head_dim, 16);
    EXPECT_EQ(c.heads_per_kv_head(), 3);
    EXPECT_EQ(c.ffn_dim, 80);
    EXPECT_EQ(c.v_head_dim, 16);
    EXPECT_FALSE(c.is_mla());
    EXPECT_TRUE(c.tied_embeddings);
}

TEST(ModelConfig, ReadsSmolLm2WhenPresent) {
    const std::string path = test::source_path(test::kSmolLm2Path);
    if (!std::ifstream(path)) GTEST_SKIP() << "model not downloaded: run make setup";
    const ModelConfig c = ModelConfig::from_gguf(GgufFile::open(path));
    EXPECT_EQ(c.num_layers, 30);
    EXPECT_EQ(c.dim, 576);
    EXPECT_EQ(c.num_heads, 9);
    EXPECT_EQ(c.num_kv_heads, 3);
    EXPECT_EQ(c.head_dim, 64);
    EXPECT_EQ(c.ffn_dim, 1536);
    EXPECT_EQ(c.vocab_size, 49152);
    EXPECT_FLOAT_EQ(c.rope_freq_base, 100000.0f);
    EXPECT_TRUE(c.tied_embeddings);
    EXPECT_EQ(count_parameters(c), 134515008);
}

TEST(ModelConfig, MissingRequiredKey) {
    EXPECT_NE(load_error(rewrite([](auto&, auto&) {}, "llama.block_count"))
                  .find("missing required key 'llama.block_count'"),
              std::string::npos);
}

TEST(ModelConfig, HeadsNotDivisible) {
    const auto bytes = rewrite(
        [](std::string& k, GgufValue& v) { set_uint(k, v, "llama.attention.head_count_kv", 3); });
    EXPECT_NE(load_error(bytes).find("head_count 4 is not divisible by head_count_kv 3"),
              std::string::npos)
        << load_error(bytes);
}

TEST(ModelConfig, ZeroLayers) {
    const auto bytes =
        rewrite([](std::string& k, GgufValue& v) { set_uint(k, v, "llama.block_count", 0); });
    EXPECT_NE(load_error(bytes).find("'llama.block_count' = 0 is out of range"), std::string::npos)
        << load_error(bytes);
}

TEST(ModelConfig, UnsupportedArchitecture) {
    const auto bytes = rewrite([](std::string& k, GgufValue& v) {
        if (k == "general.architecture") v.as_string = "mamba";
    });
    EXPECT_NE(load_error(bytes).find("architecture 'mamba' is not supported"), std::string::npos);
}

TEST(ModelConfig, WrongKeyType) {
    const auto bytes = rewrite([](std::string& k, GgufValue& v) {
        if (k == "llama.embedding_length") {
            v.type = GgufValueType::kString;
            v.as_string = "64";
        }
    });
    EXPECT_NE(load_error(bytes).find("llama.embedding_length"), std::string::npos)
        << load_error(bytes);
}

TEST(ModelWeights, MissingTensor) {
    const auto bytes = rewrite([](auto&, auto&) {}, "", "blk.1.ffn_up.weight");
    EXPECT_NE(load_error(bytes).find("blk.1.ffn_up.weight"), std::string::npos)
        << load_error(bytes);
}

TEST(ModelWeights, ShapeMismatch) {
    // ffn_gate is [dim, ffn_dim] = [64, 128]; the rewrite swaps it to [128, 64].
    const auto gate = rewrite([](auto&, auto&) {}, "", "", "blk.0.ffn_gate.weight");
    EXPECT_NE(load_error(gate).find("blk.0.ffn_gate.weight"), std::string::npos)
        << load_error(gate);
}

TEST(ModelConfig, VocabMismatchBetweenTokenizerAndEmbedding) {
    const auto bytes = rewrite([](std::string& k, GgufValue& v) {
        if (k == "tokenizer.ggml.tokens" || k == "tokenizer.ggml.token_type") v.array.pop_back();
        if (k == "tokenizer.ggml.merges") v.array.pop_back();
    });
    EXPECT_NE(load_error(bytes).find("tokenizer has 265 tokens but token_embd has 266 rows"),
              std::string::npos)
        << load_error(bytes);
}

}  // namespace
}  // namespace servelab
