// unicode_categories.cpp — code-point classes and UTF-8 decoding/encoding.
//
// Part of the model loader (all labs; tokenizer). See unicode_categories.h.
#include "reference/model/unicode_categories.h"

#include <algorithm>
#include <iterator>

namespace servelab {
namespace {

bool in_ranges(std::span<const CodepointRange> ranges, uint32_t cp) {
    // First range whose end is >= cp; cp is inside it or in no range at all.
    auto it =
        std::lower_bound(ranges.begin(), ranges.end(), cp,
                         [](const CodepointRange& r, uint32_t value) { return r.last < value; });
    return it != ranges.end() && it->first <= cp;
}

bool is_ascii_letter(uint32_t cp) {
    return (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z');
}
bool is_continuation(uint8_t byte) {
    return (byte & 0xC0) == 0x80;
}

}  // namespace

// ASCII is by far the most common input, so answer it without a search.
bool is_letter(uint32_t cp) {
    if (cp < 0x80) return is_ascii_letter(cp);
    return in_ranges(letter_ranges(), cp);
}

bool is_number(uint32_t cp) {
    if (cp < 0x80) return cp >= '0' && cp <= '9';
    return in_ranges(number_ranges(), cp);
}

bool is_punctuation(uint32_t cp) {
    return in_ranges(punctuation_ranges(), cp);
}

bool is_whitespace(uint32_t cp) {
    // The White_Space property from the Unicode PropList. It is short and
    // stable, so it is written out rather than generated. (It differs from
    // Python's str.isspace(), which also counts U+001C..U+001F.)
    constexpr uint32_t kSingles[] = {0x20,   0x85,   0xA0,   0x1680, 0x2028,
                                     0x2029, 0x202F, 0x205F, 0x3000};
    if (cp >= 0x09 && cp <= 0x0D) return true;      // \t \n \v \f \r
    if (cp >= 0x2000 && cp <= 0x200A) return true;  // en quad .. hair space
    return std::find(std::begin(kSingles), std::end(kSingles), cp) != std::end(kSingles);
}

std::vector<uint32_t> decode_utf8_lenient(std::string_view text) {
    std::vector<uint32_t> out;
    out.reserve(text.size());
    size_t pos = 0;
    while (pos < text.size()) {
        const auto lead = static_cast<uint8_t>(text[pos]);
        // The number of leading 1 bits of the lead byte is the sequence length.
        int length = 0;
        uint32_t cp = 0;
        if (lead < 0x80) {
            length = 1, cp = lead;
        } else if ((lead & 0xE0) == 0xC0) {
            length = 2, cp = lead & 0x1F;
        } else if ((lead & 0xF0) == 0xE0) {
            length = 3, cp = lead & 0x0F;
        } else if ((lead & 0xF8) == 0xF0) {
            length = 4, cp = lead & 0x07;
        }
        bool ok = length > 0 && pos + length <= text.size();
        for (int i = 1; ok && i < length; ++i) {
            const auto byte = static_cast<uint8_t>(text[pos + i]);
            ok = is_continuation(byte);
            cp = (cp << 6) | (byte & 0x3F);
        }
        if (ok && cp <= 0x10FFFF) {
            out.push_back(cp);
            pos += length;
        } else {
            out.push_back(kReplacementChar);
            pos += 1;  // resynchronise on the very next byte
        }
    }
    return out;
}

void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
        out += static_cast<char>(0xF0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    }
}

int utf8_char_length(std::string_view bytes, int* bad_length) {
    if (bytes.empty()) return 0;
    const auto lead = static_cast<uint8_t>(bytes[0]);
    if (lead < 0x80) return 1;
    // Per lead byte: total length and the allowed range of the second byte.
    // The narrowed ranges after E0/ED/F0/F4 are what exclude overlong forms,
    // surrogates and values above U+10FFFF (RFC 3629, table 3-7 of Unicode).
    int length = 0;
    uint8_t second_lo = 0x80;
    uint8_t second_hi = 0xBF;
    if (lead >= 0xC2 && lead <= 0xDF) {
        length = 2;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
        length = 3;
        if (lead == 0xE0) second_lo = 0xA0;
        if (lead == 0xED) second_hi = 0x9F;
    } else if (lead >= 0xF0 && lead <= 0xF4) {
        length = 4;
        if (lead == 0xF0) second_lo = 0x90;
        if (lead == 0xF4) second_hi = 0x8F;
    } else {
        if (bad_length) *bad_length = 1;  // 80..C1 and F5..FF never start a character
        return -1;
    }
    for (int i = 1; i < length; ++i) {
        if (i >= static_cast<int>(bytes.size())) return 0;  // valid so far, unfinished
        const auto byte = static_cast<uint8_t>(bytes[i]);
        const uint8_t lo = i == 1 ? second_lo : 0x80;
        const uint8_t hi = i == 1 ? second_hi : 0xBF;
        if (byte < lo || byte > hi) {
            if (bad_length) *bad_length = i;  // the valid prefix is replaced as one unit
            return -1;
        }
    }
    return length;
}

}  // namespace servelab
