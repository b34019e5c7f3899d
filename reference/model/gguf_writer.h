// gguf_writer.h — build a GGUF file in memory and write it out.
//
// Part of the model loader (all labs). Used by the tiny-model generator and by
// tests that build well-formed and deliberately malformed files. The writer
// emits GGUF version 3 with `general.alignment` (default 32) padding.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "reference/model/gguf_reader.h"

namespace servelab {

class GgufWriter {
  public:
    explicit GgufWriter(uint64_t alignment = 32) : alignment_(alignment) {}

    void add_value(const std::string& key, GgufValue value);  // any type, nested arrays too
    void add_uint32(const std::string& key, uint32_t value);
    void add_float32(const std::string& key, float value);
    void add_bool(const std::string& key, bool value);
    void add_string(const std::string& key, const std::string& value);
    void add_string_array(const std::string& key, const std::vector<std::string>& values);
    void add_int32_array(const std::string& key, const std::vector<int32_t>& values);
    void add_float32_array(const std::string& key, const std::vector<float>& values);

    // `raw` must already be in `type`'s block layout; dims[0] is the row length.
    void add_tensor(const std::string& name, std::vector<int64_t> dims, GgmlType type,
                    std::vector<uint8_t> raw);
    // Quantizes `values` (row-major, dims[0] values per row) to `type` first.
    void add_tensor_from_floats(const std::string& name, std::vector<int64_t> dims, GgmlType type,
                                std::span<const float> values);

    // A tensor whose bytes the caller writes itself, at
    // header_bytes().size() + tensor_data_offsets()[i] in the file: the
    // streaming path for files too large to hold twice in memory
    // (reference/model/tiny_model_streaming.cpp). to_bytes() refuses it.
    void add_tensor_layout(const std::string& name, std::vector<int64_t> dims, GgmlType type);

    std::vector<uint8_t> to_bytes() const;
    void write_file(const std::string& path) const;  // throws servelab::Error on I/O failure

    // The file up to its data section: header, metadata, tensor infos, padding.
    std::vector<uint8_t> header_bytes() const;
    // Each tensor's start within the data section, in the order added, and
    // the section's size (every tensor padded to the alignment).
    std::vector<uint64_t> tensor_data_offsets() const;
    uint64_t data_section_bytes() const;

  private:
    struct PendingTensor {
        std::string name;
        std::vector<int64_t> dims;
        GgmlType type;
        std::vector<uint8_t> raw;
        uint64_t size_bytes = 0;   // raw.size(), or what the caller will write
        bool layout_only = false;  // added by add_tensor_layout
    };
    uint64_t alignment_;
    std::vector<std::pair<std::string, GgufValue>> metadata_;
    std::vector<PendingTensor> tensors_;
};

// Quantize `n` floats (a multiple of the block size) into `type`'s layout.
// Supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1 (the types the tiny-model
// generator writes); K-quants are read-only in servelab.
std::vector<uint8_t> quantize_row(GgmlType type, std::span<const float> values);

}  // namespace servelab
