// regex_grammar.cpp — see regex_grammar.h.
//
// A recursive-descent parser that follows Python's sre_parse rule for rule
// (what is a literal '{', where ']' may stand in a class, what is "nothing
// to repeat" or a "multiple repeat"), writing into DraftRules
// (rule_draft.h). One rewrite is needed on the way: x* where x can match ""
// would be left-recursive (loop ::= x loop), so x is replaced by "x
// without the empty string", which repeats to the same strings.
#include "reference/constrained/regex_grammar.h"

#include <fmt/format.h>

#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "reference/constrained/rule_draft.h"
#include "reference/constrained/source_cursor.h"
#include "reference/constrained/utf8_ranges.h"

namespace servelab {
namespace {

constexpr int kMaxGroupDepth = 100;  // a deeper nest would only exhaust the parser's stack

// \d \w \s as Python's re.ASCII has them.
const std::vector<CodepointRange> kDigits = {{'0', '9'}};
const std::vector<CodepointRange> kWordChars = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
const std::vector<CodepointRange> kSpaces = {{'\t', '\r'}, {' ', ' '}};  // \t \n \v \f \r, space

bool is_ascii_letter(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}
bool is_digit(char c) {
    return c >= '0' && c <= '9';
}

// What an escape stands for: one character, or a set (\d \W ...).
struct Escaped {
    bool is_set = false;
    uint32_t codepoint = 0;
    std::vector<CodepointRange> set;
};

// \d \w \s and their negations, as sets; none for another letter.
std::optional<std::vector<CodepointRange>> shorthand_class(char letter) {
    const char lower = char(letter | 0x20);
    const std::vector<CodepointRange>* set = lower == 'd'   ? &kDigits
                                             : lower == 'w' ? &kWordChars
                                             : lower == 's' ? &kSpaces
                                                            : nullptr;
    if (set == nullptr) return std::nullopt;
    return letter == lower ? *set : complement_codepoints(*set);
}

// \a \f \n \r \t \v (and \b, backspace, inside a class).
std::optional<uint32_t> control_escape(char letter, bool in_class) {
    static constexpr std::pair<char, uint32_t> kControls[] = {
        {'a', 0x07}, {'f', 0x0C}, {'n', 0x0A}, {'r', 0x0D}, {'t', 0x09}, {'v', 0x0B}};
    for (const auto& [name, codepoint] : kControls) {
        if (letter == name) return codepoint;
    }
    if (in_class && letter == 'b') return 0x08;
    return std::nullopt;
}

class RegexParser {
  public:
    RegexParser(std::string_view pattern, DraftRules& draft, std::string hint)
        : source_(pattern, "regex", false), draft_(draft), hint_(std::move(hint)) {}

    // The alternatives of the whole pattern.
    std::vector<DraftSequence> parse();

  private:
    enum class Atom { kItem, kAnchor };
    std::vector<DraftSequence> parse_alternation();
    DraftSequence parse_sequence();
    Atom parse_atom(DraftSequence& out);
    bool parse_quantifier(int& min_count, int& max_count);
    bool parse_braces(int& min_count, int& max_count);
    void apply_quantifier(DraftSequence& out, size_t item_start, int min_count, int max_count,
                          size_t offset);
    void parse_group(DraftSequence& out);
    void parse_group_kind(size_t start);
    void parse_group_name(size_t start);
    void parse_class(DraftSequence& out);
    Escaped parse_class_item();
    Escaped parse_escape(bool in_class);
    void refuse_escape(char c, size_t start) const;
    uint32_t parse_octal();
    uint32_t checked_codepoint(uint32_t codepoint, size_t start) const;
    void add_class(DraftSequence& out, const std::vector<CodepointRange>& ranges, size_t offset);
    void add_codepoint(DraftSequence& out, uint32_t codepoint, size_t offset);
    bool nullable(const DraftSequence& sequence);
    bool nullable_rule(int32_t rule);
    std::optional<DraftSequence> without_empty(const DraftSequence& sequence);
    std::optional<int32_t> without_empty_rule(int32_t rule);
    void check_size(size_t offset) const;

