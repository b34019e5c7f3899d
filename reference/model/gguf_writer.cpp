// gguf_writer.cpp — build a GGUF version 3 image in memory; quantize float rows.
//
// Part of the model loader (all labs). The writer is a tool for the tiny-model
// generator and for tests, so it writes what it is given without validating
// it: tests rely on that to build deliberately malformed files (duplicate
// keys, a bad general.alignment, ...). Only its own layout work — padding and
// offsets — must be right.
#include "reference/model/gguf_writer.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "kernels/common/error.h"
#include "kernels/cpu/dequantize.h"

namespace servelab {
namespace {

// Appends little-endian values to a byte buffer.
class ByteSink {
  public:
    void u8(uint8_t v) { bytes_.push_back(v); }
    void u16(uint16_t v) { little_endian(v, 2); }
    void u32(uint32_t v) { little_endian(v, 4); }
    void u64(uint64_t v) { little_endian(v, 8); }
    void f32(float v) {
        uint32_t bits;
        std::memcpy(&bits, &v, sizeof bits);
        u32(bits);
    }
    void f64(double v) {
        uint64_t bits;
        std::memcpy(&bits, &v, sizeof bits);
        u64(bits);
    }
    void string(const std::string& s) {
        u64(s.size());
        bytes_.insert(bytes_.end(), s.begin(), s.end());
    }
    // Zero bytes up to the next multiple of `alignment`.
    void pad_to(uint64_t alignment) {
        while (bytes_.size() % alignment != 0) bytes_.push_back(0);
    }
    size_t size() const { return bytes_.size(); }
    std::vector<uint8_t> take() { return std::move(bytes_); }

