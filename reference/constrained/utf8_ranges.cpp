// utf8_ranges.cpp — see utf8_ranges.h.
#include "reference/constrained/utf8_ranges.h"

#include <fmt/format.h>

#include <algorithm>

namespace servelab {
namespace {

constexpr uint32_t kSurrogateLow = 0xD800;
constexpr uint32_t kSurrogateHigh = 0xDFFF;

// Sorted, overlaps and neighbours merged, clipped to [0, kMaxCodepoint].
std::vector<CodepointRange> normalized(std::vector<CodepointRange> ranges) {
    std::sort(ranges.begin(), ranges.end(),
              [](const CodepointRange& a, const CodepointRange& b) { return a.low < b.low; });
    std::vector<CodepointRange> out;
    for (CodepointRange r : ranges) {
        r.high = std::min(r.high, kMaxCodepoint);
        if (r.low > r.high) continue;
        if (!out.empty() && r.low <= out.back().high + 1) {
            out.back().high = std::max(out.back().high, r.high);
        } else {
            out.push_back(r);
        }
    }
    return out;
}

// One range whose ends have the same encoded length and which splits no
// continuation byte: each byte of the encoding then runs over a range of its
// own, independently of the others. Otherwise split it where a lower-order
// block of 6 bits wraps, and try the halves.
void add_sequences(uint32_t low, uint32_t high, std::vector<std::vector<ByteSet>>& out) {
    for (int i = 1; i < 4; ++i) {
        const uint32_t mask = (uint32_t(1) << (6 * i)) - 1;
        if ((low & ~mask) == (high & ~mask)) continue;
        if ((low & mask) != 0) {
            add_sequences(low, low | mask, out);
            add_sequences((low | mask) + 1, high, out);
            return;
        }
        if ((high & mask) != mask) {
            add_sequences(low, (high & ~mask) - 1, out);
            add_sequences(high & ~mask, high, out);
            return;
        }
    }
    const std::string a = utf8_encode(low);
    const std::string b = utf8_encode(high);
    std::vector<ByteSet> sequence(a.size());
    for (size_t k = 0; k < a.size(); ++k) sequence[k].add_range(uint8_t(a[k]), uint8_t(b[k]));
    out.push_back(std::move(sequence));
}

}  // namespace

std::string utf8_encode(uint32_t cp) {
    std::string s;
    if (cp < 0x80) {
        s += char(cp);
    } else if (cp < 0x800) {
        s += char(0xC0 | (cp >> 6));
        s += char(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        s += char(0xE0 | (cp >> 12));
        s += char(0x80 | ((cp >> 6) & 0x3F));
        s += char(0x80 | (cp & 0x3F));
    } else {
        s += char(0xF0 | (cp >> 18));
        s += char(0x80 | ((cp >> 12) & 0x3F));
        s += char(0x80 | ((cp >> 6) & 0x3F));
        s += char(0x80 | (cp & 0x3F));
    }
    return s;
}

std::vector<CodepointRange> complement_codepoints(std::vector<CodepointRange> ranges) {
    ranges.push_back({kSurrogateLow, kSurrogateHigh});
    std::vector<CodepointRange> out;
    uint32_t next = 0;
    for (const CodepointRange& r : normalized(std::move(ranges))) {
        if (r.low > next) out.push_back({next, r.low - 1});
        next = r.high + 1;
    }
    if (next <= kMaxCodepoint) out.push_back({next, kMaxCodepoint});
    return out;
}

std::vector<std::vector<ByteSet>> utf8_sequences(const std::vector<CodepointRange>& ranges) {
    // The encoded length changes at these code points; surrogates are cut out.
    static constexpr CodepointRange kPieces[] = {{0, 0x7F},
                                                 {0x80, 0x7FF},
                                                 {0x800, kSurrogateLow - 1},
                                                 {kSurrogateHigh + 1, 0xFFFF},
                                                 {0x10000, kMaxCodepoint}};
    std::vector<std::vector<ByteSet>> out;
    for (const CodepointRange& r : normalized(ranges)) {
        for (const CodepointRange& piece : kPieces) {
            const uint32_t low = std::max(r.low, piece.low);
            const uint32_t high = std::min(r.high, piece.high);
            if (low <= high) add_sequences(low, high, out);
        }
    }
    return out;
}

int32_t add_codepoint_class_rule(GrammarBuilder& builder, std::vector<CodepointRange> ranges,
                                 bool negated, const std::string& hint) {
    if (negated) ranges = complement_codepoints(std::move(ranges));
    const std::vector<std::vector<ByteSet>> sequences = utf8_sequences(ranges);
    if (sequences.empty()) {
        throw GrammarError(fmt::format("the character class for '{}' matches no character", hint));
    }
    const int32_t rule = builder.fresh_rule(hint);
    for (const std::vector<ByteSet>& sequence : sequences) {
        std::vector<GrammarSymbol> symbols;
        for (const ByteSet& set : sequence) symbols.push_back(GrammarSymbol::of_bytes(set));
        builder.add_alternative(rule, std::move(symbols));
    }
    return rule;
}

}  // namespace servelab
