// gguf_reader.cpp — parse a GGUF file: header, metadata, tensor table, data section.
//
// Part of the model loader (all labs). The file is memory-mapped read-only
// and never copied. Parsing goes through a bounds-checked Cursor, and every
// count read from the file is checked against GgufLimits *and* against the
// bytes that are left before anything is allocated for it, so a hostile or
// truncated file ends in one servelab::Error line and never in a crash, a
// hang or a huge allocation.
#include "reference/model/gguf_reader.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <utility>

#include "kernels/common/error.h"
#include "kernels/cpu/dequantize.h"

namespace servelab {
namespace {

constexpr std::string_view kAlignmentKey = "general.alignment";

// The smallest possible encoding of one metadata entry (8-byte key length, an
// empty key, 4-byte type, 1-byte value) and of one tensor info (8-byte name
// length, empty name, n_dims, type, offset). Used to reject counts the rest of
// the file could not possibly hold before reserving memory for them.
constexpr uint64_t kMinMetadataEntryBytes = 8 + 4 + 1;
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 4 + 8;

[[noreturn]] void fail(const std::string& message) {
    throw Error("GGUF: " + message);
}

// Names from the file go into error messages; keep those one short printable
// line even when the name is garbage.
std::string printable(std::string_view text) {
    constexpr size_t kMaxShown = 80;
    std::string out;
    for (size_t i = 0; i < text.size() && i < kMaxShown; ++i) {
        const auto c = static_cast<unsigned char>(text[i]);
        out += (c < 0x20 || c == 0x7F) ? '?' : static_cast<char>(c);
    }
    if (text.size() > kMaxShown) out += "...";
    return out;
}

// Appended piece by piece: `"'" + printable(name) + "'"` trips a false
// -Wrestrict warning in GCC 12 at -O3.
std::string quote(std::string_view name) {
    std::string quoted = "'";
    quoted += printable(name);
    quoted += "'";
    return quoted;
}

std::string format_dims(std::span<const int64_t> dims) {
    std::string out = "[";
    for (size_t i = 0; i < dims.size(); ++i) {
        if (i > 0) out += ", ";
        out += std::to_string(dims[i]);
    }
    return out + "]";
}

// a + b, or UINT64_MAX when that overflows (only used to print ranges).
uint64_t saturating_add(uint64_t a, uint64_t b) {
    return a > std::numeric_limits<uint64_t>::max() - b ? std::numeric_limits<uint64_t>::max()
                                                        : a + b;
}

// a * b for positive a, b; false when the product does not fit in int64.
bool checked_multiply(int64_t a, int64_t b, int64_t* product) {
    if (a != 0 && b > std::numeric_limits<int64_t>::max() / a) return false;
    *product = a * b;
    return true;
}

bool is_known_value_type(uint32_t raw) {
    return raw <= static_cast<uint32_t>(GgufValueType::kFloat64);
}

// Bytes the smallest value of `type` takes on disk (a string or array may be empty).
uint64_t min_encoded_bytes(GgufValueType type) {
    switch (type) {
        case GgufValueType::kUint8:
        case GgufValueType::kInt8:
        case GgufValueType::kBool:
            return 1;
        case GgufValueType::kUint16:
        case GgufValueType::kInt16:
            return 2;
        case GgufValueType::kUint32:
        case GgufValueType::kInt32:
        case GgufValueType::kFloat32:
            return 4;
        case GgufValueType::kUint64:
        case GgufValueType::kInt64:
        case GgufValueType::kFloat64:
        case GgufValueType::kString:
            return 8;  // just the length
        case GgufValueType::kArray:
            return 4 + 8;  // element type + count
    }
    return 1;
}

// Reads little-endian values from a byte span, checking every read. The
// context ("metadata key #3", ...) names what was being read when the bytes
// ran out.
class Cursor {
  public:
    explicit Cursor(std::span<const uint8_t> bytes) : bytes_(bytes) {}