  private:
    void little_endian(uint64_t v, int size_bytes) {
        for (int i = 0; i < size_bytes; ++i) bytes_.push_back(static_cast<uint8_t>(v >> (8 * i)));
    }
    std::vector<uint8_t> bytes_;
};

// Writes the payload of `value` as type `type` (no type tag: the caller wrote it).
void write_value(ByteSink& out, GgufValueType type, const GgufValue& value) {
    switch (type) {
        case GgufValueType::kUint8:
            out.u8(static_cast<uint8_t>(value.as_uint));
            break;
        case GgufValueType::kInt8:
            out.u8(static_cast<uint8_t>(value.as_int));
            break;
        case GgufValueType::kUint16:
            out.u16(static_cast<uint16_t>(value.as_uint));
            break;
        case GgufValueType::kInt16:
            out.u16(static_cast<uint16_t>(value.as_int));
            break;
        case GgufValueType::kUint32:
            out.u32(static_cast<uint32_t>(value.as_uint));
            break;
        case GgufValueType::kInt32:
            out.u32(static_cast<uint32_t>(value.as_int));
            break;
        case GgufValueType::kUint64:
            out.u64(value.as_uint);
            break;
        case GgufValueType::kInt64:
            out.u64(static_cast<uint64_t>(value.as_int));
            break;
        case GgufValueType::kFloat32:
            out.f32(static_cast<float>(value.as_float));
            break;
        case GgufValueType::kFloat64:
            out.f64(value.as_float);
            break;
        case GgufValueType::kBool:
            out.u8(value.as_uint != 0 ? 1 : 0);
            break;
        case GgufValueType::kString:
            out.string(value.as_string);
            break;
        case GgufValueType::kArray:
            out.u32(static_cast<uint32_t>(value.array_type));
            out.u64(value.array.size());
            for (const GgufValue& element : value.array) {
                write_value(out, value.array_type, element);
            }
            break;
    }
}

GgufValue scalar(GgufValueType type) {
    GgufValue value;
    value.type = type;
    return value;
}

GgufValue array_of(GgufValueType element_type, std::vector<GgufValue> elements) {
    GgufValue value = scalar(GgufValueType::kArray);
    value.array_type = element_type;
    value.array = std::move(elements);
    return value;
}

uint64_t round_up(uint64_t n, uint64_t multiple) {
    return (n + multiple - 1) / multiple * multiple;
}

// ---- block quantizers -------------------------------------------------------
// Each fills one block of `out` from 32 floats, computing the scale from the
// float32 values and storing it as fp16, like the reference quantizers do.

void put_fp16(uint8_t* out, float value) {
    const uint16_t h = float_to_fp16(value);
    out[0] = static_cast<uint8_t>(h);
    out[1] = static_cast<uint8_t>(h >> 8);
}

// Q8_0: d = max|x| / 127, q = round(x / d) in [-127, 127].
void quantize_block_q8_0(const float* x, uint8_t* out) {
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float d = amax / 127.0f;
    const float inverse_d = d != 0.0f ? 1.0f / d : 0.0f;
    put_fp16(out, d);
    for (int i = 0; i < 32; ++i) {
        out[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(std::round(x[i] * inverse_d)));
    }
}

// Q4_0: the value with the largest magnitude, m, maps to code 0 (= -8 after
// centring), so d = m / -8 and the codes q = round(x / d) + 8 lie in 0..15
// (the far end, +8, is clamped to 15).
void quantize_block_q4_0(const float* x, uint8_t* out) {
    float max_by_abs = 0.0f;
    for (int i = 0; i < 32; ++i) {
        if (std::fabs(x[i]) > std::fabs(max_by_abs)) max_by_abs = x[i];
    }
    const float d = max_by_abs / -8.0f;
    const float inverse_d = d != 0.0f ? 1.0f / d : 0.0f;
    put_fp16(out, d);
    for (int j = 0; j < 16; ++j) {
        // floor(v + 8.5) is round-half-up of v, shifted by the centre 8. The
        // product is its own statement so no compiler fuses it into an FMA.
        const float low_scaled = x[j] * inverse_d;
        const float high_scaled = x[j + 16] * inverse_d;
        const auto low = static_cast<int>(std::floor(low_scaled + 8.5f));
        const auto high = static_cast<int>(std::floor(high_scaled + 8.5f));
        out[2 + j] = static_cast<uint8_t>(std::clamp(low, 0, 15) | (std::clamp(high, 0, 15) << 4));
    }
}

// Q4_1: m = min, d = (max - min) / 15, q = round((x - m) / d) in 0..15.
void quantize_block_q4_1(const float* x, uint8_t* out) {
    float min = x[0];
    float max = x[0];
    for (int i = 1; i < 32; ++i) {
        min = std::min(min, x[i]);
        max = std::max(max, x[i]);
    }
    const float d = (max - min) / 15.0f;
    const float inverse_d = d != 0.0f ? 1.0f / d : 0.0f;
    put_fp16(out, d);
    put_fp16(out + 2, min);
    for (int j = 0; j < 16; ++j) {
        const float low_scaled = (x[j] - min) * inverse_d;
        const float high_scaled = (x[j + 16] - min) * inverse_d;
        const auto low = static_cast<int>(std::floor(low_scaled + 0.5f));
        const auto high = static_cast<int>(std::floor(high_scaled + 0.5f));
        out[4 + j] = static_cast<uint8_t>(std::clamp(low, 0, 15) | (std::clamp(high, 0, 15) << 4));
    }
}

}  // namespace

std::vector<uint8_t> quantize_row(GgmlType type, std::span<const float> values) {
    const GgmlTypeTraits traits = ggml_type_traits(type);
    const auto n = static_cast<int64_t>(values.size());
    if (!row_is_whole_blocks(type, n)) {
        throw Error("quantize_row: " + std::to_string(n) + " values is not a whole number of " +
                    std::string(traits.name) + " blocks of " + std::to_string(traits.block_elems));
    }
    std::vector<uint8_t> out(static_cast<size_t>(row_size_bytes(type, n)));
    const int64_t num_blocks = n / traits.block_elems;
    for (int64_t b = 0; b < num_blocks; ++b) {
        const float* x = values.data() + b * traits.block_elems;
        uint8_t* block = out.data() + b * traits.block_bytes;
        switch (type) {
            case GgmlType::kF32:
                std::memcpy(block, x, 4);
                break;
            case GgmlType::kF16:
                put_fp16(block, *x);
                break;
            case GgmlType::kBF16: {
                const uint16_t h = float_to_bf16(*x);
                block[0] = static_cast<uint8_t>(h);
                block[1] = static_cast<uint8_t>(h >> 8);
                break;
            }
            case GgmlType::kQ8_0:
                quantize_block_q8_0(x, block);
                break;
            case GgmlType::kQ4_0:
                quantize_block_q4_0(x, block);
                break;
            case GgmlType::kQ4_1:
                quantize_block_q4_1(x, block);
                break;
            case GgmlType::kQ4_K:
            case GgmlType::kQ6_K:
                throw Error("quantize_row: " + std::string(traits.name) +
                            " is read-only in servelab");
        }
    }
    return out;
}

// ---- GgufWriter ----------------------------------------------------------------

void GgufWriter::add_value(const std::string& key, GgufValue value) {
    metadata_.emplace_back(key, std::move(value));
}

void GgufWriter::add_uint32(const std::string& key, uint32_t value) {
    GgufValue v = scalar(GgufValueType::kUint32);
    v.as_uint = value;
    add_value(key, std::move(v));
}

void GgufWriter::add_float32(const std::string& key, float value) {
    GgufValue v = scalar(GgufValueType::kFloat32);
    v.as_float = value;
    add_value(key, std::move(v));
}

void GgufWriter::add_bool(const std::string& key, bool value) {
    GgufValue v = scalar(GgufValueType::kBool);
    v.as_uint = value ? 1 : 0;
    add_value(key, std::move(v));
}

void GgufWriter::add_string(const std::string& key, const std::string& value) {
    GgufValue v = scalar(GgufValueType::kString);
    v.as_string = value;
    add_value(key, std::move(v));
}

void GgufWriter::add_string_array(const std::string& key, const std::vector<std::string>& values) {
    std::vector<GgufValue> elements;
    elements.reserve(values.size());
    for (const std::string& s : values) {
        GgufValue element = scalar(GgufValueType::kString);
        element.as_string = s;
        elements.push_back(std::move(element));
    }
    add_value(key, array_of(GgufValueType::kString, std::move(elements)));
}

void GgufWriter::add_int32_array(const std::string& key, const std::vector<int32_t>& values) {
    std::vector<GgufValue> elements;
    elements.reserve(values.size());
    for (const int32_t i : values) {
        GgufValue element = scalar(GgufValueType::kInt32);
        element.as_int = i;
        elements.push_back(std::move(element));
    }
    add_value(key, array_of(GgufValueType::kInt32, std::move(elements)));
}

void GgufWriter::add_float32_array(const std::string& key, const std::vector<float>& values) {
    std::vector<GgufValue> elements;
    elements.reserve(values.size());
    for (const float f : values) {
        GgufValue element = scalar(GgufValueType::kFloat32);
        element.as_float = f;
        elements.push_back(std::move(element));
    }
    add_value(key, array_of(GgufValueType::kFloat32, std::move(elements)));
}

void GgufWriter::add_tensor(const std::string& name, std::vector<int64_t> dims, GgmlType type,
                            std::vector<uint8_t> raw) {
    const auto size_bytes = uint64_t(raw.size());
    tensors_.push_back(PendingTensor{name, std::move(dims), type, std::move(raw), size_bytes});
}

void GgufWriter::add_tensor_layout(const std::string& name, std::vector<int64_t> dims,
                                   GgmlType type) {
    int64_t rows = 1;
    for (size_t i = 1; i < dims.size(); ++i) rows *= dims[i];
    if (dims.empty() || !row_is_whole_blocks(type, dims[0])) {
        throw Error("GgufWriter: tensor '" + name + "' rows are not a whole number of " +
                    std::string(ggml_type_traits(type).name) + " blocks");
    }
    const auto size_bytes = uint64_t(row_size_bytes(type, dims[0]) * rows);
    tensors_.push_back(PendingTensor{name, std::move(dims), type, {}, size_bytes, true});
}

void GgufWriter::add_tensor_from_floats(const std::string& name, std::vector<int64_t> dims,
                                        GgmlType type, std::span<const float> values) {
    int64_t num_elements = 1;
    for (const int64_t dim : dims) num_elements *= dim;
    if (dims.empty() || num_elements != static_cast<int64_t>(values.size())) {
        throw Error("GgufWriter: tensor '" + name + "' has " + std::to_string(values.size()) +
                    " values, which does not match its dims");
    }
    // quantize_row works on whole blocks; a row holds whole blocks, so the
    // tensor quantized as one long run gives the same bytes row by row.
    const int64_t row_length = dims[0];
    if (!row_is_whole_blocks(type, row_length)) {
        throw Error("GgufWriter: tensor '" + name + "' row length " + std::to_string(row_length) +
                    " is not a whole number of " + std::string(ggml_type_traits(type).name) +
                    " blocks");
    }
    add_tensor(name, std::move(dims), type, quantize_row(type, values));
}

std::vector<uint8_t> GgufWriter::header_bytes() const {
    if (alignment_ == 0 || (alignment_ & (alignment_ - 1)) != 0) {
        throw Error("GgufWriter: alignment " + std::to_string(alignment_) +
                    " is not a nonzero power of two");
    }
    // A non-default alignment must be announced in the metadata, unless the
    // caller already wrote the key (tests write bad values on purpose).
    const bool has_alignment_key =
        std::any_of(metadata_.begin(), metadata_.end(),
                    [](const auto& entry) { return entry.first == "general.alignment"; });
    const bool add_alignment_key = alignment_ != kGgufDefaultAlignment && !has_alignment_key;

    ByteSink out;
    // Header.
    out.u8('G');
    out.u8('G');
    out.u8('U');
    out.u8('F');
    out.u32(3);
    out.u64(tensors_.size());
    out.u64(metadata_.size() + (add_alignment_key ? 1 : 0));

    // Metadata.
    if (add_alignment_key) {
        out.string("general.alignment");
        out.u32(static_cast<uint32_t>(GgufValueType::kUint32));
        out.u32(static_cast<uint32_t>(alignment_));
    }
    for (const auto& [key, value] : metadata_) {
        out.string(key);
        out.u32(static_cast<uint32_t>(value.type));
        write_value(out, value.type, value);
    }

    // Tensor infos; each tensor's data starts at an aligned offset.
    const std::vector<uint64_t> offsets = tensor_data_offsets();
    for (size_t i = 0; i < tensors_.size(); ++i) {
        const PendingTensor& tensor = tensors_[i];
        out.string(tensor.name);
        out.u32(static_cast<uint32_t>(tensor.dims.size()));
        for (const int64_t dim : tensor.dims) out.u64(static_cast<uint64_t>(dim));
        out.u32(static_cast<uint32_t>(tensor.type));
        out.u64(offsets[i]);
    }
    out.pad_to(alignment_);
    return out.take();
}

std::vector<uint64_t> GgufWriter::tensor_data_offsets() const {
    std::vector<uint64_t> offsets;
    uint64_t next_offset = 0;
    for (const PendingTensor& tensor : tensors_) {
        offsets.push_back(next_offset);
        next_offset = round_up(next_offset + tensor.size_bytes, alignment_);
    }
    return offsets;
}

uint64_t GgufWriter::data_section_bytes() const {
    uint64_t total = 0;
    for (const PendingTensor& tensor : tensors_)
        total = round_up(total + tensor.size_bytes, alignment_);
    return total;
}

std::vector<uint8_t> GgufWriter::to_bytes() const {
    for (const PendingTensor& tensor : tensors_) {
        if (tensor.layout_only) {
            throw Error("GgufWriter: tensor '" + tensor.name +
                        "' has a layout but no bytes; write it with the streaming path");
        }
    }
    std::vector<uint8_t> out = header_bytes();
    for (const PendingTensor& tensor : tensors_) {
        out.insert(out.end(), tensor.raw.begin(), tensor.raw.end());
        out.resize(round_up(out.size(), alignment_), 0);
    }
    return out;
}

void GgufWriter::write_file(const std::string& path) const {
    const std::vector<uint8_t> bytes = to_bytes();
    std::FILE* file = std::fopen(path.c_str(), "wb");
    if (file == nullptr) {
        throw Error("cannot write '" + path + "': " + std::strerror(errno));
    }
    const size_t written = std::fwrite(bytes.data(), 1, bytes.size(), file);
    const int write_errno = errno;
    const bool closed = std::fclose(file) == 0;
    if (written != bytes.size() || !closed) {
        throw Error("cannot write '" + path +
                    "': " + std::strerror(written != bytes.size() ? write_errno : errno));
    }
}

}  // namespace servelab
