// pretokenizer.cpp — hand-written equivalents of the pre-tokenizer regexes.
//
// Part of the model loader (all labs; tokenizer). See pretokenizer.h for the
// idea. Text is first decoded to code points; a "piece" is a span of them.
// Every expression is a Matcher: it looks at one piece and a position in it
// and returns the length of the match starting there (0 = no match). A pass
// walks each piece left to right, cutting out matches; text between matches
// becomes a piece of its own, exactly like a regex "split keeping matches".
#include "reference/model/pretokenizer.h"

#include <cstdint>
#include <span>
#include <utility>

#include "kernels/common/error.h"
#include "reference/model/unicode_categories.h"

namespace servelab {
namespace {

using Piece = std::span<const uint32_t>;
using Matcher = size_t (*)(Piece piece, size_t pos);

// ---------------------------------------------------------------- the GPT-2 expression

// The four classes the GPT-2 expression distinguishes; every code point is
// in exactly one ("other" is [^\s\p{L}\p{N}]: punctuation, symbols, emoji...).
enum class CharClass { kLetter, kNumber, kWhitespace, kOther };

CharClass classify(uint32_t cp) {
    if (is_letter(cp)) return CharClass::kLetter;
    if (is_number(cp)) return CharClass::kNumber;
    if (is_whitespace(cp)) return CharClass::kWhitespace;
    return CharClass::kOther;
}

// 's|'t|'re|'ve|'m|'ll|'d — English contractions, lowercase only: "I'M"
// splits as "I", "'", "M" because the expression is case-sensitive.
size_t match_contraction(Piece s, size_t pos) {
    if (s[pos] != '\'' || pos + 1 >= s.size()) return 0;
    const uint32_t c1 = s[pos + 1];
    if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return 2;
    if (pos + 2 >= s.size()) return 0;
    const uint32_t c2 = s[pos + 2];
    if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return 3;
    return 0;
}

// \s+(?!\S)|\s+ — a run of white space. When something follows the run, the
// lookahead makes the regex give back the last white-space character, so it
// can become the " " prefix of the next word ("a   b" -> "a", "  ", " b").
// A single white-space character has nothing to give back and matches alone.
size_t match_whitespace(Piece s, size_t pos) {
    size_t end = pos;
    while (end < s.size() && is_whitespace(s[end])) ++end;
    const size_t run = end - pos;
    if (end < s.size() && run > 1) return run - 1;
    return run;
}

size_t match_gpt2(Piece s, size_t pos) {
    if (const size_t n = match_contraction(s, pos)) return n;
    // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`: one optional ASCII space,
    // then a run of letters, of numbers, or of "other" characters.
    size_t start = pos;
    if (s[pos] == ' ' && pos + 1 < s.size() && classify(s[pos + 1]) != CharClass::kWhitespace) {
        start = pos + 1;
    }
    const CharClass cls = classify(s[start]);
    if (cls == CharClass::kWhitespace) return match_whitespace(s, pos);
    size_t end = start + 1;
    while (end < s.size() && classify(s[end]) == cls) ++end;
    return end - pos;
}

// ---------------------------------------------------------------- simpler expressions

// \p{N} — a single number character: "2024" becomes "2", "0", "2", "4".
size_t match_one_number(Piece s, size_t pos) {
    return is_number(s[pos]) ? 1 : 0;
}

// \p{N}+ — a run of number characters.
size_t match_number_run(Piece s, size_t pos) {
    size_t end = pos;
    while (end < s.size() && is_number(s[end])) ++end;
    return end - pos;
}

// [0-9][0-9][0-9] — exactly three ASCII digits: "12345" gives "123", "45".
size_t match_digit_triple(Piece s, size_t pos) {
    if (pos + 3 > s.size()) return 0;
    for (size_t i = pos; i < pos + 3; ++i) {
        if (s[i] < '0' || s[i] > '9') return 0;
    }
    return 3;
}

// [\p{P}\$\+<=>\^~\|]+ — a run of punctuation or of these ASCII symbols.
bool is_punct_or_symbol(uint32_t cp) {
    constexpr std::string_view kSymbols = "$+<=>^~|";
    if (cp < 0x80 && kSymbols.find(static_cast<char>(cp)) != std::string_view::npos) return true;
    return is_punctuation(cp);
}

size_t match_punct_run(Piece s, size_t pos) {
    size_t end = pos;
    while (end < s.size() && is_punct_or_symbol(s[end])) ++end;
    return end - pos;
}

// ---------------------------------------------------------------- driving the passes

// A piece as [begin, end) indices into the code-point array.
using Range = std::pair<size_t, size_t>;

// Re-split every range with `matcher`; matches and the gaps between them both
// survive as ranges, in order, so the ranges always tile the whole text.
std::vector<Range> apply_pass(const std::vector<uint32_t>& cps, const std::vector<Range>& ranges,
                              Matcher matcher) {
    std::vector<Range> out;
    for (const auto& [begin, end] : ranges) {
        const Piece piece(cps.data() + begin, end - begin);
        size_t gap_start = 0;
        size_t pos = 0;
        while (pos < piece.size()) {
            const size_t length = matcher(piece, pos);
            if (length == 0) {
                ++pos;
                continue;
            }
            if (gap_start < pos) out.emplace_back(begin + gap_start, begin + pos);
            out.emplace_back(begin + pos, begin + pos + length);
            pos += length;
            gap_start = pos;
        }
        if (gap_start < piece.size()) out.emplace_back(begin + gap_start, end);
    }
    return out;
}

std::vector<Matcher> passes_for(PreTokenizerKind kind) {
    switch (kind) {
        case PreTokenizerKind::kGpt2:
            return {match_gpt2};
        case PreTokenizerKind::kStarCoder:
            return {match_one_number, match_gpt2};
        case PreTokenizerKind::kDefault:
            return {match_punct_run, match_gpt2, match_number_run, match_digit_triple};
    }
    return {};
}

// `tokenizer.ggml.pre` names and their rules. The names are those llama.cpp
// uses for the same rules ("gpt2" is accepted as a spelling of "gpt-2").
struct NamedKind {
    std::string_view name;
    PreTokenizerKind kind;
};
constexpr NamedKind kPreTokenizerNames[] = {
    {"default", PreTokenizerKind::kDefault},     {"gpt2", PreTokenizerKind::kGpt2},
    {"gpt-2", PreTokenizerKind::kGpt2},          {"smollm", PreTokenizerKind::kStarCoder},
    {"starcoder", PreTokenizerKind::kStarCoder}, {"refact", PreTokenizerKind::kStarCoder},
};

}  // namespace

PreTokenizerKind pre_tokenizer_from_name(std::string_view name) {
    std::string supported;
    for (const NamedKind& entry : kPreTokenizerNames) {
        if (entry.name == name) return entry.kind;
        supported += supported.empty() ? "" : ", ";
        supported += entry.name;
    }
    throw Error("unsupported pre-tokenizer '" + std::string(name) + "' (supported: " + supported +
                ")");
}

std::vector<std::string> pretokenize(std::string_view text, PreTokenizerKind kind) {
    const std::vector<uint32_t> cps = decode_utf8_lenient(text);
    std::vector<Range> ranges;
    if (!cps.empty()) ranges.emplace_back(0, cps.size());
    for (Matcher matcher : passes_for(kind)) ranges = apply_pass(cps, ranges, matcher);

    std::vector<std::string> words;
    words.reserve(ranges.size());
    for (const auto& [begin, end] : ranges) {
        std::string word;
        for (size_t i = begin; i < end; ++i) append_utf8(word, cps[i]);
        words.push_back(std::move(word));
    }
    return words;
}

}  // namespace servelab