    void set_context(std::string context) { context_ = std::move(context); }
    const std::string& context() const { return context_; }
    uint64_t position() const { return position_; }
    uint64_t remaining() const { return bytes_.size() - position_; }

    // Throws the truncation error unless `n` more bytes are available.
    void require(uint64_t n) const {
        if (n > remaining()) fail("file truncated while reading " + context_);
    }

    uint8_t read_u8() { return static_cast<uint8_t>(read_little_endian(1)); }
    uint16_t read_u16() { return static_cast<uint16_t>(read_little_endian(2)); }
    uint32_t read_u32() { return static_cast<uint32_t>(read_little_endian(4)); }
    uint64_t read_u64() { return read_little_endian(8); }

    // Counts array elements against the whole file's budget (see GgufLimits).
    void charge_array_elements(uint64_t count, const GgufLimits& limits, const std::string& where) {
        array_elements_ += count;
        if (array_elements_ > limits.max_total_array_elems) {
            fail("metadata arrays hold more than " + std::to_string(limits.max_total_array_elems) +
                 " elements in all (at " + where + ")");
        }
    }

    std::string read_string(const GgufLimits& limits) {
        const uint64_t length_bytes = read_u64();
        if (length_bytes > limits.max_string_bytes) {
            fail("string of " + std::to_string(length_bytes) + " bytes exceeds limit " +
                 std::to_string(limits.max_string_bytes) + " (in " + context_ + ")");
        }
        require(length_bytes);
        const auto* start = reinterpret_cast<const char*>(bytes_.data() + position_);
        position_ += length_bytes;
        return std::string(start, length_bytes);
    }

  private:
    uint64_t read_little_endian(int size_bytes) {
        require(static_cast<uint64_t>(size_bytes));
        uint64_t value = 0;
        for (int i = 0; i < size_bytes; ++i) {
            value |= static_cast<uint64_t>(bytes_[position_ + i]) << (8 * i);
        }
        position_ += static_cast<uint64_t>(size_bytes);
        return value;
    }

