// gguf_reader.h — read a GGUF model file: header, metadata, tensor table.
//
// Part of the model loader (all labs). The file is memory-mapped and never
// copied: a tensor's data is a pointer into the mapping. Every offset, size
// and count read from the file is checked before it is used, so a malformed
// or truncated file is reported as one servelab::Error naming the problem and
// can never cause an out-of-bounds read, a hang or a huge allocation.
//
// GGUF layout (little-endian):
//   magic "GGUF" | version u32 (2 or 3) | tensor_count u64 | kv_count u64
//   kv_count × { key: string, type: u32, value }
//   tensor_count × { name: string, n_dims: u32, dims: u64[n_dims], type: u32, offset: u64 }
//   padding to `general.alignment` (default 32) | tensor data
// A string is { length u64, bytes }. An array is { elem_type u32, count u64, elems }.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "reference/model/gguf_types.h"

namespace servelab {

// One metadata value. Scalars live in the field matching their type family;
// arrays hold their elements (which may themselves be arrays).
struct GgufValue {
    GgufValueType type = GgufValueType::kUint8;
    uint64_t as_uint = 0;                              // kUint8/16/32/64 and kBool (0 or 1)
    int64_t as_int = 0;                                // kInt8/16/32/64
    double as_float = 0.0;                             // kFloat32/64
    std::string as_string;                             // kString
    GgufValueType array_type = GgufValueType::kUint8;  // kArray: element type
    std::vector<GgufValue> array;                      // kArray: elements
};

struct GgufTensorInfo {
    std::string name;
    std::vector<int64_t> dims;  // dims[0] is the innermost (row length), as in ggml
    GgmlType type = GgmlType::kF32;
    uint64_t offset_bytes = 0;      // relative to the start of the data section
    uint64_t size_bytes = 0;        // whole tensor, derived from dims and type
    const uint8_t* data = nullptr;  // into the mapped file

    int64_t num_elements() const;
    int64_t row_length() const { return dims.empty() ? 1 : dims[0]; }
    int64_t num_rows() const { return row_length() == 0 ? 0 : num_elements() / row_length(); }
};

// Limits that keep a hostile file from making us allocate or loop without bound.
struct GgufLimits {
    uint64_t max_string_bytes = 64ull << 20;  // one string
    uint64_t max_array_elems = 1ull << 24;    // one array (vocabularies are ~2^17)
    // All array elements of the file together. Each parsed element costs
    // ~100 bytes of memory (a GgufValue), so this caps what a small hostile
    // file can make us allocate at a few hundred MB; real files need < 2^20.
    uint64_t max_total_array_elems = 1ull << 22;
    uint64_t max_kv_count = 1ull << 16;
    uint64_t max_tensor_count = 1ull << 16;
    uint32_t max_dims = 4;
    uint32_t max_array_depth = 8;
    int64_t max_tensor_elems = 1ll << 40;
};

class GgufFile {
  public:
    // Map and parse the file at `path`. Throws servelab::Error on any problem.
    static GgufFile open(const std::string& path, const GgufLimits& limits = {});
    // Parse a GGUF image that is already in memory (tests, fuzzing). The bytes
    // must outlive the returned object; they are not copied.
    static GgufFile parse(std::span<const uint8_t> bytes, const GgufLimits& limits = {});

    GgufFile(GgufFile&&) noexcept;
    GgufFile& operator=(GgufFile&&) noexcept;
    ~GgufFile();

    uint32_t version() const { return version_; }
    uint64_t alignment() const { return alignment_; }
    uint64_t data_offset() const { return data_offset_; }  // from the start of the file
    size_t file_size() const { return bytes_.size(); }

    // Metadata, in file order.
    const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return metadata_; }
    const GgufValue* find(std::string_view key) const;  // nullptr when absent

    // Typed getters. The required forms throw "missing required key 'K'" or
    // "key 'K' has type T, expected ..." ; the optional forms return `fallback`
    // when the key is absent (but still throw on a wrong type).
    uint64_t get_uint(std::string_view key) const;
    uint64_t get_uint(std::string_view key, uint64_t fallback) const;
    double get_float(std::string_view key) const;
    double get_float(std::string_view key, double fallback) const;
    bool get_bool(std::string_view key, bool fallback) const;
    std::string get_string(std::string_view key) const;
    std::string get_string(std::string_view key, const std::string& fallback) const;
    // Arrays of strings / integers / floats (element type checked).
    std::vector<std::string> get_string_array(std::string_view key) const;
    std::vector<int64_t> get_int_array(std::string_view key) const;
    std::vector<float> get_float_array(std::string_view key) const;

    const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
    const GgufTensorInfo* find_tensor(std::string_view name) const;  // nullptr when absent
    // Throws "missing required tensor 'N'" or "tensor 'N' has shape [a, b], expected [c, d]".
    const GgufTensorInfo& require_tensor(std::string_view name,
                                         std::span<const int64_t> expected_dims) const;

  private:
    GgufFile() = default;
    struct Mapping;
    std::unique_ptr<Mapping> mapping_;  // owns the mmap when opened from a path
    std::span<const uint8_t> bytes_;
    uint32_t version_ = 0;
    uint64_t alignment_ = 32;
    uint64_t data_offset_ = 0;
    std::vector<std::pair<std::string, GgufValue>> metadata_;
    std::map<std::string, size_t, std::less<>> metadata_index_;
    std::vector<GgufTensorInfo> tensors_;
    std::map<std::string, size_t, std::less<>> tensor_index_;
};

}  // namespace servelab
