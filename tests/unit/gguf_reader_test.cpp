// gguf_reader_test.cpp — reading a real model and the typed metadata getters.
//
// Part of the model loader tests (all labs). The real-model tests use the
// default SmolLM2-135M-Instruct Q4_1 file (skipped when it has not been
// fetched); the expected values were printed by the official `gguf` Python
// package. The getter tests use small files built with GgufWriter.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "kernels/common/error.h"
#include "kernels/cpu/dequantize.h"
#include "reference/model/gguf_reader.h"
#include "reference/model/gguf_writer.h"
#include "tests/unit/test_util.h"

#ifndef SERVELAB_SOURCE_DIR
#define SERVELAB_SOURCE_DIR "."
#endif

namespace servelab {
namespace {

using test::error_of;

using testing::ElementsAre;
using testing::HasSubstr;

const std::string kModelPath =
    std::string(SERVELAB_SOURCE_DIR) + "/data/models/SmolLM2-135M-Instruct.Q4_1.gguf";

// ---- the real model ------------------------------------------------------------------

class RealModel : public testing::Test {
  protected:
    void SetUp() override {
        if (!std::filesystem::exists(kModelPath))
            GTEST_SKIP() << "model not fetched: " << kModelPath;
    }
};

TEST_F(RealModel, HeaderAndCounts) {
    const GgufFile file = GgufFile::open(kModelPath);
    EXPECT_EQ(file.version(), 3u);
    EXPECT_EQ(file.tensors().size(), 272u);
    EXPECT_EQ(file.metadata().size(), 33u);
    EXPECT_EQ(file.alignment(), 32u);
    EXPECT_EQ(file.data_offset(), 1785664u);
    EXPECT_EQ(file.file_size(), 98362432u);
    EXPECT_EQ(file.metadata().front().first, "general.architecture");  // file order kept
}

TEST_F(RealModel, Metadata) {
    const GgufFile file = GgufFile::open(kModelPath);
    EXPECT_EQ(file.get_string("general.architecture"), "llama");
    EXPECT_EQ(file.get_uint("llama.block_count"), 30u);
    EXPECT_EQ(file.get_uint("llama.context_length"), 8192u);
    EXPECT_EQ(file.get_uint("llama.embedding_length"), 576u);
    EXPECT_EQ(file.get_uint("llama.attention.head_count"), 9u);
    EXPECT_EQ(file.get_uint("llama.attention.head_count_kv"), 3u);
    EXPECT_EQ(file.get_float("llama.rope.freq_base"), 100000.0);
    EXPECT_EQ(file.get_float("llama.attention.layer_norm_rms_epsilon"), 1e-5f);
    EXPECT_EQ(file.get_uint("tokenizer.ggml.bos_token_id"), 1u);
    EXPECT_EQ(file.get_uint("tokenizer.ggml.eos_token_id"), 2u);
    EXPECT_FALSE(file.get_bool("tokenizer.ggml.add_bos_token", true));
    EXPECT_THAT(file.get_string_array("general.languages"), ElementsAre("en"));

    const std::vector<std::string> tokens = file.get_string_array("tokenizer.ggml.tokens");
    ASSERT_EQ(tokens.size(), 49152u);
    EXPECT_EQ(tokens[0], "<|endoftext|>");
    EXPECT_EQ(tokens[1], "<|im_start|>");
    EXPECT_EQ(tokens.back(), "ectable");
    const std::vector<std::string> merges = file.get_string_array("tokenizer.ggml.merges");
    ASSERT_EQ(merges.size(), 48900u);
    EXPECT_EQ(merges[0], "\xC4\xA0 t");  // "Ġ t"
    const std::vector<int64_t> token_types = file.get_int_array("tokenizer.ggml.token_type");
    ASSERT_EQ(token_types.size(), 49152u);
    EXPECT_EQ(token_types[0], 3);
    EXPECT_EQ(token_types[17], 1);
}

TEST_F(RealModel, TensorTable) {
    const GgufFile file = GgufFile::open(kModelPath);
    const GgufTensorInfo& embedding =
        file.require_tensor("token_embd.weight", std::vector<int64_t>{576, 49152});
    EXPECT_EQ(embedding.type, GgmlType::kQ8_0);
    EXPECT_EQ(embedding.offset_bytes, 0u);
    EXPECT_EQ(embedding.size_bytes, 30081024u);
    EXPECT_EQ(embedding.num_elements(), 576 * 49152);
    EXPECT_EQ(embedding.row_length(), 576);
    EXPECT_EQ(embedding.num_rows(), 49152);

    const GgufTensorInfo* norm = file.find_tensor("blk.0.attn_norm.weight");
    ASSERT_NE(norm, nullptr);
    EXPECT_EQ(norm->type, GgmlType::kF32);
    EXPECT_THAT(norm->dims, ElementsAre(576));
    EXPECT_EQ(norm->num_rows(), 1);

    const GgufTensorInfo* down = file.find_tensor("blk.0.ffn_down.weight");
    ASSERT_NE(down, nullptr);
    EXPECT_EQ(down->type, GgmlType::kQ4_1);
    EXPECT_THAT(down->dims, ElementsAre(1536, 576));
    EXPECT_EQ(down->size_bytes, 552960u);

    EXPECT_EQ(file.find_tensor("output.weight"), nullptr);  // tied to token_embd

    // Every tensor is aligned and inside the file.
    for (const GgufTensorInfo& tensor : file.tensors()) {
        EXPECT_EQ(tensor.offset_bytes % file.alignment(), 0u) << tensor.name;
        EXPECT_LE(file.data_offset() + tensor.offset_bytes + tensor.size_bytes, file.file_size());
    }
}

struct RowCheck {
    const char* tensor;
    int64_t row;
    float first;
    float second;
    float last;
    double sum;
};

// Values from gguf.quants.dequantize on the same rows.
TEST_F(RealModel, DequantizedRowsMatchGgufPackage) {
    const RowCheck checks[] = {
        {"token_embd.weight", 0, -0x1.b468p-4f, 0x1.0e28p-5f, 0x1.e78p-6f, -2.2541093826293945},
        {"token_embd.weight", 49151, 0x1.79p-7f, 0x1.79p-8f, -0x1.55ap-5f, -0.4662208557128906},
        {"blk.0.attn_norm.weight", 0, 0x1.cap-7f, 0x1.86p-6f, -0x1.3ap-5f, 0.6129436492919922},
        {"blk.0.ffn_down.weight", 0, -0x1.52cp-2f, 0x1.626p-2f, 0x1.068p-4f, -17.089996337890625},
        {"blk.0.ffn_down.weight", 575, -0x1.498p-5f, -0x1.262p-3f, -0x1.737p-3f, 1.4561767578125},
        {"blk.29.ffn_gate.weight", 1535, -0x1.3d4p-4f, -0x1.4p-11f, 0x1.0c3p-2f,
         1.8589935302734375},
    };
    const GgufFile file = GgufFile::open(kModelPath);
    for (const RowCheck& check : checks) {
        SCOPED_TRACE(std::string(check.tensor) + " row " + std::to_string(check.row));
        const GgufTensorInfo* tensor = file.find_tensor(check.tensor);
        ASSERT_NE(tensor, nullptr);
        const int64_t n = tensor->row_length();
        std::vector<float> row(static_cast<size_t>(n));
        dequantize_row(tensor->type, tensor->data + check.row * row_size_bytes(tensor->type, n),
                       row.data(), n);
        EXPECT_EQ(row[0], check.first);
        EXPECT_EQ(row[1], check.second);
        EXPECT_EQ(row.back(), check.last);
        double sum = 0;
        for (const float v : row) sum += v;
        EXPECT_NEAR(sum, check.sum, 1e-9);
    }
}

TEST_F(RealModel, MovedFileKeepsTensorPointersValid) {
    GgufFile file = GgufFile::open(kModelPath);
    const uint8_t* data = file.find_tensor("blk.0.attn_norm.weight")->data;
    const GgufFile moved = std::move(file);
    EXPECT_EQ(moved.find_tensor("blk.0.attn_norm.weight")->data, data);
    float first = 0;
    dequantize_row(GgmlType::kF32, data, &first, 1);
    EXPECT_EQ(first, 0x1.cap-7f);
}

// ---- small files: zero-copy parse and typed getters ----------------------------------

std::vector<uint8_t> small_file() {
    GgufWriter writer;
    writer.add_string("general.architecture", "llama");
    writer.add_uint32("u32", 7);
    writer.add_float32("f32", 0.25f);
    writer.add_bool("flag", true);
    writer.add_string_array("words", {"a", "bc"});
    writer.add_int32_array("ints", {-1, 2});
    writer.add_float32_array("floats", {0.5f, -2.0f});
    GgufValue negative;
    negative.type = GgufValueType::kInt32;
    negative.as_int = -3;
    writer.add_value("negative", negative);
    GgufValue positive;
    positive.type = GgufValueType::kInt64;
    positive.as_int = 12;
    writer.add_value("positive_i64", positive);
    GgufValue u8;
    u8.type = GgufValueType::kUint8;
    u8.as_uint = 200;
    writer.add_value("u8", u8);
    GgufValue f64;
    f64.type = GgufValueType::kFloat64;
    f64.as_float = 1e300;
    writer.add_value("f64", f64);
    GgufValue big;
    big.type = GgufValueType::kArray;
    big.array_type = GgufValueType::kUint64;
    big.array.resize(1);
    big.array[0].type = GgufValueType::kUint64;
    big.array[0].as_uint = ~0ull;
    writer.add_value("huge_u64s", big);
    const std::vector<float> weights(64, 1.0f);
    writer.add_tensor_from_floats("w", {32, 2}, GgmlType::kQ8_0, weights);
    return writer.to_bytes();
}

TEST(GgufReader, ParseDoesNotCopyTensorData) {
    const std::vector<uint8_t> bytes = small_file();
    const GgufFile file = GgufFile::parse(bytes);
    const GgufTensorInfo& w = file.require_tensor("w", std::vector<int64_t>{32, 2});
    EXPECT_EQ(w.data, bytes.data() + file.data_offset() + w.offset_bytes);
    EXPECT_EQ(file.file_size(), bytes.size());
}

TEST(GgufReader, TypedGetters) {
    const std::vector<uint8_t> bytes = small_file();
    const GgufFile file = GgufFile::parse(bytes);
    EXPECT_EQ(file.get_uint("u32"), 7u);
    EXPECT_EQ(file.get_uint("u8"), 200u);
    EXPECT_EQ(file.get_uint("positive_i64"), 12u);  // non-negative signed is fine
    EXPECT_EQ(file.get_uint("absent", 5), 5u);
    EXPECT_EQ(file.get_float("f32"), 0.25);
    EXPECT_EQ(file.get_float("f64"), 1e300);
    EXPECT_EQ(file.get_float("absent", 1.5), 1.5);
    EXPECT_TRUE(file.get_bool("flag", false));
    EXPECT_TRUE(file.get_bool("absent", true));
    EXPECT_EQ(file.get_string("general.architecture"), "llama");
    EXPECT_EQ(file.get_string("absent", "fallback"), "fallback");
    EXPECT_THAT(file.get_string_array("words"), ElementsAre("a", "bc"));
    EXPECT_THAT(file.get_int_array("ints"), ElementsAre(-1, 2));
    EXPECT_THAT(file.get_float_array("floats"), ElementsAre(0.5f, -2.0f));
    EXPECT_EQ(file.find("absent"), nullptr);
    ASSERT_NE(file.find("u32"), nullptr);
    EXPECT_EQ(file.find("u32")->type, GgufValueType::kUint32);
}

TEST(GgufReader, TypedGettersRejectWrongTypes) {
    const std::vector<uint8_t> bytes = small_file();
    const GgufFile file = GgufFile::parse(bytes);
    EXPECT_EQ(error_of([&] { file.get_uint("general.architecture"); }),
              "key 'general.architecture' has type string, expected an unsigned integer");
    EXPECT_THAT(error_of([&] { file.get_uint("negative"); }), HasSubstr("is negative (-3)"));
    EXPECT_THAT(error_of([&] { file.get_uint("f32"); }), HasSubstr("has type float32"));
    EXPECT_THAT(error_of([&] { file.get_uint("flag"); }), HasSubstr("has type bool"));
    EXPECT_THAT(error_of([&] { file.get_float("u32"); }),
                HasSubstr("key 'u32' has type uint32, expected a float"));
    EXPECT_THAT(error_of([&] { file.get_bool("u32", false); }), HasSubstr("expected a bool"));
    EXPECT_THAT(error_of([&] { file.get_string("words"); }),
                HasSubstr("has type array of string, expected a string"));
    // The optional forms still reject a key that is present with the wrong type.
    EXPECT_THAT(error_of([&] { file.get_string("u32", "x"); }), HasSubstr("expected a string"));
    EXPECT_THAT(error_of([&] { file.get_uint("words", 1); }), HasSubstr("has type array"));
    EXPECT_THAT(error_of([&] { file.get_string_array("ints"); }),
                HasSubstr("key 'ints' has type array of int32, expected an array of string"));
    EXPECT_THAT(error_of([&] { file.get_int_array("words"); }),
                HasSubstr("expected an array of integers"));
    EXPECT_THAT(error_of([&] { file.get_float_array("u32"); }),
                HasSubstr("expected an array of floats"));
    EXPECT_THAT(error_of([&] { file.get_int_array("huge_u64s"); }),
                HasSubstr("does not fit in int64"));
}

}  // namespace
}  // namespace servelab
