// gguf_malformed_test.cpp — every way a GGUF file can be broken gives one clear error.
//
// Part of the model loader tests (all labs). Each test builds a valid file
// with GgufWriter, breaks one thing (overwrites a field, truncates, forges a
// count) and checks the servelab::Error message. Run under AddressSanitizer,
// these also show that no malformed input is read out of bounds.
//
// Byte layout reminders (GGUF, little-endian):
//   header: magic [0,4) | version [4,8) | tensor_count [8,16) | kv_count [16,24)
//   metadata entry: key length u64 | key | value type u32 | value
//   tensor info: name length u64 | name | n_dims u32 | dims u64 × n_dims | type u32 | offset u64
// Fields after a key or a tensor name are found by searching for that name.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/common/error.h"
#include "reference/model/gguf_reader.h"
#include "reference/model/gguf_writer.h"
#include "tests/unit/test_util.h"

namespace servelab {
namespace {

using test::error_of;

using testing::AnyOf;
using testing::HasSubstr;
using testing::StartsWith;

constexpr size_t kVersionOffset = 4;
constexpr size_t kTensorCountOffset = 8;
constexpr size_t kKvCountOffset = 16;
constexpr size_t kFirstKeyLengthOffset = 24;

// ---- helpers -----------------------------------------------------------------------------

std::string parse_error(const std::vector<uint8_t>& bytes, const GgufLimits& limits = {}) {
    return error_of([&] { GgufFile::parse(bytes, limits); });
}

void put_u32(std::vector<uint8_t>& bytes, size_t offset, uint32_t value) {
    for (int i = 0; i < 4; ++i) bytes.at(offset + i) = static_cast<uint8_t>(value >> (8 * i));
}

void put_u64(std::vector<uint8_t>& bytes, size_t offset, uint64_t value) {
    for (int i = 0; i < 8; ++i) bytes.at(offset + i) = static_cast<uint8_t>(value >> (8 * i));
}

// Offset just past the first occurrence of `text` in `bytes`.
size_t offset_after(const std::vector<uint8_t>& bytes, std::string_view text) {
    const auto it = std::search(bytes.begin(), bytes.end(), text.begin(), text.end());
    if (it == bytes.end())
        throw std::runtime_error("test bug: '" + std::string(text) + "' not found");
    return static_cast<size_t>(it - bytes.begin()) + text.size();
}

// Where the fields of a metadata entry / tensor info are, given its key / name.
size_t value_type_offset(const std::vector<uint8_t>& bytes, std::string_view key) {
    return offset_after(bytes, key);
}

struct TensorInfoFields {
    size_t n_dims;
    size_t first_dim;
    size_t type;
    size_t offset;
};

TensorInfoFields tensor_info_fields(const std::vector<uint8_t>& bytes, std::string_view name,
                                    uint32_t n_dims) {
    const size_t n_dims_at = offset_after(bytes, name);
    const size_t type_at = n_dims_at + 4 + 8 * n_dims;
    return {n_dims_at, n_dims_at + 4, type_at, type_at + 4};
}

// A small valid file: a few kinds of metadata and two tensors. The last
// tensor is exactly 32 bytes, so the file has no trailing padding and every
// truncation cuts into something the reader needs.
std::vector<uint8_t> valid_file() {
    GgufWriter writer;
    writer.add_string("general.architecture", "llama");
    writer.add_uint32("llama.block_count", 2);
    writer.add_float32("llama.rope.freq_base", 10000.0f);
    writer.add_bool("tokenizer.ggml.add_bos_token", true);
    writer.add_string_array("tokenizer.ggml.tokens", {"a", "bc"});
    writer.add_int32_array("tokenizer.ggml.token_type", {1, 3});
    const std::vector<float> alpha(64, 0.5f);
    writer.add_tensor_from_floats("tensor.alpha", {32, 2}, GgmlType::kQ4_0, alpha);
    const std::vector<float> beta = {1, 2, 3, 4, 5, 6, 7, 8};
    writer.add_tensor_from_floats("tensor.beta", {8}, GgmlType::kF32, beta);
    return writer.to_bytes();
}

// A valid file holding one tensor with arbitrary dims and type (raw data is
// 64 zero bytes, enough for the tensors that get past the dims checks).
std::vector<uint8_t> file_with_tensor(std::vector<int64_t> dims, GgmlType type,
                                      size_t raw_bytes = 64) {
    GgufWriter writer;
    writer.add_tensor("x", std::move(dims), type, std::vector<uint8_t>(raw_bytes));
    return writer.to_bytes();
}

GgufValue nested_arrays(int depth) {
    GgufValue value;
    value.type = GgufValueType::kUint8;
    value.as_uint = 1;
    for (int i = 0; i < depth; ++i) {
        GgufValue outer;
        outer.type = GgufValueType::kArray;
        outer.array_type = value.type;
        outer.array.push_back(value);
        value = outer;
    }
    return value;
}

TEST(GgufMalformed, BaseFileIsValid) {
    const std::vector<uint8_t> bytes = valid_file();
    const GgufFile file = GgufFile::parse(bytes);
    EXPECT_EQ(file.tensors().size(), 2u);
    EXPECT_EQ(file.data_offset() + 64 + 32, bytes.size());  // no trailing padding
}

// ---- truncation --------------------------------------------------------------------------

TEST(GgufMalformed, TruncationAtEveryLengthThrows) {
    const std::vector<uint8_t> bytes = valid_file();
    for (size_t length = 0; length < bytes.size(); ++length) {
        // An exact-size copy, so AddressSanitizer sees any read past its end.
        const std::vector<uint8_t> prefix(bytes.begin(), bytes.begin() + length);
        const std::string message = parse_error(prefix);
        ASSERT_THAT(message, StartsWith("GGUF: ")) << "length " << length;
        ASSERT_THAT(message, AnyOf(HasSubstr("truncated"), HasSubstr("outside the file")))
            << "length " << length;
        ASSERT_EQ(message.find('\n'), std::string::npos) << "length " << length;
    }
}

TEST(GgufMalformed, TruncationNamesWhatWasBeingRead) {
    const std::vector<uint8_t> bytes = valid_file();
    EXPECT_EQ(parse_error({}), "GGUF: file truncated while reading header");
    const std::vector<uint8_t> in_header(bytes.begin(), bytes.begin() + 20);
    EXPECT_EQ(parse_error(in_header), "GGUF: file truncated while reading header");
    // Cut inside the key "tokenizer.ggml.tokens", the 5th entry.
    const size_t in_key_end = offset_after(bytes, "tokenizer.ggml.tok");
    const std::vector<uint8_t> in_key(bytes.begin(), bytes.begin() + in_key_end);
    EXPECT_EQ(parse_error(in_key), "GGUF: file truncated while reading metadata key #4");
    // So early that the promised entries cannot fit: caught before reading them.
    const std::vector<uint8_t> early(bytes.begin(), bytes.begin() + 30);
    EXPECT_EQ(parse_error(early),
              "GGUF: file truncated: 6 metadata entries cannot fit in the remaining 6 bytes");
    const size_t tokens_end = offset_after(bytes, "bc");
    const std::vector<uint8_t> in_tokens(bytes.begin(), bytes.begin() + tokens_end - 1);
    EXPECT_EQ(parse_error(in_tokens),
              "GGUF: file truncated while reading value of metadata key 'tokenizer.ggml.tokens'");
    const size_t beta_name_end = offset_after(bytes, "tensor.beta");
    const std::vector<uint8_t> in_beta(bytes.begin(), bytes.begin() + beta_name_end + 2);
    EXPECT_EQ(parse_error(in_beta),
              "GGUF: file truncated while reading tensor info #1 ('tensor.beta')");
}

// ---- header ------------------------------------------------------------------------------

TEST(GgufMalformed, WrongMagic) {
    std::vector<uint8_t> bytes = valid_file();
    bytes[3] = 'X';
    EXPECT_EQ(parse_error(bytes), "GGUF: bad magic (expected 'GGUF')");
}

TEST(GgufMalformed, Version1IsRejected) {
    std::vector<uint8_t> bytes = valid_file();
    put_u32(bytes, kVersionOffset, 1);
    EXPECT_THAT(parse_error(bytes), HasSubstr("unsupported GGUF version 1"));
}

TEST(GgufMalformed, UnknownVersionsAreRejected) {
    std::vector<uint8_t> bytes = valid_file();
    put_u32(bytes, kVersionOffset, 99);
    EXPECT_THAT(parse_error(bytes), HasSubstr("GGUF: unsupported version 99"));
    put_u32(bytes, kVersionOffset, 0);
    EXPECT_THAT(parse_error(bytes), HasSubstr("GGUF: unsupported version 0"));
}

TEST(GgufMalformed, Version2IsAccepted) {
    std::vector<uint8_t> bytes = valid_file();
    put_u32(bytes, kVersionOffset, 2);
    EXPECT_EQ(GgufFile::parse(bytes).version(), 2u);
}

TEST(GgufMalformed, AbsurdKvCount) {
    std::vector<uint8_t> bytes = valid_file();
    put_u64(bytes, kKvCountOffset, 1ull << 40);
    EXPECT_EQ(parse_error(bytes), "GGUF: metadata key count 1099511627776 exceeds limit 65536");
}

TEST(GgufMalformed, KvCountLargerThanTheFileCouldHold) {
    std::vector<uint8_t> bytes = valid_file();
    put_u64(bytes, kKvCountOffset, 60000);  // under the limit, but ~780 KB of entries
    EXPECT_THAT(parse_error(bytes),
                HasSubstr("GGUF: file truncated: 60000 metadata entries cannot fit"));
}

TEST(GgufMalformed, AbsurdTensorCount) {
    std::vector<uint8_t> bytes = valid_file();
    put_u64(bytes, kTensorCountOffset, 1000000000000ull);
    EXPECT_EQ(parse_error(bytes), "GGUF: tensor count 1000000000000 exceeds limit 65536");
}

TEST(GgufMalformed, TensorCountLargerThanTheFileCouldHold) {
    std::vector<uint8_t> bytes = valid_file();
    put_u64(bytes, kTensorCountOffset, 60000);
    EXPECT_THAT(parse_error(bytes),
                HasSubstr("GGUF: file truncated: 60000 tensor infos cannot fit"));
}

// ---- metadata ----------------------------------------------------------------------------

TEST(GgufMalformed, HugeKeyLength) {
    std::vector<uint8_t> bytes = valid_file();
    put_u64(bytes, kFirstKeyLengthOffset, 1000000000000000000ull);
    EXPECT_EQ(parse_error(bytes),
              "GGUF: string of 1000000000000000000 bytes exceeds limit 67108864 "
              "(in metadata key #0)");
}

TEST(GgufMalformed, KeyLengthPastTheEnd) {
    std::vector<uint8_t> bytes = valid_file();
    put_u64(bytes, kFirstKeyLengthOffset, 1 << 20);  // under the limit, past the end
    EXPECT_EQ(parse_error(bytes), "GGUF: file truncated while reading metadata key #0");
}

TEST(GgufMalformed, HugeStringValueLength) {
    std::vector<uint8_t> bytes = valid_file();
    const size_t length_at = value_type_offset(bytes, "general.architecture") + 4;
    put_u64(bytes, length_at, ~0ull);
    EXPECT_THAT(parse_error(bytes),
                HasSubstr("string of 18446744073709551615 bytes exceeds limit 67108864 (in value "
                          "of metadata key 'general.architecture')"));
}

TEST(GgufMalformed, HugeArrayCount) {
    std::vector<uint8_t> bytes = valid_file();
    const size_t count_at = value_type_offset(bytes, "tokenizer.ggml.tokens") + 4 + 4;
    put_u64(bytes, count_at, 1ull << 40);
    EXPECT_EQ(parse_error(bytes),
              "GGUF: array of 1099511627776 elements exceeds limit 16777216 in metadata key "
              "'tokenizer.ggml.tokens'");
}

TEST(GgufMalformed, ArrayCountLargerThanTheFileCouldHold) {
    std::vector<uint8_t> bytes = valid_file();
    const size_t count_at = value_type_offset(bytes, "tokenizer.ggml.token_type") + 4 + 4;
    put_u64(bytes, count_at, 1 << 20);  // 4 MiB of int32 in a file of a few hundred bytes
    EXPECT_THAT(parse_error(bytes), HasSubstr("GGUF: file truncated: array of 1048576 elements in "
                                              "metadata key 'tokenizer.ggml.token_type'"));
}

TEST(GgufMalformed, UnknownValueType) {
    std::vector<uint8_t> bytes = valid_file();
    put_u32(bytes, value_type_offset(bytes, "llama.block_count"), 13);
    EXPECT_EQ(parse_error(bytes),
              "GGUF: metadata key 'llama.block_count' has unknown value type 13");
}

TEST(GgufMalformed, UnknownArrayElementType) {
    std::vector<uint8_t> bytes = valid_file();
    put_u32(bytes, value_type_offset(bytes, "tokenizer.ggml.tokens") + 4, 77);
    EXPECT_EQ(parse_error(bytes),
              "GGUF: metadata key 'tokenizer.ggml.tokens' has an array of unknown value type 77");
}

TEST(GgufMalformed, BoolThatIsNeitherZeroNorOne) {
    std::vector<uint8_t> bytes = valid_file();
    bytes.at(value_type_offset(bytes, "tokenizer.ggml.add_bos_token") + 4) = 2;
    EXPECT_THAT(parse_error(bytes), HasSubstr("has bool value 2 (not 0 or 1)"));
}

TEST(GgufMalformed, DuplicateMetadataKey) {
    GgufWriter writer;
    writer.add_uint32("llama.block_count", 1);
    writer.add_uint32("llama.block_count", 2);
    EXPECT_EQ(parse_error(writer.to_bytes()), "GGUF: duplicate metadata key 'llama.block_count'");
}

TEST(GgufMalformed, ArrayNestingDeeperThanTheLimit) {
    GgufWriter deep;
    deep.add_value("deep", nested_arrays(9));
    EXPECT_EQ(parse_error(deep.to_bytes()),
              "GGUF: array nesting deeper than 8 in metadata key 'deep'");

    GgufWriter at_limit;
    at_limit.add_value("deep", nested_arrays(8));
    EXPECT_NO_THROW(GgufFile::parse(at_limit.to_bytes()));

    GgufLimits shallow;
    shallow.max_array_depth = 2;
    GgufWriter three;
    three.add_value("three", nested_arrays(3));
    EXPECT_THAT(parse_error(three.to_bytes(), shallow), HasSubstr("array nesting deeper than 2"));
}

TEST(GgufMalformed, BadAlignmentKey) {
    for (const uint32_t alignment : {0u, 3u, 48u, 0x80000001u}) {
        GgufWriter writer;
        writer.add_uint32("general.alignment", alignment);
        EXPECT_EQ(parse_error(writer.to_bytes()),
                  "GGUF: general.alignment must be a nonzero power of two (a uint32)")
            << alignment;
    }
    GgufWriter wrong_type;
    wrong_type.add_string("general.alignment", "32");
    EXPECT_THAT(parse_error(wrong_type.to_bytes()),
                HasSubstr("general.alignment must be a nonzero power of two"));
}

TEST(GgufMalformed, SmallerLimitsAreHonoured) {
    const std::vector<uint8_t> bytes = valid_file();
    GgufLimits limits;
    limits.max_string_bytes = 8;
    EXPECT_THAT(parse_error(bytes, limits), HasSubstr("string of 20 bytes exceeds limit 8"));
    limits = {};
    limits.max_kv_count = 3;
    EXPECT_THAT(parse_error(bytes, limits), HasSubstr("metadata key count 6 exceeds limit 3"));
    limits = {};
    limits.max_tensor_count = 1;
    EXPECT_THAT(parse_error(bytes, limits), HasSubstr("tensor count 2 exceeds limit 1"));
    limits = {};
    limits.max_array_elems = 1;
    EXPECT_THAT(parse_error(bytes, limits), HasSubstr("array of 2 elements exceeds limit 1"));
    limits = {};
    limits.max_total_array_elems = 3;
    EXPECT_THAT(parse_error(bytes, limits),
                HasSubstr("metadata arrays hold more than 3 elements in all"));
}

// ---- tensor infos --------------------------------------------------------------------------

TEST(GgufMalformed, UnknownTensorType) {
    std::vector<uint8_t> bytes = valid_file();
    const TensorInfoFields beta = tensor_info_fields(bytes, "tensor.beta", 1);
    put_u32(bytes, beta.type, 99);
    EXPECT_EQ(parse_error(bytes), "GGUF: tensor 'tensor.beta' has unsupported type 99");
    put_u32(bytes, beta.type, 13);  // Q5_K: a real ggml type, but not one servelab decodes
    EXPECT_EQ(parse_error(bytes), "GGUF: tensor 'tensor.beta' has unsupported type 13");
}

TEST(GgufMalformed, TooManyDimensions) {
    std::vector<uint8_t> bytes = valid_file();
    put_u32(bytes, tensor_info_fields(bytes, "tensor.beta", 1).n_dims, 9);
    EXPECT_EQ(parse_error(bytes), "GGUF: tensor 'tensor.beta' has 9 dimensions (max 4)");
    EXPECT_EQ(parse_error(file_with_tensor({1, 1, 1, 1, 1}, GgmlType::kF32)),
              "GGUF: tensor 'x' has 5 dimensions (max 4)");
    put_u32(bytes, tensor_info_fields(bytes, "tensor.beta", 1).n_dims, 0xFFFFFFFFu);
    EXPECT_THAT(parse_error(bytes), HasSubstr("has 4294967295 dimensions (max 4)"));
}

TEST(GgufMalformed, ZeroDimension) {
    EXPECT_EQ(parse_error(file_with_tensor({32, 0}, GgmlType::kF32)),
              "GGUF: tensor 'x' dimension 1 is 0");
    std::vector<uint8_t> bytes = valid_file();
    put_u64(bytes, tensor_info_fields(bytes, "tensor.beta", 1).first_dim, 0);
    EXPECT_EQ(parse_error(bytes), "GGUF: tensor 'tensor.beta' dimension 0 is 0");
}

TEST(GgufMalformed, NegativeOrAbsurdDimension) {
    EXPECT_EQ(parse_error(file_with_tensor({32, -1}, GgmlType::kF32)),
              "GGUF: tensor 'x' dimension 1 is 18446744073709551615, more than the limit of "
              "1099511627776 elements");
    EXPECT_THAT(parse_error(file_with_tensor({1ll << 41}, GgmlType::kF32)),
                HasSubstr("dimension 0 is 2199023255552, more than the limit"));
}

TEST(GgufMalformed, ElementCountOverflow) {
    // Each dim is within the limit; their product, 2^80, does not fit in 64 bits.
    EXPECT_THAT(parse_error(file_with_tensor({1ll << 40, 1ll << 40}, GgmlType::kF32)),
                HasSubstr("GGUF: tensor 'x' element count overflows"));
    EXPECT_THAT(parse_error(file_with_tensor({1 << 20, 1 << 20, 1 << 20, 1 << 20}, GgmlType::kF32)),
                HasSubstr("element count overflows"));
}

TEST(GgufMalformed, ElementCountOverTheLimit) {
    EXPECT_EQ(parse_error(file_with_tensor({1 << 30, 1 << 30}, GgmlType::kF32)),
              "GGUF: tensor 'x' has 1152921504606846976 elements, more than the limit of "
              "1099511627776");
}

TEST(GgufMalformed, RowLengthNotAWholeNumberOfBlocks) {
    EXPECT_EQ(parse_error(file_with_tensor({33}, GgmlType::kQ4_0)),
              "GGUF: tensor 'x' row length 33 is not a multiple of the Q4_0 block size 32");
    EXPECT_EQ(parse_error(file_with_tensor({576, 2}, GgmlType::kQ4_K)),
              "GGUF: tensor 'x' row length 576 is not a multiple of the Q4_K block size 256");
}

TEST(GgufMalformed, DuplicateTensorName) {
    GgufWriter writer;
    writer.add_tensor("x", {8}, GgmlType::kF32, std::vector<uint8_t>(32));
    writer.add_tensor("x", {8}, GgmlType::kF32, std::vector<uint8_t>(32));
    EXPECT_EQ(parse_error(writer.to_bytes()), "GGUF: duplicate tensor name 'x'");
}

TEST(GgufMalformed, TensorDataOutsideTheFile) {
    std::vector<uint8_t> bytes = valid_file();
    const uint64_t data_offset = GgufFile::parse(bytes).data_offset();
    put_u64(bytes, tensor_info_fields(bytes, "tensor.beta", 1).offset, 1 << 20);
    const uint64_t start = data_offset + (1 << 20);
    EXPECT_EQ(parse_error(bytes), "GGUF: tensor 'tensor.beta' data [" + std::to_string(start) +
                                      ".." + std::to_string(start + 32) +
                                      ") lies outside the file (size " +
                                      std::to_string(bytes.size()) + ")");
}

TEST(GgufMalformed, TensorOffsetThatWouldOverflow) {
    std::vector<uint8_t> bytes = valid_file();
    put_u64(bytes, tensor_info_fields(bytes, "tensor.beta", 1).offset, ~0ull - 31);  // aligned
    EXPECT_THAT(parse_error(bytes), HasSubstr("lies outside the file"));
}

TEST(GgufMalformed, TensorDataTooLongForTheFile) {
    // The right offset, but a second dimension that makes the tensor 32 KB.
    std::vector<uint8_t> bytes = valid_file();
    const TensorInfoFields alpha = tensor_info_fields(bytes, "tensor.alpha", 2);
    put_u64(bytes, alpha.first_dim + 8, 1000);
    EXPECT_THAT(parse_error(bytes), HasSubstr("GGUF: tensor 'tensor.alpha' data ["));
}

TEST(GgufMalformed, MisalignedTensorOffset) {
    std::vector<uint8_t> bytes = valid_file();
    put_u64(bytes, tensor_info_fields(bytes, "tensor.beta", 1).offset, 1);
    EXPECT_EQ(parse_error(bytes),
              "GGUF: tensor 'tensor.beta' offset 1 is not a multiple of the alignment 32");
}

TEST(GgufMalformed, GarbageNamesStayOnOneLine) {
    GgufWriter writer;
    writer.add_tensor("bad\nname\x01", {33}, GgmlType::kQ4_0, std::vector<uint8_t>(18));
    EXPECT_EQ(parse_error(writer.to_bytes()),
              "GGUF: tensor 'bad?name?' row length 33 is not a multiple of the Q4_0 block size 32");
}

// ---- typed lookups on a valid file ---------------------------------------------------------

TEST(GgufMalformed, MissingRequiredKey) {
    const std::vector<uint8_t> bytes = valid_file();
    const GgufFile file = GgufFile::parse(bytes);
    EXPECT_EQ(error_of([&] { file.get_uint("llama.context_length"); }),
              "missing required key 'llama.context_length'");
    EXPECT_EQ(error_of([&] { file.get_string("tokenizer.ggml.model"); }),
              "missing required key 'tokenizer.ggml.model'");
    EXPECT_THAT(error_of([&] { file.get_float_array("x"); }), HasSubstr("missing required key"));
}

TEST(GgufMalformed, WrongKeyType) {
    const std::vector<uint8_t> bytes = valid_file();
    const GgufFile file = GgufFile::parse(bytes);
    EXPECT_EQ(error_of([&] { file.get_uint("general.architecture"); }),
              "key 'general.architecture' has type string, expected an unsigned integer");
    EXPECT_EQ(error_of([&] { file.get_float("llama.block_count"); }),
              "key 'llama.block_count' has type uint32, expected a float");
    EXPECT_EQ(error_of([&] { file.get_string_array("tokenizer.ggml.token_type"); }),
              "key 'tokenizer.ggml.token_type' has type array of int32, expected an array of "
              "string");
}

TEST(GgufMalformed, MissingTensor) {
    const std::vector<uint8_t> bytes = valid_file();
    const GgufFile file = GgufFile::parse(bytes);
    EXPECT_EQ(error_of([&] { file.require_tensor("output.weight", std::vector<int64_t>{8}); }),
              "missing required tensor 'output.weight'");
}

TEST(GgufMalformed, TensorShapeMismatch) {
    const std::vector<uint8_t> bytes = valid_file();
    const GgufFile file = GgufFile::parse(bytes);
    EXPECT_EQ(error_of([&] {
                  file.require_tensor("tensor.alpha", std::vector<int64_t>{2, 32});
              }),
              "tensor 'tensor.alpha' has shape [32, 2], expected [2, 32]");
    EXPECT_EQ(error_of([&] {
                  file.require_tensor("tensor.beta", std::vector<int64_t>{8, 1});
              }),
              "tensor 'tensor.beta' has shape [8], expected [8, 1]");
    EXPECT_NO_THROW(file.require_tensor("tensor.beta", std::vector<int64_t>{8}));
}

// ---- files on disk ---------------------------------------------------------------------------

class GgufMalformedOnDisk : public testing::Test {
  protected:
    void TearDown() override { std::filesystem::remove(path_); }