    std::span<const uint8_t> bytes_;
    uint64_t position_ = 0;
    uint64_t array_elements_ = 0;  // all arrays read so far
    std::string context_ = "header";
};

// Reads one value of `type`. `where` names the metadata key for messages;
// `depth` counts the arrays around this value (0 for a top-level scalar).
GgufValue read_value(Cursor& cursor, GgufValueType type, uint32_t depth, const std::string& where,
                     const GgufLimits& limits);

// An array value: its element type, its count (checked against the limits and
// against the bytes left, before anything is reserved), then its elements,
// each read as a value one level deeper.
void read_array(Cursor& cursor, GgufValue& value, uint32_t depth, const std::string& where,
                const GgufLimits& limits) {
    if (depth + 1 > limits.max_array_depth) {
        fail("array nesting deeper than " + std::to_string(limits.max_array_depth) + " in " +
             where);
    }
    const uint32_t raw_elem_type = cursor.read_u32();
    if (!is_known_value_type(raw_elem_type)) {
        fail(where + " has an array of unknown value type " + std::to_string(raw_elem_type));
    }
    value.array_type = static_cast<GgufValueType>(raw_elem_type);
    const GgufValueType element_type = value.array_type;
    const uint64_t count = cursor.read_u64();
    if (count > limits.max_array_elems) {
        fail("array of " + std::to_string(count) + " elements exceeds limit " +
             std::to_string(limits.max_array_elems) + " in " + where);
    }
    // Each element takes at least min_encoded_bytes: a count the rest
    // of the file cannot hold is a truncation, found before reserving.
    if (count > cursor.remaining() / min_encoded_bytes(element_type)) {
        fail("file truncated: array of " + std::to_string(count) + " elements in " + where +
             " cannot fit in the remaining " + std::to_string(cursor.remaining()) + " bytes");
    }
    cursor.charge_array_elements(count, limits, where);
    value.array.reserve(count);
    for (uint64_t i = 0; i < count; ++i) {
        value.array.push_back(read_value(cursor, element_type, depth + 1, where, limits));
    }
}

GgufValue read_value(Cursor& cursor, GgufValueType type, uint32_t depth, const std::string& where,
                     const GgufLimits& limits) {
    GgufValue value;
    value.type = type;
    switch (type) {
        case GgufValueType::kUint8:
            value.as_uint = cursor.read_u8();
            break;
        case GgufValueType::kUint16:
            value.as_uint = cursor.read_u16();
            break;
        case GgufValueType::kUint32:
            value.as_uint = cursor.read_u32();
            break;
        case GgufValueType::kUint64:
            value.as_uint = cursor.read_u64();
            break;
        // Signed values: reinterpret the unsigned bits at their own width, then widen.
        case GgufValueType::kInt8:
            value.as_int = static_cast<int8_t>(cursor.read_u8());
            break;
        case GgufValueType::kInt16:
            value.as_int = static_cast<int16_t>(cursor.read_u16());
            break;
        case GgufValueType::kInt32:
            value.as_int = static_cast<int32_t>(cursor.read_u32());
            break;
        case GgufValueType::kInt64:
            value.as_int = static_cast<int64_t>(cursor.read_u64());
            break;
        case GgufValueType::kFloat32: {
            const uint32_t bits = cursor.read_u32();
            float f;
            std::memcpy(&f, &bits, sizeof f);
            value.as_float = f;
            break;
        }
        case GgufValueType::kFloat64: {
            const uint64_t bits = cursor.read_u64();
            std::memcpy(&value.as_float, &bits, sizeof value.as_float);
            break;
        }
        case GgufValueType::kBool: {
            const uint8_t byte = cursor.read_u8();
            if (byte > 1) fail(where + " has bool value " + std::to_string(byte) + " (not 0 or 1)");
            value.as_uint = byte;
            break;
        }
        case GgufValueType::kString:
            value.as_string = cursor.read_string(limits);
            break;
        case GgufValueType::kArray:
            read_array(cursor, value, depth, where, limits);
            break;
    }
    return value;
}

struct ParsedHeader {
    uint32_t version = 0;
    uint64_t tensor_count = 0;
    uint64_t kv_count = 0;
};

ParsedHeader read_header(Cursor& cursor, const GgufLimits& limits) {
    cursor.set_context("header");
    cursor.require(4);
    const uint8_t magic[4] = {cursor.read_u8(), cursor.read_u8(), cursor.read_u8(),
                              cursor.read_u8()};
    if (std::memcmp(magic, "GGUF", 4) != 0) fail("bad magic (expected 'GGUF')");

    ParsedHeader header;
    header.version = cursor.read_u32();
    if (header.version == 1) {
        // Version 1 stored counts and lengths as u32: a different layout.
        fail("unsupported GGUF version 1 (only versions 2 and 3 are supported)");
    }
    if (header.version != 2 && header.version != 3) {
        fail("unsupported version " + std::to_string(header.version) +
             " (only versions 2 and 3 are supported)");
    }
    header.tensor_count = cursor.read_u64();
    header.kv_count = cursor.read_u64();
    if (header.tensor_count > limits.max_tensor_count) {
        fail("tensor count " + std::to_string(header.tensor_count) + " exceeds limit " +
             std::to_string(limits.max_tensor_count));
    }
    if (header.kv_count > limits.max_kv_count) {
        fail("metadata key count " + std::to_string(header.kv_count) + " exceeds limit " +
             std::to_string(limits.max_kv_count));
    }
    return header;
}

// The value of general.alignment, or the default when the key is absent.
uint64_t alignment_from_metadata(const std::vector<std::pair<std::string, GgufValue>>& metadata) {
    for (const auto& [key, value] : metadata) {
        if (key != kAlignmentKey) continue;
        const bool is_power_of_two =
            value.as_uint != 0 && (value.as_uint & (value.as_uint - 1)) == 0;
        if (value.type != GgufValueType::kUint32 || !is_power_of_two) {
            fail("general.alignment must be a nonzero power of two (a uint32)");
        }
        return value.as_uint;
    }
    return kGgufDefaultAlignment;
}

// Reads one tensor info and checks everything that does not depend on the
// data section: dims, element count, type, row length.
GgufTensorInfo read_tensor_info(Cursor& cursor, const GgufLimits& limits) {
    GgufTensorInfo info;
    info.name = cursor.read_string(limits);
    const std::string name = quote(info.name);
    cursor.set_context(cursor.context() + " (" + name + ")");

    const uint32_t n_dims = cursor.read_u32();
    if (n_dims > limits.max_dims) {
        fail("tensor " + name + " has " + std::to_string(n_dims) + " dimensions (max " +
             std::to_string(limits.max_dims) + ")");
    }
    int64_t num_elements = 1;
    for (uint32_t i = 0; i < n_dims; ++i) {
        const uint64_t dim = cursor.read_u64();
        if (dim == 0) fail("tensor " + name + " dimension " + std::to_string(i) + " is 0");
        // Also catches values that would be negative as int64.
        if (dim > static_cast<uint64_t>(limits.max_tensor_elems)) {
            fail("tensor " + name + " dimension " + std::to_string(i) + " is " +
                 std::to_string(dim) + ", more than the limit of " +
                 std::to_string(limits.max_tensor_elems) + " elements");
        }
        info.dims.push_back(static_cast<int64_t>(dim));
        if (!checked_multiply(num_elements, static_cast<int64_t>(dim), &num_elements)) {
            fail("tensor " + name + " element count overflows (dims so far " +
                 format_dims(info.dims) + ")");
        }
    }
    if (num_elements > limits.max_tensor_elems) {
        fail("tensor " + name + " has " + std::to_string(num_elements) +
             " elements, more than the limit of " + std::to_string(limits.max_tensor_elems));
    }

    const uint32_t raw_type = cursor.read_u32();
    const std::optional<GgmlTypeTraits> traits = ggml_type_traits(raw_type);
    if (!traits) fail("tensor " + name + " has unsupported type " + std::to_string(raw_type));
    info.type = static_cast<GgmlType>(raw_type);
    if (!row_is_whole_blocks(info.type, info.row_length())) {
        fail("tensor " + name + " row length " + std::to_string(info.row_length()) +
             " is not a multiple of the " + std::string(traits->name) + " block size " +
             std::to_string(traits->block_elems));
    }
    // Whole rows of whole blocks, so this division is exact; <= 2^40 * 4 bytes.
    info.size_bytes =
        static_cast<uint64_t>(num_elements / traits->block_elems * traits->block_bytes);
    info.offset_bytes = cursor.read_u64();
    return info;
}

// Checks that the tensor lies aligned and wholly inside the file, and points
// `data` at it.
void locate_tensor_data(GgufTensorInfo& info, std::span<const uint8_t> file, uint64_t data_offset,
                        uint64_t alignment) {
    const std::string name = quote(info.name);
    if (info.offset_bytes % alignment != 0) {
        fail("tensor " + name + " offset " + std::to_string(info.offset_bytes) +
             " is not a multiple of the alignment " + std::to_string(alignment));
    }
    const uint64_t file_size = file.size();
    const bool inside = data_offset <= file_size && info.offset_bytes <= file_size - data_offset &&
                        info.size_bytes <= file_size - data_offset - info.offset_bytes;
    if (!inside) {
        const uint64_t start = saturating_add(data_offset, info.offset_bytes);
        fail("tensor " + name + " data [" + std::to_string(start) + ".." +
             std::to_string(saturating_add(start, info.size_bytes)) +
             ") lies outside the file (size " + std::to_string(file_size) + ")");
    }
    info.data = file.data() + data_offset + info.offset_bytes;
}

std::string describe_type(const GgufValue& value) {
    if (value.type != GgufValueType::kArray) return std::string(gguf_value_type_name(value.type));
    return "array of " + std::string(gguf_value_type_name(value.array_type));
}

[[noreturn]] void fail_wrong_type(std::string_view key, const GgufValue& value,
                                  std::string_view expected) {
    throw Error("key " + quote(key) + " has type " + describe_type(value) + ", expected " +
                std::string(expected));
}

bool is_unsigned_type(GgufValueType type) {
    return type == GgufValueType::kUint8 || type == GgufValueType::kUint16 ||
           type == GgufValueType::kUint32 || type == GgufValueType::kUint64;
}

bool is_signed_type(GgufValueType type) {
    return type == GgufValueType::kInt8 || type == GgufValueType::kInt16 ||
           type == GgufValueType::kInt32 || type == GgufValueType::kInt64;
}

bool is_float_type(GgufValueType type) {
    return type == GgufValueType::kFloat32 || type == GgufValueType::kFloat64;
}

// Owns an open file descriptor and closes it on scope exit. mmap keeps its
// own reference to the file, so the descriptor can go right after mapping.
class FileDescriptor {
  public:
    explicit FileDescriptor(int fd) : fd_(fd) {}
    ~FileDescriptor() {
        if (fd_ >= 0) ::close(fd_);
    }
    FileDescriptor(const FileDescriptor&) = delete;
    FileDescriptor& operator=(const FileDescriptor&) = delete;
    int get() const { return fd_; }

