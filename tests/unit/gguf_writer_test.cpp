// gguf_writer_test.cpp — write GGUF files and read them back unchanged.
//
// Part of the model loader tests (all labs). Covers every metadata value type
// (nested arrays included), tensors of every type, alignment padding, writing
// to disk, and the fuzz seed corpus (which must stay parseable).
//
// The corpus in tests/fuzz/corpus is made by the disabled test
// FuzzCorpus.DISABLED_Regenerate; to rebuild it:
//   servelab_tests --gtest_also_run_disabled_tests --gtest_filter='FuzzCorpus.*'
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/common/error.h"
#include "kernels/cpu/dequantize.h"
#include "reference/model/gguf_reader.h"
#include "reference/model/gguf_writer.h"

#ifndef SERVELAB_SOURCE_DIR
#define SERVELAB_SOURCE_DIR "."
#endif

namespace servelab {
namespace {

using testing::HasSubstr;
using namespace std::string_literals;

const std::string kCorpusDir = std::string(SERVELAB_SOURCE_DIR) + "/tests/fuzz/corpus";

GgufValue make_uint(GgufValueType type, uint64_t v) {
    GgufValue value;
    value.type = type;
    value.as_uint = v;
    return value;
}

GgufValue make_int(GgufValueType type, int64_t v) {
    GgufValue value;
    value.type = type;
    value.as_int = v;
    return value;
}

GgufValue make_float(GgufValueType type, double v) {
    GgufValue value;
    value.type = type;
    value.as_float = v;
    return value;
}

GgufValue make_string(const std::string& s) {
    GgufValue value;
    value.type = GgufValueType::kString;
    value.as_string = s;
    return value;
}

GgufValue make_array(GgufValueType element_type, std::vector<GgufValue> elements) {
    GgufValue value;
    value.type = GgufValueType::kArray;
    value.array_type = element_type;
    value.array = std::move(elements);
    return value;
}

// Exact equality of two values, field by field, recursing into arrays.
// Floats are compared by bits so that NaN payloads and -0.0 count.
bool same_value(const GgufValue& a, const GgufValue& b) {
    if (a.type != b.type || a.as_uint != b.as_uint || a.as_int != b.as_int ||
        a.as_string != b.as_string) {
        return false;
    }
    if (std::memcmp(&a.as_float, &b.as_float, sizeof a.as_float) != 0) return false;
    if (a.type != GgufValueType::kArray) return true;
    if (a.array_type != b.array_type || a.array.size() != b.array.size()) return false;
    for (size_t i = 0; i < a.array.size(); ++i) {
        if (!same_value(a.array[i], b.array[i])) return false;
    }
    return true;
}

// One value of every type, with edge values, plus nested arrays.
std::vector<std::pair<std::string, GgufValue>> every_value_type() {
    std::vector<std::pair<std::string, GgufValue>> values = {
        {"u8", make_uint(GgufValueType::kUint8, 255)},
        {"i8", make_int(GgufValueType::kInt8, -128)},
        {"u16", make_uint(GgufValueType::kUint16, 65535)},
        {"i16", make_int(GgufValueType::kInt16, -32768)},
        {"u32", make_uint(GgufValueType::kUint32, 4294967295u)},
        {"i32", make_int(GgufValueType::kInt32, -2147483647 - 1)},
        {"f32", make_float(GgufValueType::kFloat32, -0.0)},
        {"bool.true", make_uint(GgufValueType::kBool, 1)},
        {"bool.false", make_uint(GgufValueType::kBool, 0)},
        {"string", make_string("h\xC3\xA9llo\0world\n"s)},  // UTF-8, an inner NUL, a newline
        {"string.empty", make_string("")},
        {"u64", make_uint(GgufValueType::kUint64, ~0ull)},
        {"i64", make_int(GgufValueType::kInt64, std::numeric_limits<int64_t>::min())},
        {"f64", make_float(GgufValueType::kFloat64, 1.0 / 3.0)},
        {"f32.inf", make_float(GgufValueType::kFloat32, -INFINITY)},
        {"array.empty", make_array(GgufValueType::kUint32, {})},
        {"array.i16", make_array(GgufValueType::kInt16, {make_int(GgufValueType::kInt16, -5),
                                                         make_int(GgufValueType::kInt16, 7)})},
        {"array.f64",
         make_array(GgufValueType::kFloat64, {make_float(GgufValueType::kFloat64, 2.5e-300)})},
        {"array.bool", make_array(GgufValueType::kBool, {make_uint(GgufValueType::kBool, 1),
                                                         make_uint(GgufValueType::kBool, 0)})},
        {"array.string", make_array(GgufValueType::kString, {make_string("x"), make_string("")})},
    };
    // [[1, 2], [], [3]] of u8, and one level deeper around it.
    GgufValue nested = make_array(
        GgufValueType::kArray,
        {make_array(GgufValueType::kUint8,
                    {make_uint(GgufValueType::kUint8, 1), make_uint(GgufValueType::kUint8, 2)}),
         make_array(GgufValueType::kUint8, {}),
         make_array(GgufValueType::kUint8, {make_uint(GgufValueType::kUint8, 3)})});
    values.emplace_back("array.nested", nested);
    values.emplace_back("array.nested.deeper", make_array(GgufValueType::kArray, {nested, nested}));
    return values;
}

// Values in [-4, 4] in steps of 1/256. Mapped by hand from mt19937 (whose
// output the standard fixes) rather than with std::*_distribution (whose
// output differs between standard libraries), so the corpus is reproducible.
std::vector<float> random_floats(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<float> values(n);
    for (float& v : values) v = static_cast<float>(static_cast<int>(rng() % 2049) - 1024) / 256.0f;
    return values;
}

// Raw bytes for a K-quant tensor: random codes with finite fp16 scales.
std::vector<uint8_t> random_k_quant_bytes(GgmlType type, int64_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<uint8_t> raw(static_cast<size_t>(row_size_bytes(type, n)));
    for (uint8_t& byte : raw) byte = static_cast<uint8_t>(rng());
    const int64_t block_bytes = ggml_type_traits(type).block_bytes;
    for (size_t block = 0; block < raw.size(); block += block_bytes) {
        const uint16_t scale = float_to_fp16(0.125f);
        const size_t offsets[2] = {type == GgmlType::kQ6_K ? 208u : 0u, 2u};
        for (size_t k = 0; k < (type == GgmlType::kQ6_K ? 1u : 2u); ++k) {
            raw[block + offsets[k]] = static_cast<uint8_t>(scale);
            raw[block + offsets[k] + 1] = static_cast<uint8_t>(scale >> 8);
        }
    }
    return raw;
}

TEST(GgufWriter, MetadataOfEveryTypeRoundTrips) {
    GgufWriter writer;
    const auto values = every_value_type();
    for (const auto& [key, value] : values) writer.add_value(key, value);
    const std::vector<uint8_t> bytes = writer.to_bytes();
    const GgufFile file = GgufFile::parse(bytes);

    EXPECT_EQ(file.version(), 3u);
    ASSERT_EQ(file.metadata().size(), values.size());
    for (size_t i = 0; i < values.size(); ++i) {
        EXPECT_EQ(file.metadata()[i].first, values[i].first);
        EXPECT_TRUE(same_value(file.metadata()[i].second, values[i].second)) << values[i].first;
    }
    EXPECT_TRUE(std::signbit(file.get_float("f32")));
}

TEST(GgufWriter, ConvenienceAddersRoundTrip) {
    GgufWriter writer;
    writer.add_uint32("a.u32", 123456);
    writer.add_float32("a.f32", 0.1f);
    writer.add_bool("a.bool", true);
    writer.add_string("a.string", "text");
    writer.add_string_array("a.strings", {"one", "two", ""});
    writer.add_int32_array("a.ints", {-7, 0, 2147483647});
    writer.add_float32_array("a.floats", {1.5f, -0.0f});
    const std::vector<uint8_t> bytes = writer.to_bytes();
    const GgufFile file = GgufFile::parse(bytes);
    EXPECT_EQ(file.find("a.u32")->type, GgufValueType::kUint32);
    EXPECT_EQ(file.get_uint("a.u32"), 123456u);
    EXPECT_EQ(file.find("a.f32")->type, GgufValueType::kFloat32);
    EXPECT_EQ(file.get_float("a.f32"), 0.1f);
    EXPECT_TRUE(file.get_bool("a.bool", false));
    EXPECT_EQ(file.get_string("a.string"), "text");
    EXPECT_THAT(file.get_string_array("a.strings"), testing::ElementsAre("one", "two", ""));
    EXPECT_THAT(file.get_int_array("a.ints"), testing::ElementsAre(-7, 0, 2147483647));
    EXPECT_EQ(file.find("a.ints")->array_type, GgufValueType::kInt32);
    EXPECT_THAT(file.get_float_array("a.floats"), testing::ElementsAre(1.5f, -0.0f));
}

struct TensorCase {
    std::string name;
    std::vector<int64_t> dims;
    GgmlType type;
};

// Tensors of every type, with sizes that are not multiples of the alignment.
void expect_tensors_round_trip(uint64_t alignment) {
    const std::vector<TensorCase> cases = {
        {"f32", {3, 5}, GgmlType::kF32},          {"f16", {7}, GgmlType::kF16},
        {"bf16", {5, 1, 2}, GgmlType::kBF16},     {"q8_0", {64, 3}, GgmlType::kQ8_0},
        {"q4_0", {32, 2, 2, 1}, GgmlType::kQ4_0}, {"q4_1", {96}, GgmlType::kQ4_1},
        {"q4_k", {256, 2}, GgmlType::kQ4_K},      {"q6_k", {512}, GgmlType::kQ6_K},
    };
    GgufWriter writer(alignment);
    writer.add_string("general.name", "tensors");
    std::vector<std::vector<uint8_t>> raws;
    uint32_t seed = 10;
    for (const TensorCase& c : cases) {
        int64_t n = 1;
        for (const int64_t d : c.dims) n *= d;
        if (c.type == GgmlType::kQ4_K || c.type == GgmlType::kQ6_K) {
            raws.push_back(random_k_quant_bytes(c.type, n, seed++));
            writer.add_tensor(c.name, c.dims, c.type, raws.back());
        } else {
            const std::vector<float> values = random_floats(static_cast<size_t>(n), seed++);
            raws.push_back(quantize_row(c.type, values));
            writer.add_tensor_from_floats(c.name, c.dims, c.type, values);
        }
    }
    const std::vector<uint8_t> bytes = writer.to_bytes();
    const GgufFile file = GgufFile::parse(bytes);

    EXPECT_EQ(file.alignment(), alignment);
    EXPECT_EQ(file.data_offset() % alignment, 0u);
    EXPECT_EQ(bytes.size() % alignment, 0u);  // the last tensor is padded too
    ASSERT_EQ(file.tensors().size(), cases.size());
    for (size_t i = 0; i < cases.size(); ++i) {
        const GgufTensorInfo& tensor = file.tensors()[i];
        SCOPED_TRACE(tensor.name);
        EXPECT_EQ(tensor.name, cases[i].name);
        EXPECT_EQ(tensor.dims, cases[i].dims);
        EXPECT_EQ(tensor.type, cases[i].type);
        EXPECT_EQ(tensor.offset_bytes % alignment, 0u);
        ASSERT_EQ(tensor.size_bytes, raws[i].size());
        EXPECT_EQ(std::memcmp(tensor.data, raws[i].data(), raws[i].size()), 0);
    }
}

TEST(GgufWriter, TensorsRoundTripWithDefaultAlignment) {
    expect_tensors_round_trip(32);
}

TEST(GgufWriter, TensorsRoundTripWithOtherAlignments) {
    expect_tensors_round_trip(1);
    expect_tensors_round_trip(64);
    expect_tensors_round_trip(4096);
}

TEST(GgufWriter, NonDefaultAlignmentIsWrittenAsMetadata) {
    GgufWriter writer(64);
    const std::vector<uint8_t> bytes = writer.to_bytes();
    const GgufFile file = GgufFile::parse(bytes);
    EXPECT_EQ(file.get_uint("general.alignment"), 64u);
    EXPECT_EQ(file.find("general.alignment")->type, GgufValueType::kUint32);

    GgufWriter default_writer;
    const std::vector<uint8_t> default_bytes = default_writer.to_bytes();
    EXPECT_EQ(GgufFile::parse(default_bytes).find("general.alignment"), nullptr);
}

TEST(GgufWriter, HeaderBytes) {
    GgufWriter writer;
    writer.add_uint32("k", 1);
    const std::vector<uint8_t> bytes = writer.to_bytes();
    const uint8_t expected[] = {'G', 'G', 'U', 'F', 3, 0, 0, 0,  // magic, version 3
                                0,   0,   0,   0,   0, 0, 0, 0,  // tensor count 0
                                1,   0,   0,   0,   0, 0, 0, 0,  // kv count 1
                                1,   0,   0,   0,   0, 0, 0, 0,  // key length 1
                                'k', 4,   0,   0,   0,           // key, type uint32
                                1,   0,   0,   0};               // value
    ASSERT_GE(bytes.size(), sizeof expected);
    EXPECT_EQ(std::memcmp(bytes.data(), expected, sizeof expected), 0);
}

TEST(GgufWriter, QuantizedTensorDecodesCloseToInput) {
    const std::vector<float> values = random_floats(32 * 4, 99);
    GgufWriter writer;
    writer.add_tensor_from_floats("w", {32, 4}, GgmlType::kQ8_0, values);
    const std::vector<uint8_t> bytes = writer.to_bytes();
    const GgufFile file = GgufFile::parse(bytes);
    const GgufTensorInfo& w = file.require_tensor("w", std::vector<int64_t>{32, 4});
    std::vector<float> decoded(values.size());
    dequantize_row(w.type, w.data, decoded.data(), w.num_elements());
    for (size_t i = 0; i < values.size(); ++i) EXPECT_NEAR(decoded[i], values[i], 0.1) << i;
}

TEST(GgufWriter, Bf16RoundsToNearestEven) {
    // 1 + 2^-8 is exactly between bf16 1.0 (even) and 1 + 2^-7 (odd): goes to 1.0.
    // 1 + 3 * 2^-8 is between 1 + 2^-7 (odd) and 1 + 2^-6 (even): goes up.
    const float values[4] = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, 1.0f + 0x1p-8f + 0x1p-20f, -1.0f};
    const std::vector<uint8_t> raw = quantize_row(GgmlType::kBF16, values);
    float decoded[4];
    dequantize_row(GgmlType::kBF16, raw.data(), decoded, 4);
    EXPECT_EQ(decoded[0], 1.0f);
    EXPECT_EQ(decoded[1], 1.0f + 0x1p-6f);
    EXPECT_EQ(decoded[2], 1.0f + 0x1p-7f);  // just above the tie
    EXPECT_EQ(decoded[3], -1.0f);
}

TEST(GgufWriter, RejectsInconsistentInput) {
    GgufWriter writer;
    const std::vector<float> values(10, 1.0f);
    EXPECT_THROW(writer.add_tensor_from_floats("w", {3, 3}, GgmlType::kF32, values), Error);
    const std::vector<float> row33(33, 1.0f);
    EXPECT_THROW(writer.add_tensor_from_floats("w", {33}, GgmlType::kQ4_0, row33), Error);
    EXPECT_THROW(GgufWriter(48).to_bytes(), Error);
    EXPECT_THROW(GgufWriter(0).to_bytes(), Error);
}

TEST(GgufWriter, WritesFilesAndReportsFailures) {
    const std::filesystem::path path =
        std::filesystem::temp_directory_path() / "servelab_gguf_writer_test.gguf";
    GgufWriter writer;
    writer.add_string("general.architecture", "llama");
    const std::vector<float> values = random_floats(64, 5);
    writer.add_tensor_from_floats("w", {64}, GgmlType::kF16, values);
    writer.write_file(path.string());
    {
        const GgufFile file = GgufFile::open(path.string());
        EXPECT_EQ(file.get_string("general.architecture"), "llama");
        EXPECT_EQ(file.file_size(), writer.to_bytes().size());
    }
    std::filesystem::remove(path);

    try {
        writer.write_file("/nonexistent-dir/x.gguf");
        ADD_FAILURE() << "expected an error";
    } catch (const Error& error) {
        EXPECT_THAT(error.what(), HasSubstr("cannot write '/nonexistent-dir/x.gguf'"));
    }
}

// ---- fuzz seed corpus ------------------------------------------------------------------

// Small valid files covering the tensor types and the metadata types.
std::vector<std::pair<std::string, std::vector<uint8_t>>> corpus_files() {
    std::vector<std::pair<std::string, std::vector<uint8_t>>> files;

    GgufWriter empty;
    files.emplace_back("empty.gguf", empty.to_bytes());

    GgufWriter metadata;
    for (const auto& [key, value] : every_value_type()) metadata.add_value(key, value);
    files.emplace_back("metadata.gguf", metadata.to_bytes());

    GgufWriter plain;
    plain.add_string("general.architecture", "llama");
    plain.add_uint32("llama.block_count", 1);
    plain.add_tensor_from_floats("f32", {4, 2}, GgmlType::kF32, random_floats(8, 1));
    plain.add_tensor_from_floats("f16", {8}, GgmlType::kF16, random_floats(8, 2));
    plain.add_tensor_from_floats("bf16", {2, 2, 2}, GgmlType::kBF16, random_floats(8, 3));
    files.emplace_back("plain_floats.gguf", plain.to_bytes());

    GgufWriter quantized(64);
    quantized.add_string_array("tokenizer.ggml.tokens", {"a", "b", "<s>"});
    quantized.add_tensor_from_floats("q8_0", {32, 2}, GgmlType::kQ8_0, random_floats(64, 4));
    quantized.add_tensor_from_floats("q4_0", {32}, GgmlType::kQ4_0, random_floats(32, 5));
    quantized.add_tensor_from_floats("q4_1", {64}, GgmlType::kQ4_1, random_floats(64, 6));
    files.emplace_back("quantized.gguf", quantized.to_bytes());

    GgufWriter k_quants;
    k_quants.add_uint32("general.quantization_version", 2);
    k_quants.add_tensor("q4_k", {256}, GgmlType::kQ4_K,
                        random_k_quant_bytes(GgmlType::kQ4_K, 256, 7));
    k_quants.add_tensor("q6_k", {256}, GgmlType::kQ6_K,
                        random_k_quant_bytes(GgmlType::kQ6_K, 256, 8));
    files.emplace_back("k_quants.gguf", k_quants.to_bytes());
    return files;
}

TEST(FuzzCorpus, DISABLED_Regenerate) {
    std::filesystem::create_directories(kCorpusDir);
    for (const auto& [name, bytes] : corpus_files()) {
        std::ofstream out(kCorpusDir + "/" + name, std::ios::binary);
        out.write(reinterpret_cast<const char*>(bytes.data()),
                  static_cast<std::streamsize>(bytes.size()));
        ASSERT_TRUE(out.good()) << name;
    }
}

// The committed corpus exists and every seed is a valid file (a seed the
// reader rejects would only exercise the first few checks).
TEST(FuzzCorpus, SeedsParse) {
    for (const auto& entry : corpus_files()) {
        const std::string& name = entry.first;
        SCOPED_TRACE(name);
        std::ifstream in(kCorpusDir + "/" + name, std::ios::binary);
        ASSERT_TRUE(in.good()) << "missing; see FuzzCorpus.DISABLED_Regenerate";
        const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                                         std::istreambuf_iterator<char>());
        EXPECT_NO_THROW(GgufFile::parse(bytes));
    }
}

}  // namespace
}  // namespace servelab