    std::string write(const std::vector<uint8_t>& bytes) {
        std::ofstream out(path_, std::ios::binary);
        out.write(reinterpret_cast<const char*>(bytes.data()),
                  static_cast<std::streamsize>(bytes.size()));
        return path_.string();
    }

    std::filesystem::path path_ = std::filesystem::temp_directory_path() /
                                  ("servelab_malformed_" + std::to_string(::getpid()) + ".gguf");
};

TEST_F(GgufMalformedOnDisk, NonexistentPath) {
    EXPECT_EQ(error_of([] { GgufFile::open("/nonexistent/model.gguf"); }),
              "cannot open model file '/nonexistent/model.gguf': No such file or directory");
}

TEST_F(GgufMalformedOnDisk, DirectoryIsNotAModel) {
    const std::string dir = std::filesystem::temp_directory_path().string();
    EXPECT_EQ(error_of([&] { GgufFile::open(dir); }),
              "cannot open model file '" + dir + "': not a regular file");
}

TEST_F(GgufMalformedOnDisk, ErrorsNameThePathOnce) {
    std::vector<uint8_t> bytes = valid_file();
    bytes[0] = 'X';
    const std::string path = write(bytes);
    EXPECT_EQ(error_of([&] { GgufFile::open(path); }),
              path + ": GGUF: bad magic (expected 'GGUF')");
}

TEST_F(GgufMalformedOnDisk, EmptyFile) {
    const std::string path = write({});
    EXPECT_EQ(error_of([&] { GgufFile::open(path); }),
              path + ": GGUF: file truncated while reading header");
}

TEST_F(GgufMalformedOnDisk, ValidFileOpens) {
    const std::string path = write(valid_file());
    const GgufFile file = GgufFile::open(path);
    EXPECT_EQ(file.get_uint("llama.block_count"), 2u);
    float beta[8];
    std::memcpy(beta, file.find_tensor("tensor.beta")->data, sizeof beta);
    EXPECT_EQ(beta[7], 8.0f);
}

}  // namespace
}  // namespace servelab
