// prefix_index.cpp — see prefix_index.h: the names of the kinds, and the one place a kind becomes a
// cache.
#include "reference/kv/prefix_index.h"

#include <fmt/format.h>

#include "kernels/common/error.h"
#include "reference/kv/prefix_cache.h"
#include "reference/kv/radix_cache.h"

namespace servelab {

PrefixCacheKind parse_prefix_cache_kind(const std::string& name) {
    if (name == "hash") return PrefixCacheKind::kHash;
    if (name == "radix") return PrefixCacheKind::kRadix;
    if (name == "none") return PrefixCacheKind::kNone;
    throw Error(fmt::format("prefix cache '{}': expected hash, radix or none", name));
}

const char* prefix_cache_kind_name(PrefixCacheKind kind) {
    switch (kind) {
        case PrefixCacheKind::kHash:
            return "hash";
        case PrefixCacheKind::kRadix:
            return "radix";
        case PrefixCacheKind::kNone:
            break;
    }
    return "none";
}

std::unique_ptr<PrefixIndex> make_prefix_index(PrefixCacheKind kind, BlockAllocator& allocator,
                                               int64_t block_size) {
    switch (kind) {
        case PrefixCacheKind::kHash:
            return std::make_unique<PrefixCache>(allocator, block_size);
        case PrefixCacheKind::kRadix:
            return std::make_unique<RadixCache>(allocator, block_size);
        case PrefixCacheKind::kNone:
            break;
    }
    return nullptr;
}

}  // namespace servelab