  private:
    int fd_;
};

}  // namespace

// ---- the memory mapping ------------------------------------------------------

struct GgufFile::Mapping {
    void* address = nullptr;  // nullptr for an empty file (nothing to map)
    size_t size_bytes = 0;

    Mapping() = default;
    Mapping(const Mapping&) = delete;
    Mapping& operator=(const Mapping&) = delete;
    ~Mapping() {
        if (address != nullptr) ::munmap(address, size_bytes);
    }

    std::span<const uint8_t> bytes() const {
        return {static_cast<const uint8_t*>(address), size_bytes};
    }

    static std::unique_ptr<Mapping> map_file(const std::string& path) {
        // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a
        // writer forever, before the regular-file check below could refuse it
        // (it changes nothing for a regular file, which mmap reads).
        const FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
        if (fd.get() < 0) {
            throw Error("cannot open model file '" + path + "': " + std::strerror(errno));
        }
        struct stat info {};
        if (::fstat(fd.get(), &info) != 0) {
            throw Error("cannot open model file '" + path + "': " + std::strerror(errno));
        }
        if (!S_ISREG(info.st_mode)) {
            throw Error("cannot open model file '" + path + "': not a regular file");
        }
        auto mapping = std::make_unique<Mapping>();
        mapping->size_bytes = static_cast<size_t>(info.st_size);
        if (mapping->size_bytes == 0) return mapping;  // mmap rejects length 0
        void* address = ::mmap(nullptr, mapping->size_bytes, PROT_READ, MAP_PRIVATE, fd.get(), 0);
        if (address == MAP_FAILED) {
            throw Error("cannot map model file '" + path + "': " + std::strerror(errno));
        }
        mapping->address = address;
        return mapping;  // the descriptor closes here; the mapping stays valid
    }
};

// ---- GgufFile ----------------------------------------------------------------

GgufFile::GgufFile(GgufFile&&) noexcept = default;
GgufFile& GgufFile::operator=(GgufFile&&) noexcept = default;
GgufFile::~GgufFile() = default;

int64_t GgufTensorInfo::num_elements() const {
    int64_t count = 1;
    for (const int64_t dim : dims) count *= dim;  // checked for overflow when parsed
    return count;
}

GgufFile GgufFile::open(const std::string& path, const GgufLimits& limits) {
    std::unique_ptr<Mapping> mapping = Mapping::map_file(path);
    try {
        GgufFile file = parse(mapping->bytes(), limits);
        file.mapping_ = std::move(mapping);  // moving the owner does not move the pages
        return file;
    } catch (const Error& error) {
        throw Error(path + ": " + error.what());
    }
}

GgufFile GgufFile::parse(std::span<const uint8_t> bytes, const GgufLimits& limits) {
    GgufFile file;
    file.bytes_ = bytes;
    Cursor cursor(bytes);
    const ParsedHeader header = read_header(cursor, limits);
    file.version_ = header.version;

    // Metadata.
    if (header.kv_count > cursor.remaining() / kMinMetadataEntryBytes) {
        fail("file truncated: " + std::to_string(header.kv_count) +
             " metadata entries cannot fit in the remaining " + std::to_string(cursor.remaining()) +
             " bytes");
    }
    file.metadata_.reserve(header.kv_count);
    for (uint64_t i = 0; i < header.kv_count; ++i) {
        cursor.set_context("metadata key #" + std::to_string(i));
        std::string key = cursor.read_string(limits);
        const std::string where = "metadata key " + quote(key);
        cursor.set_context("value of " + where);
        const uint32_t raw_type = cursor.read_u32();
        if (!is_known_value_type(raw_type)) {
            fail(where + " has unknown value type " + std::to_string(raw_type));
        }
        GgufValue value =
            read_value(cursor, static_cast<GgufValueType>(raw_type), 0, where, limits);
        if (!file.metadata_index_.emplace(key, file.metadata_.size()).second) {
            fail("duplicate metadata key " + quote(key));
        }
        file.metadata_.emplace_back(std::move(key), std::move(value));
    }
    file.alignment_ = alignment_from_metadata(file.metadata_);

    // Tensor infos.
    if (header.tensor_count > cursor.remaining() / kMinTensorInfoBytes) {
        fail("file truncated: " + std::to_string(header.tensor_count) +
             " tensor infos cannot fit in the remaining " + std::to_string(cursor.remaining()) +
             " bytes");
    }
    file.tensors_.reserve(header.tensor_count);
    for (uint64_t i = 0; i < header.tensor_count; ++i) {
        cursor.set_context("tensor info #" + std::to_string(i));
        GgufTensorInfo info = read_tensor_info(cursor, limits);
        if (!file.tensor_index_.emplace(info.name, file.tensors_.size()).second) {
            fail("duplicate tensor name " + quote(info.name));
        }
        file.tensors_.push_back(std::move(info));
    }

    // Data section: starts at the next multiple of the alignment. The cursor
    // position is at most the file size and the alignment at most 2^31, so
    // this cannot overflow.
    const uint64_t end_of_infos = cursor.position();
    file.data_offset_ = (end_of_infos + file.alignment_ - 1) / file.alignment_ * file.alignment_;
    for (GgufTensorInfo& info : file.tensors_) {
        locate_tensor_data(info, bytes, file.data_offset_, file.alignment_);
    }
    return file;
}

// ---- metadata lookup -----------------------------------------------------------

const GgufValue* GgufFile::find(std::string_view key) const {
    const auto it = metadata_index_.find(key);
    return it == metadata_index_.end() ? nullptr : &metadata_[it->second].second;
}

namespace {

const GgufValue& require_value(const GgufFile& file, std::string_view key) {
    const GgufValue* value = file.find(key);
    if (value == nullptr) throw Error("missing required key " + quote(key));
    return *value;
}

// Unsigned integer types, and signed ones when not negative.
uint64_t value_as_uint(std::string_view key, const GgufValue& value) {
    if (is_unsigned_type(value.type)) return value.as_uint;
    if (is_signed_type(value.type)) {
        if (value.as_int < 0) {
            throw Error("key " + quote(key) + " is negative (" + std::to_string(value.as_int) +
                        "), expected an unsigned integer");
        }
        return static_cast<uint64_t>(value.as_int);
    }
    fail_wrong_type(key, value, "an unsigned integer");
}

double value_as_float(std::string_view key, const GgufValue& value) {
    if (!is_float_type(value.type)) fail_wrong_type(key, value, "a float");
    return value.as_float;
}

// Checks that `value` is an array whose elements pass `element_ok`.
template <typename ElementOk>
const GgufValue& require_array(std::string_view key, const GgufValue& value, ElementOk element_ok,
                               std::string_view expected) {
    if (value.type != GgufValueType::kArray || !element_ok(value.array_type)) {
        fail_wrong_type(key, value, expected);
    }
    return value;
}

}  // namespace

uint64_t GgufFile::get_uint(std::string_view key) const {
    return value_as_uint(key, require_value(*this, key));
}

uint64_t GgufFile::get_uint(std::string_view key, uint64_t fallback) const {
    const GgufValue* value = find(key);
    return value == nullptr ? fallback : value_as_uint(key, *value);
}

double GgufFile::get_float(std::string_view key) const {
    return value_as_float(key, require_value(*this, key));
}

double GgufFile::get_float(std::string_view key, double fallback) const {
    const GgufValue* value = find(key);
    return value == nullptr ? fallback : value_as_float(key, *value);
}

bool GgufFile::get_bool(std::string_view key, bool fallback) const {
    const GgufValue* value = find(key);
    if (value == nullptr) return fallback;
    if (value->type != GgufValueType::kBool) fail_wrong_type(key, *value, "a bool");
    return value->as_uint != 0;
}

std::string GgufFile::get_string(std::string_view key) const {
    const GgufValue& value = require_value(*this, key);
    if (value.type != GgufValueType::kString) fail_wrong_type(key, value, "a string");
    return value.as_string;
}

std::string GgufFile::get_string(std::string_view key, const std::string& fallback) const {
    return find(key) == nullptr ? fallback : get_string(key);
}

std::vector<std::string> GgufFile::get_string_array(std::string_view key) const {
    const GgufValue& value = require_array(
        key, require_value(*this, key),
        [](GgufValueType type) { return type == GgufValueType::kString; }, "an array of string");
    std::vector<std::string> out;
    out.reserve(value.array.size());
    for (const GgufValue& element : value.array) out.push_back(element.as_string);
    return out;
}

std::vector<int64_t> GgufFile::get_int_array(std::string_view key) const {
    const GgufValue& value = require_array(
        key, require_value(*this, key),
        [](GgufValueType type) { return is_unsigned_type(type) || is_signed_type(type); },
        "an array of integers");
    std::vector<int64_t> out;
    out.reserve(value.array.size());
    for (size_t i = 0; i < value.array.size(); ++i) {
        const GgufValue& element = value.array[i];
        if (is_signed_type(element.type)) {
            out.push_back(element.as_int);
        } else if (element.as_uint <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
            out.push_back(static_cast<int64_t>(element.as_uint));
        } else {
            throw Error("key " + quote(key) + " element " + std::to_string(i) + " (" +
                        std::to_string(element.as_uint) + ") does not fit in int64");
        }
    }
    return out;
}

std::vector<float> GgufFile::get_float_array(std::string_view key) const {
    const GgufValue& value =
        require_array(key, require_value(*this, key), is_float_type, "an array of floats");
    std::vector<float> out;
    out.reserve(value.array.size());
    for (const GgufValue& element : value.array)
        out.push_back(static_cast<float>(element.as_float));
    return out;
}

// ---- tensor lookup -------------------------------------------------------------

const GgufTensorInfo* GgufFile::find_tensor(std::string_view name) const {
    const auto it = tensor_index_.find(name);
    return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const GgufTensorInfo& GgufFile::require_tensor(std::string_view name,
                                               std::span<const int64_t> expected_dims) const {
    const GgufTensorInfo* info = find_tensor(name);
    if (info == nullptr) throw Error("missing required tensor " + quote(name));
    const bool same_shape = std::equal(info->dims.begin(), info->dims.end(), expected_dims.begin(),
                                       expected_dims.end());
    if (!same_shape) {
        throw Error("tensor " + quote(name) + " has shape " + format_dims(info->dims) +
                    ", expected " + format_dims(expected_dims));
    }
    return *info;
}

}  // namespace servelab