    SourceCursor source_;
    DraftRules& draft_;
    std::string hint_;
    std::unordered_set<std::string> group_names_;
    std::unordered_map<int32_t, bool> nullable_;                         // memo of nullable_rule
    std::unordered_map<int32_t, std::optional<int32_t>> without_empty_;  // memo
    std::optional<DraftSymbol> any_char_;                                // `.`, made once
    int group_depth_ = 0;
};

std::vector<DraftSequence> RegexParser::parse() {
    std::vector<DraftSequence> alternatives = parse_alternation();
    if (!source_.at_end()) source_.fail("unbalanced parenthesis: ')' without '('");
    return alternatives;
}

std::vector<DraftSequence> RegexParser::parse_alternation() {
    std::vector<DraftSequence> alternatives = {parse_sequence()};
    while (source_.take("|")) alternatives.push_back(parse_sequence());
    return alternatives;
}

DraftSequence RegexParser::parse_sequence() {
    DraftSequence out;
    while (!source_.at_end() && source_.peek() != '|' && source_.peek() != ')') {
        const size_t item_start = out.size();
        const Atom atom = parse_atom(out);
        const size_t quantifier_at = source_.offset();
        int min_count = 0, max_count = 0;
        if (!parse_quantifier(min_count, max_count)) continue;
        if (atom == Atom::kAnchor) source_.fail(quantifier_at, "nothing to repeat");
        apply_quantifier(out, item_start, min_count, max_count, quantifier_at);
    }
    return out;
}

RegexParser::Atom RegexParser::parse_atom(DraftSequence& out) {
    const size_t at = source_.offset();
    const char c = source_.peek();
    int min_count = 0, max_count = 0;
    if (c == '(') {
        parse_group(out);
    } else if (c == '[') {
        parse_class(out);
    } else if (c == '.') {  // any character but a newline
        source_.skip();
        if (!any_char_) {
            const std::vector<CodepointRange> all_but_newline =
                complement_codepoints({{'\n', '\n'}});
            any_char_ = draft_.character_class(all_but_newline, hint_ + "-any", at);
        }
        out.push_back({any_char_->symbol, at});
    } else if (c == '\\') {
        const Escaped escaped = parse_escape(false);
        if (escaped.is_set) add_class(out, escaped.set, at);
        if (!escaped.is_set) add_codepoint(out, escaped.codepoint, at);
    } else if (c == '^' || c == '$') {
        const bool allowed = c == '^' ? at == 0 : at + 1 == source_.text().size();
        if (!allowed) {
            source_.fail(
                fmt::format("the anchor '{}' is supported only at the {} of the "
                            "pattern (the regex matches the whole output anyway)",
                            c, c == '^' ? "start" : "end"));
        }
        source_.skip();
        return Atom::kAnchor;
    } else if (c == '*' || c == '+' || c == '?' ||
               (c == '{' && parse_braces(min_count, max_count))) {
        source_.fail(at, "nothing to repeat");
    } else {  // a literal character ('{' that starts no count, ']' and '}' among them)
        add_codepoint(out, source_.take_codepoint(), at);
    }
    return Atom::kItem;
}

// * + ? {m} {m,} {,n} {m,n}, each maybe lazy (x*? matches the same whole
// strings); a possessive one (x*+) is refused, as is a second quantifier.
bool RegexParser::parse_quantifier(int& min_count, int& max_count) {
    const size_t at = source_.offset();
    if (source_.take("*")) {
        min_count = 0, max_count = -1;
    } else if (source_.take("+")) {
        min_count = 1, max_count = -1;
    } else if (source_.take("?")) {
        min_count = 0, max_count = 1;
    } else if (source_.peek() != '{' || !parse_braces(min_count, max_count)) {
        return false;
    }
    if (!source_.take("?") && source_.peek() == '+') {
        source_.fail(at, "a possessive quantifier (x*+, x++, x?+, x{m,n}+) is not supported");
    }
    const size_t next = source_.offset();
    int ignored_min = 0, ignored_max = 0;
    const char c = source_.peek();
    if (c == '*' || c == '+' || c == '?' || (c == '{' && parse_braces(ignored_min, ignored_max))) {
        source_.fail(next, "multiple repeat");
    }
    return true;
}

// {m} {m,} {,n} {m,n} {,}: consumed and true; anything else after '{'
// (Python reads it as a literal '{'): false, consuming nothing.
bool RegexParser::parse_braces(int& min_count, int& max_count) {
    const size_t start = source_.offset();
    source_.skip();  // '{'
    const int64_t low = source_.take_number(kMaxRegexRepetition);
    const bool comma = source_.take(",");
    const int64_t high = comma ? source_.take_number(kMaxRegexRepetition) : low;
    if ((low < 0 && !comma) || !source_.take("}")) {
        source_.seek(start);
        return false;
    }
    if (low > kMaxRegexRepetition || high > kMaxRegexRepetition) {
        source_.fail(start,
                     fmt::format("a repetition count over the limit of {}", kMaxRegexRepetition));
    }
    min_count = low < 0 ? 0 : int(low);
    max_count = int(high);  // -1: no upper bound
    if (max_count >= 0 && max_count < min_count) {
        source_.fail(start, "min repeat greater than max repeat");
    }
    return true;
}

void RegexParser::apply_quantifier(DraftSequence& out, size_t item_start, int min_count,
                                   int max_count, size_t offset) {
    DraftSequence item(out.begin() + std::ptrdiff_t(item_start), out.end());
    out.resize(item_start);
    if (max_count < 0 && nullable(item)) {
        // x{m,} with x able to match "": the same strings as (x without "")*.
        const std::optional<DraftSequence> nonempty = without_empty(item);
        if (!nonempty) return;  // x matches only "": so does x*
        item = *nonempty;
        min_count = 0;
    }
    const DraftSequence repeated = draft_.repetition(item, min_count, max_count, hint_, offset);
    out.insert(out.end(), repeated.begin(), repeated.end());
    check_size(offset);
}

void RegexParser::parse_group(DraftSequence& out) {
    const size_t start = source_.offset();
    source_.skip();  // '('
    if (++group_depth_ > kMaxGroupDepth) {
        source_.fail(start, fmt::format("groups nested more than {} deep", kMaxGroupDepth));
    }
    if (source_.take("?")) parse_group_kind(start);
    std::vector<DraftSequence> alternatives = parse_alternation();
    if (!source_.take(")")) source_.fail(start, "missing ), unterminated subpattern");
    --group_depth_;
    if (alternatives.size() == 1) {  // a plain sequence needs no rule of its own
        out.insert(out.end(), alternatives[0].begin(), alternatives[0].end());
        return;
    }
    const int32_t group = draft_.helper_rule(hint_ + "-group");
    for (DraftSequence& sequence : alternatives) draft_.add_alternative(group, std::move(sequence));
    out.push_back(draft_reference(group, start));
}

// After "(?": (?: and named groups go on; every other extension is refused by name.
void RegexParser::parse_group_kind(size_t start) {
    static constexpr std::pair<std::string_view, std::string_view> kRefused[] = {
        {"P=", "a backreference (?P=name)"},      {"<=", "a lookbehind (?<=...)"},
        {"<!", "a negative lookbehind (?<!...)"}, {"=", "a lookahead (?=...)"},
        {"!", "a negative lookahead (?!...)"},    {"#", "a comment (?#...)"},
        {">", "an atomic group (?>...)"},         {"(", "a conditional (?(...)...)"}};
    if (source_.take(":")) return;
    for (const auto& [prefix, what] : kRefused) {
        if (source_.take(prefix)) source_.fail(start, fmt::format("{} is not supported", what));
    }
    if (source_.take("P<") || source_.take("<")) return parse_group_name(start);
    if (!source_.at_end() &&
        std::string_view("aiLmsux-").find(source_.peek()) != std::string_view::npos) {
        source_.fail(start, "an inline flag such as (?i) or (?s:...) is not supported");
    }
    source_.fail(start, fmt::format("unknown extension: '(?' before {}", source_.shown_next()));
}

void RegexParser::parse_group_name(size_t start) {
    std::string name;
    while (!source_.at_end() && source_.peek() != '>') {
        name += source_.peek();
        source_.skip();
    }
    if (!source_.take(">")) source_.fail(start, "missing >, unterminated name");
    bool identifier = !name.empty() && !is_digit(name[0]);
    for (const char c : name)
        identifier = identifier && (is_ascii_letter(c) || is_digit(c) || c == '_');
    if (!identifier) source_.fail(start, fmt::format("bad character in group name '{}'", name));
    if (!group_names_.insert(name).second) {
        source_.fail(start, fmt::format("redefinition of group name '{}'", name));
    }
}

// A class, as Python reads one: ']' first is a literal, as is '-' first or
// last; a range's ends are single characters; \d and friends join as sets.
void RegexParser::parse_class(DraftSequence& out) {
    const size_t start = source_.offset();
    source_.skip();  // '['
    const bool negated = source_.take("^");
    std::vector<CodepointRange> ranges;
    const auto add = [&ranges](const Escaped& item) {
        if (item.is_set) ranges.insert(ranges.end(), item.set.begin(), item.set.end());
        if (!item.is_set) ranges.push_back({item.codepoint, item.codepoint});
    };
    for (bool first = true;; first = false) {
        if (source_.at_end()) source_.fail(start, "unterminated character set");
        if (!first && source_.take("]")) break;
        const size_t item_at = source_.offset();
        const Escaped low = parse_class_item();
        if (!source_.take("-")) {
            add(low);
            continue;
        }
        if (source_.at_end()) source_.fail(start, "unterminated character set");
        if (source_.take("]")) {  // [a-]: the item, then a literal '-'
            add(low);
            ranges.push_back({'-', '-'});
            break;
        }
        const Escaped high = parse_class_item();
        if (low.is_set || high.is_set || high.codepoint < low.codepoint) {
            source_.fail(item_at, "bad character range");
        }
        ranges.push_back({low.codepoint, high.codepoint});
    }
    if (negated) ranges = complement_codepoints(std::move(ranges));
    add_class(out, ranges, start);
}

Escaped RegexParser::parse_class_item() {
    if (source_.peek() == '\\') return parse_escape(true);
    return {false, source_.take_codepoint(), {}};
}

// After '\': one character or a set. Python's escapes for str patterns,
// less the ones with no place in a whole-output match and \N{name}
// (refuse_escape); other characters stand for themselves.
Escaped RegexParser::parse_escape(bool in_class) {
    const size_t start = source_.offset();
    source_.skip();  // '\'
    if (source_.at_end()) source_.fail(start, "bad escape (end of pattern)");
    const char c = source_.peek();
    if (uint8_t(c) >= 0x80) return {false, source_.take_codepoint(), {}};
    source_.skip();
    if (const auto set = shorthand_class(c)) return {true, 0, *set};
    if (const auto codepoint = control_escape(c, in_class)) return {false, *codepoint, {}};
    if (c == 'x' || c == 'u' || c == 'U') {
        const int num_digits = c == 'x' ? 2 : c == 'u' ? 4 : 8;
        const uint32_t codepoint = source_.take_hex(num_digits, std::string("\\") + c);
        return {false, checked_codepoint(codepoint, start), {}};
    }
    if (c == '0') return {false, parse_octal(), {}};
    refuse_escape(c, start);
    return {false, uint8_t(c), {}};
}

// Fails for the escapes the subset leaves out: \b \B \A \Z (outside a
// class), \N{name}, backreferences \1 ... \9 (which Python may also read as
// octal), and an unknown letter.
void RegexParser::refuse_escape(char c, size_t start) const {
    if (c == 'b') source_.fail(start, "a word boundary \\b is not supported");
    if (c == 'B') source_.fail(start, "\\B (not a word boundary) is not supported");
    if (c == 'A' || c == 'Z') {
        source_.fail(start, fmt::format("the anchor \\{} is not supported (the regex matches "
                                        "the whole output anyway)",
                                        c));
    }
    if (c == 'N') source_.fail(start, "a named character \\N{...} is not supported");
    if (is_digit(c)) {
        source_.fail(start,
                     fmt::format("a backreference (or octal escape) \\{} is not supported", c));
    }
    if (is_ascii_letter(c)) source_.fail(start, fmt::format("bad escape \\{}", c));
}

// \0 and up to two more octal digits (the '0' already read).
uint32_t RegexParser::parse_octal() {
    uint32_t value = 0;
    for (int i = 0; i < 2 && source_.peek() >= '0' && source_.peek() <= '7'; ++i) {
        value = value * 8 + uint32_t(source_.peek() - '0');
        source_.skip();
    }
    return value;
}

uint32_t RegexParser::checked_codepoint(uint32_t codepoint, size_t start) const {
    if (codepoint > kMaxCodepoint) source_.fail(start, "bad escape (past U+10FFFF)");
    if (codepoint >= 0xD800 && codepoint <= 0xDFFF) {
        source_.fail(start, fmt::format("the escape names the surrogate U+{:04X}, which UTF-8 "
                                        "cannot carry",
                                        codepoint));
    }
    return codepoint;
}

void RegexParser::add_class(DraftSequence& out, const std::vector<CodepointRange>& ranges,
                            size_t offset) {
    const std::optional<DraftSymbol> symbol = draft_.character_class(ranges, hint_, offset);
    if (!symbol) source_.fail(offset, "the character class matches no character");
    out.push_back(*symbol);
}

void RegexParser::add_codepoint(DraftSequence& out, uint32_t codepoint, size_t offset) {
    for (const GrammarSymbol& symbol : literal_symbols(utf8_encode(codepoint))) {
        out.push_back({symbol, offset});
    }
}

bool RegexParser::nullable(const DraftSequence& sequence) {
    for (const DraftSymbol& s : sequence) {
        if (s.symbol.kind == GrammarSymbol::Kind::kBytes || !nullable_rule(s.symbol.rule)) {
            return false;
        }
    }
    return true;
}

// The rules this parser writes recurse only through a loop (loop ::= x loop
// | ""), and x never matches "" (apply_quantifier sees to it), so the
// left-to-right walk in nullable() stops at x and never comes back round:
// plain recursion with a memo is enough.
bool RegexParser::nullable_rule(int32_t rule) {
    const auto it = nullable_.find(rule);
    if (it != nullable_.end()) return it->second;
    bool result = false;
    for (const DraftSequence& alternative : draft_.alternatives(rule)) {
        result = result || nullable(alternative);
    }
    nullable_[rule] = result;
    return result;
}

// The strings of `sequence` but "", or none when it matches only "".
// Of a sequence that can match "" (all its symbols can): the strings whose
// first non-empty part comes from symbol i, for each i.
std::optional<DraftSequence> RegexParser::without_empty(const DraftSequence& sequence) {
    if (!nullable(sequence)) return sequence;
    std::vector<DraftSequence> alternatives;
    for (size_t i = 0; i < sequence.size(); ++i) {
        const std::optional<int32_t> first = without_empty_rule(sequence[i].symbol.rule);
        if (!first) continue;
        DraftSequence alternative = {draft_reference(*first, sequence[i].offset)};
        alternative.insert(alternative.end(), sequence.begin() + std::ptrdiff_t(i) + 1,
                           sequence.end());
        alternatives.push_back(std::move(alternative));
    }
    if (alternatives.empty()) return std::nullopt;
    if (alternatives.size() == 1) return alternatives[0];
    const int32_t rule = draft_.helper_rule(hint_ + "-nonempty");
    for (DraftSequence& alternative : alternatives) {
        draft_.add_alternative(rule, std::move(alternative));
    }
    return DraftSequence{draft_reference(rule, sequence[0].offset)};
}

std::optional<int32_t> RegexParser::without_empty_rule(int32_t rule) {
    const auto it = without_empty_.find(rule);
    if (it != without_empty_.end()) return it->second;
    std::vector<DraftSequence> alternatives;
    const std::vector<DraftSequence> original = draft_.alternatives(rule);  // a copy: rules grow
    for (const DraftSequence& alternative : original) {
        std::optional<DraftSequence> nonempty = without_empty(alternative);
        if (nonempty) alternatives.push_back(std::move(*nonempty));
    }
    std::optional<int32_t> result;
    if (!alternatives.empty()) {
        result = draft_.helper_rule(hint_ + "-nonempty");
        for (DraftSequence& alternative : alternatives) {
            draft_.add_alternative(*result, std::move(alternative));
        }
    }
    without_empty_[rule] = result;
    return result;
}

void RegexParser::check_size(size_t offset) const {
    if (draft_.num_elements() > kMaxRegexElements) {
        source_.fail(offset, fmt::format("the pattern is too large: over {} grammar elements "
                                         "once its repetitions are unrolled",
                                         kMaxRegexElements));
    }
}

}  // namespace

int32_t add_regex_rule(GrammarBuilder& builder, std::string_view pattern, const std::string& hint) {
    if (pattern.size() > kMaxRegexBytes) {
        throw GrammarError(fmt::format("regex: the pattern is {} bytes, over the limit of {}",
                                       pattern.size(), kMaxRegexBytes));
    }
    DraftRules draft;
    const int32_t top = draft.helper_rule(hint);
    RegexParser parser(pattern, draft, hint);
    for (DraftSequence& alternative : parser.parse()) {
        draft.add_alternative(top, std::move(alternative));
    }
    return draft.add_to(builder)[size_t(top)];
}

Grammar regex_grammar(std::string_view pattern) {
    GrammarBuilder builder;
    add_regex_rule(builder, pattern, "root");  // the first rule of an empty builder: "root"
    return builder.build("root");
}

Grammar choice_grammar(const std::vector<std::string>& choices) {
    if (choices.empty()) throw GrammarError("a list of choices needs at least one choice");
    GrammarBuilder builder;
    const int32_t root = builder.rule("root");
    for (const std::string& choice : choices)
        builder.add_alternative(root, literal_symbols(choice));
    return builder.build("root");
}

}  // namespace servelab
