// utf8_ranges_test.cpp — a class of code points as UTF-8 byte-set sequences, checked on every code
// point.
//
// Lab 12 support tests (chapter 11.6, constrained decoding). For random
// classes (their ends drawn near the places UTF-8 changes length or a
// continuation byte wraps) and a few fixed ones, every code point from 0 to
// U+10FFFF but the surrogates is encoded and run against the sequences: in
// the class, exactly one sequence matches it; out of it, none. The
// sequences match as many byte strings in all as the class has members, so
// they match nothing else (no overlong form, no surrogate, nothing past
// U+10FFFF). complement_codepoints is checked the same way, and
// add_codepoint_class_rule through the Earley oracle.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <array>
#include <string>
#include <vector>

#include "reference/constrained/utf8_ranges.h"
#include "tests/unit/grammar_oracle.h"
#include "tests/unit/test_util.h"

namespace servelab {
namespace {

using test::RandomSource;

constexpr uint32_t kNumCodepoints = kMaxCodepoint + 1;

bool is_surrogate(uint32_t cp) {
    return cp >= 0xD800 && cp <= 0xDFFF;
}

std::vector<bool> members_of(const std::vector<CodepointRange>& ranges) {
    std::vector<bool> in(kNumCodepoints, false);
    for (const CodepointRange& r : ranges) {
        for (uint32_t cp = r.low; cp <= r.high && cp <= kMaxCodepoint; ++cp) in[cp] = true;
    }
    return in;
}

std::string ranges_text(const std::vector<CodepointRange>& ranges) {
    std::string text;
    for (const CodepointRange& r : ranges)
        text += fmt::format("[U+{:04X}-U+{:04X}] ", r.low, r.high);
    return text;
}

bool sequence_matches(const std::vector<ByteSet>& sequence, const std::string& bytes) {
    if (sequence.size() != bytes.size()) return false;
    for (size_t i = 0; i < bytes.size(); ++i) {
        if (!sequence[i].contains(uint8_t(bytes[i]))) return false;
    }
    return true;
}

uint64_t num_strings(const std::vector<ByteSet>& sequence) {
    uint64_t product = 1;
    for (const ByteSet& set : sequence) {
        int size = 0;
        for (int b = 0; b < 256; ++b) size += set.contains(uint8_t(b));
        product *= uint64_t(size);
    }
    return product;
}

// Where UTF-8 changes: lengths, surrogates, the last code point, and
// continuation bytes wrapping (multiples of 64 and 4096).
uint32_t interesting_codepoint(RandomSource& random) {
    static constexpr uint32_t kEdges[] = {
        0,      0x7F,   0x80,    0x7FF,   0x800,   0xD7FF,  0xD800,   0xDFFF,
        0xE000, 0xFFFF, 0x10000, 0x3FFFF, 0x40000, 0xFFFFF, 0x100000, kMaxCodepoint};
    switch (random.integer(0, 3)) {
        case 0:
            return kEdges[random.integer(0, std::size(kEdges) - 1)];
        case 1:
            return uint32_t(random.integer(0, kMaxCodepoint / 64)) * 64 +
                   uint32_t(random.integer(-1, 0) & 63);
        case 2:
            return uint32_t(random.integer(0, 0x7FF));
        default:
            return uint32_t(random.integer(0, kMaxCodepoint));
    }
}

std::vector<CodepointRange> random_class(RandomSource& random) {
    std::vector<CodepointRange> ranges;
    const int num_ranges = int(random.integer(1, 6));
    for (int i = 0; i < num_ranges; ++i) {
        uint32_t a = interesting_codepoint(random), b = interesting_codepoint(random);
        if (random.integer(0, 2) == 0)
            b = std::min(kMaxCodepoint, a + uint32_t(random.integer(0, 200)));
        ranges.push_back({std::min(a, b), std::max(a, b)});
    }
    return ranges;
}

// The whole check for one class.
void expect_sequences_exact(const std::vector<CodepointRange>& ranges) {
    SCOPED_TRACE("class " + ranges_text(ranges));
    const std::vector<std::vector<ByteSet>> sequences = utf8_sequences(ranges);
    // Sequences by the lead bytes they accept, so each code point tries only a few.
    std::array<std::vector<size_t>, 256> by_lead;
    uint64_t total_strings = 0;
    for (size_t s = 0; s < sequences.size(); ++s) {
        ASSERT_FALSE(sequences[s].empty());
        for (int b = 0; b < 256; ++b) {
            if (sequences[s][0].contains(uint8_t(b))) by_lead[size_t(b)].push_back(s);
        }
        total_strings += num_strings(sequences[s]);
    }
    const std::vector<bool> in = members_of(ranges);
    uint64_t num_members = 0;
    for (uint32_t cp = 0; cp <= kMaxCodepoint; ++cp) {
        if (is_surrogate(cp)) continue;
        const std::string bytes = utf8_encode(cp);
        int matches = 0;
        for (const size_t s : by_lead[uint8_t(bytes[0])])
            matches += sequence_matches(sequences[s], bytes);
        num_members += in[cp];
        if (matches != (in[cp] ? 1 : 0)) {
            FAIL() << fmt::format("U+{:04X} ({} the class) is matched by {} sequences", cp,
                                  in[cp] ? "in" : "not in", matches);
        }
    }
    EXPECT_EQ(total_strings, num_members)
        << "the sequences match byte strings that encode no member of the class";
}

TEST(Utf8Ranges, EncodeMatchesTheStandardForms) {
    EXPECT_EQ(utf8_encode(0x24), "\x24");
    EXPECT_EQ(utf8_encode(0xA2), "\xC2\xA2");
    EXPECT_EQ(utf8_encode(0x20AC), "\xE2\x82\xAC");
    EXPECT_EQ(utf8_encode(0x10348), "\xF0\x90\x8D\x88");
    EXPECT_EQ(utf8_encode(kMaxCodepoint), "\xF4\x8F\xBF\xBF");
}

TEST(Utf8Ranges, FixedClassesMatchExactlyTheirCodepoints) {
    const std::vector<std::vector<CodepointRange>> classes = {
        {{0, kMaxCodepoint}},                  // everything (surrogates left out)
        {{'a', 'a'}},                          // one ASCII character
        {{0x80, kMaxCodepoint}},               // everything past ASCII
        {{0xD000, 0xE100}},                    // across the surrogates
        {{0x7F, 0x80}, {0x7FF, 0x800}},        // across two length changes
        {{0xFFFF, 0x10000}},                   // across the last one
        {{0x10FFFF, 0x10FFFF}},                // the last code point
        {{'0', '9'}, {'5', 'z'}, {'A', 'F'}},  // overlapping ranges
    };
    for (const auto& ranges : classes) expect_sequences_exact(ranges);
}

TEST(Utf8Ranges, RandomClassesMatchExactlyTheirCodepoints) {
    RandomSource random;
    SCOPED_TRACE(random.trace());
    for (int trial = 0; trial < 6; ++trial) expect_sequences_exact(random_class(random));
}

TEST(Utf8Ranges, ComplementHoldsEveryOtherCodepoint) {
    RandomSource random(1);
    SCOPED_TRACE(random.trace());
    for (int trial = 0; trial < 6; ++trial) {
        const std::vector<CodepointRange> ranges = random_class(random);
        SCOPED_TRACE("class " + ranges_text(ranges));
        const std::vector<CodepointRange> complement = complement_codepoints(ranges);
        for (size_t i = 1; i < complement.size(); ++i) {
            ASSERT_GT(complement[i].low, complement[i - 1].high + 1)
                << "the complement's ranges are not sorted, apart and merged";
        }
        const std::vector<bool> in = members_of(ranges), out = members_of(complement);
        for (uint32_t cp = 0; cp <= kMaxCodepoint; ++cp) {
            const bool expected = !in[cp] && !is_surrogate(cp);
            if (out[cp] != expected) {
                FAIL() << fmt::format("U+{:04X} should {}be in the complement", cp,
                                      expected ? "" : "not ");
            }
        }
    }
}

TEST(Utf8Ranges, ClassRuleAcceptsOneCharacterOfTheClass) {
    RandomSource random(2);
    SCOPED_TRACE(random.trace());
    for (int trial = 0; trial < 20; ++trial) {
        const std::vector<CodepointRange> ranges = random_class(random);
        const bool negated = random.integer(0, 1) == 1;
        SCOPED_TRACE(fmt::format("class {}{}", negated ? "^" : "", ranges_text(ranges)));
        const std::vector<bool> in = members_of(ranges);
        bool any_character = false;  // in the class (or, negated, out of it), surrogates aside
        for (uint32_t cp = 0; cp <= kMaxCodepoint; ++cp) {
            any_character = any_character || (!is_surrogate(cp) && in[cp] != negated);
        }
        GrammarBuilder builder;
        if (!any_character) {  // the class of surrogates only, say
            EXPECT_THROW(add_codepoint_class_rule(builder, ranges, negated, "root"), GrammarError);
            continue;
        }
        const int32_t rule = add_codepoint_class_rule(builder, ranges, negated, "root");
        ASSERT_EQ(rule, builder.rule("root"));
        const Grammar g = builder.build("root");
        for (int i = 0; i < 200; ++i) {
            const uint32_t cp = interesting_codepoint(random);
            if (is_surrogate(cp)) continue;
            const std::string bytes = utf8_encode(cp);
            EXPECT_EQ(test::grammar_accepts(g, bytes), in[cp] != negated)
                << fmt::format("U+{:04X}", cp);
            EXPECT_FALSE(test::grammar_accepts(g, bytes + bytes)) << "two characters accepted";
        }
    }
}

TEST(Utf8Ranges, EmptyClassIsAnError) {
    GrammarBuilder builder;
    EXPECT_THROW(add_codepoint_class_rule(builder, {}, false, "nothing"), GrammarError);
    EXPECT_THROW(add_codepoint_class_rule(builder, {{0, kMaxCodepoint}}, true, "nothing"),
                 GrammarError);
    EXPECT_THROW(add_codepoint_class_rule(builder, {{0xD800, 0xDFFF}}, false, "surrogates"),
                 GrammarError);
}

}  // namespace
}  // namespace servelab
