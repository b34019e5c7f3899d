// model_shapes_test.cpp — the named real-model shapes and the chunked, multithreaded model writer.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "kernels/common/error.h"
#include "kernels/cpu/dequantize.h"
#include "reference/model/model.h"
#include "reference/model/model_shapes.h"
#include "reference/model/tiny_model.h"
#include "reference/model/tiny_model_plan.h"

namespace servelab {
namespace {

// The published config.json values, copied here independently of the table.
struct PublishedConfig {
    const char* name;
    int64_t hidden_size, num_hidden_layers, num_attention_heads, num_key_value_heads;
    int64_t intermediate_size, vocab_size, max_position_embeddings;
    float rope_theta;
    bool tie_word_embeddings;
    int64_t parameters;  // the model card's exact count
};

constexpr PublishedConfig kPublished[] = {
    {"smollm2-135m", 576, 30, 9, 3, 1536, 49152, 8192, 100000.0f, true, 134515008},
    {"llama-3.2-1b", 2048, 16, 32, 8, 8192, 128256, 131072, 500000.0f, true, 1235814400},
    {"llama-3.1-8b", 4096, 32, 32, 8, 14336, 128256, 131072, 500000.0f, false, 8030261248},
};

TEST(ModelShapes, MatchThePublishedConfigs) {
    for (const PublishedConfig& want : kPublished) {
        SCOPED_TRACE(want.name);
        const ModelShape& shape = find_model_shape(want.name);
        EXPECT_EQ(shape.dim, want.hidden_size) << "hidden_size";
        EXPECT_EQ(shape.num_layers, want.num_hidden_layers) << "num_hidden_layers";
        EXPECT_EQ(shape.num_heads, want.num_attention_heads) << "num_attention_heads";
        EXPECT_EQ(shape.num_kv_heads, want.num_key_value_heads) << "num_key_value_heads";
        EXPECT_EQ(shape.ffn_dim, want.intermediate_size) << "intermediate_size";
        EXPECT_EQ(shape.vocab_size, want.vocab_size) << "vocab_size";
        EXPECT_EQ(shape.context_length, want.max_position_embeddings) << "max_position_embeddings";
        EXPECT_EQ(shape.rope_freq_base, want.rope_theta) << "rope_theta";
        EXPECT_EQ(shape.tied_embeddings, want.tie_word_embeddings) << "tie_word_embeddings";
        EXPECT_EQ(model_shape_parameters(shape), want.parameters)
            << "the shape's parameter count is not the model card's: a width or the head tying "
               "is wrong";
    }
    EXPECT_EQ(model_shapes().size(), std::size(kPublished));
}

TEST(ModelShapes, UnknownNameSaysWhichAreKnown) {
    try {
        find_model_shape("llama-3-70b");
        FAIL() << "an unknown shape was accepted";
    } catch (const Error& e) {
        EXPECT_THAT(e.what(), testing::HasSubstr("llama-3.2-1b"));
        EXPECT_THAT(e.what(), testing::HasSubstr("llama-3-70b"));
    }
}

// The plan of a named shape holds exactly the published parameters, with
// the head tied or not, so the file is the real model's size.
TEST(ModelShapes, PlanHoldsThePublishedParameterCount) {
    for (const PublishedConfig& want : kPublished) {
        SCOPED_TRACE(want.name);
        TinyModelOptions options;
        options.weight_type = GgmlType::kQ4_1;
        apply_model_shape(find_model_shape(want.name), options);
        const TinyModelPlan plan = plan_tiny_model(options);
        int64_t parameters = 0;
        bool has_output = false;
        for (const TinyTensorPlan& tensor : plan.tensors) {
            parameters += tensor.num_values();
            has_output |= tensor.name == "output.weight";
        }
        EXPECT_EQ(parameters, want.parameters);
        EXPECT_EQ(has_output, !want.tie_word_embeddings);
    }
}

TinyModelOptions small_streamed(int64_t threads, GgmlType type) {
    // Rows of 96 values (3 blocks); the FFN matrices (12288 x 96) span two
    // chunks of about a million values each, so the chunk logic is exercised.
    TinyModelOptions options;
    options.seed = 11;
    options.num_layers = 2;
    options.dim = 96;
    options.num_heads = 6;
    options.num_kv_heads = 2;
    options.ffn_dim = 1536 * 8;
    options.context_length = 64;
    options.weight_type = type;
    options.tied_embeddings = false;
    options.vocab_size = 1000;
    options.write_threads = threads;
    return options;
}

TEST(ChunkedModelWriter, SameBytesForAnyThreadCount) {
    for (const GgmlType type : {GgmlType::kQ4_1, GgmlType::kF16}) {
        const std::vector<uint8_t> one = make_tiny_model(small_streamed(1, type));
        EXPECT_EQ(make_tiny_model(small_streamed(3, type)), one)
            << "the chunked writer's bytes depend on the thread count: a chunk's generator is "
               "not seeded from its own position alone";
        EXPECT_EQ(make_tiny_model(small_streamed(8, type)), one);
    }
}

TEST(ChunkedModelWriter, LoadsWithTheSameLayoutAsTheSequentialOne) {
    TinyModelOptions streamed = small_streamed(4, GgmlType::kQ8_0);
    streamed.ffn_dim = 256;  // the layout only: the sequential stream is slow
    TinyModelOptions sequential = streamed;
    sequential.write_threads = 0;
    const std::vector<uint8_t> streamed_bytes = make_tiny_model(streamed);
    const std::vector<uint8_t> sequential_bytes = make_tiny_model(sequential);
    const GgufFile a = GgufFile::parse(streamed_bytes);
    const GgufFile b = GgufFile::parse(sequential_bytes);
    ASSERT_EQ(a.tensors().size(), b.tensors().size());
    for (size_t i = 0; i < a.tensors().size(); ++i) {
        EXPECT_EQ(a.tensors()[i].name, b.tensors()[i].name);
        EXPECT_EQ(a.tensors()[i].dims, b.tensors()[i].dims);
        EXPECT_EQ(a.tensors()[i].type, b.tensors()[i].type);
        EXPECT_EQ(a.tensors()[i].offset_bytes, b.tensors()[i].offset_bytes);
    }
    EXPECT_EQ(streamed_bytes.size(), sequential_bytes.size());
    const Model model = Model::from_gguf(GgufFile::parse(streamed_bytes));
    EXPECT_EQ(model.config.dim, 96);
    EXPECT_EQ(model.config.ffn_dim, 256);
    EXPECT_EQ(model.config.vocab_size, 1000);
}

// The draws have the sequential generator's spread: N(0, 1/in) for
// matrices, 1 + 0.1 N(0, 1) for norms, and every chunk draws different values.
TEST(ChunkedModelWriter, DrawsTheIntendedDistribution) {
    const TinyModelOptions options = small_streamed(2, GgmlType::kF32);
    const std::vector<uint8_t> bytes = make_tiny_model(options);
    const GgufFile file = GgufFile::parse(bytes);
    const GgufTensorInfo* down = file.find_tensor("blk.1.ffn_down.weight");
    ASSERT_NE(down, nullptr);
    const auto* values = reinterpret_cast<const float*>(down->data);
    const int64_t n = down->num_elements();
    double sum = 0, sum_squares = 0;
    std::set<float> first_of_each_row;
    for (int64_t i = 0; i < n; ++i) {
        sum += values[i];
        sum_squares += double(values[i]) * values[i];
    }
    for (int64_t row = 0; row < down->dims[1]; ++row) {
        first_of_each_row.insert(values[row * down->dims[0]]);
    }
    const double variance = sum_squares / double(n) - (sum / double(n)) * (sum / double(n));
    EXPECT_NEAR(sum / double(n), 0.0, 0.01 / std::sqrt(12288.0)) << "matrix values are not centred";
    EXPECT_NEAR(variance * 12288.0, 1.0, 0.02) << "matrix variance is not 1/in_features";
    EXPECT_EQ(first_of_each_row.size(), size_t(down->dims[1]))
        << "rows repeat: chunks share a generator state";
}

TEST(ChunkedModelWriter, WritesAFileThatLoads) {
    const std::filesystem::path path =
        std::filesystem::temp_directory_path() / "servelab_chunked_model_test.gguf";
    const TinyModelOptions options = small_streamed(3, GgmlType::kQ4_1);
    write_tiny_model(options, path.string());
    EXPECT_EQ(GgufFile::open(path.string()).tensors().size(),
              GgufFile::parse(make_tiny_model(options)).tensors().size());
    const Model model = Model::load(path.string());
    EXPECT_EQ(model.weights.layers.size(), 2u);
    std::filesystem::remove(path);
    EXPECT_THROW(write_tiny_model(options, "/nonexistent-dir/x.gguf"), Error);
}

}  // namespace
}  // namespace servelab
