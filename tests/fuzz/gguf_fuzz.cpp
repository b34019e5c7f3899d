// gguf_fuzz.cpp — libFuzzer target: the GGUF reader must survive any input.
//
// Part of the model loader tests (all labs). Each input is parsed as a GGUF
// image. A servelab::Error is the expected answer to a malformed input; any
// crash, sanitizer report, hang or huge allocation is a bug. When the input
// parses, every tensor is touched: a few of its rows are dequantized, so a
// tensor the reader accepted but whose data does not really fit would show
// up as an out-of-bounds read, and every metadata value goes through the
// typed getters.
//
// Build (this exact file list, also used by CMake's "fuzz" preset):
//   clang++ -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -I. \
//     tests/fuzz/gguf_fuzz.cpp reference/model/gguf_reader.cpp \
//     reference/model/gguf_types.cpp kernels/cpu/ggml_types.cpp \
//     kernels/cpu/dequantize.cpp -o gguf_fuzz
// Run:  ./gguf_fuzz -max_total_time=60 tests/fuzz/corpus
// The seed corpus in tests/fuzz/corpus is written by the unit test
// FuzzCorpus.DISABLED_Regenerate (tests/unit/gguf_writer_test.cpp).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include "kernels/common/error.h"
#include "kernels/cpu/dequantize.h"
#include "reference/model/gguf_reader.h"

namespace {

using servelab::GgufFile;
using servelab::GgufTensorInfo;

// Crash loudly (the fuzzer records the input) when an invariant of an
// accepted file does not hold.
void check(bool condition) {
    if (!condition) std::abort();
}

void touch_tensor(const GgufTensorInfo& tensor, std::span<const uint8_t> file) {
    // The reader promised the whole tensor lies inside the input.
    check(tensor.data >= file.data());
    check(tensor.data + tensor.size_bytes <= file.data() + file.size());

    const int64_t row_length = tensor.row_length();
    const int64_t rows = tensor.num_rows();
    const int64_t row_bytes = servelab::row_size_bytes(tensor.type, row_length);
    check(servelab::row_is_whole_blocks(tensor.type, row_length));
    check(static_cast<uint64_t>(rows * row_bytes) == tensor.size_bytes);

    // A row is at most the input's size in bytes, so this buffer stays small.
    std::vector<float> row(static_cast<size_t>(row_length));
    const int64_t rows_to_decode[] = {0, rows / 2, rows - 1};
    for (const int64_t r : rows_to_decode) {
        servelab::dequantize_row(tensor.type, tensor.data + r * row_bytes, row.data(), row_length);
    }
}

// Runs `getter`; a servelab::Error (a wrong type, say) is a fine answer.
template <typename Getter>
void call_allowing_errors(Getter getter) {
    try {
        getter();
    } catch (const servelab::Error&) {
    }
}

void touch_metadata(const GgufFile& file) {
    for (const auto& [key, value] : file.metadata()) {
        check(file.find(key) == &value);
        const std::string& k = key;  // clang 14 lambdas cannot capture a structured binding
        call_allowing_errors([&] { file.get_uint(k); });
        call_allowing_errors([&] { file.get_float(k); });
        call_allowing_errors([&] { file.get_bool(k, false); });
        call_allowing_errors([&] { file.get_string(k); });
        call_allowing_errors([&] { file.get_string_array(k); });
        call_allowing_errors([&] { file.get_int_array(k); });
        call_allowing_errors([&] { file.get_float_array(k); });
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::span<const uint8_t> bytes(data, size);
    try {
        const GgufFile file = GgufFile::parse(bytes);
        touch_metadata(file);
        for (const GgufTensorInfo& tensor : file.tensors()) {
            check(file.find_tensor(tensor.name) == &tensor);
            touch_tensor(tensor, bytes);
        }
    } catch (const servelab::Error&) {
        // A clear rejection: exactly what a malformed input should get.
    }
    return 0;
}
