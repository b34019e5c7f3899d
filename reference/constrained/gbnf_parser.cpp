// gbnf_parser.cpp — see gbnf_parser.h.
//
// A recursive-descent parser, one function per construct, writing into
// DraftRules (rule_draft.h) so that every symbol keeps its position. A rule
// ends at the end of its line, except inside parentheses, after `|` or
// `::=`, or where the next line starts with `|`.
#include "reference/constrained/gbnf_parser.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <optional>
#include <unordered_map>
#include <vector>

#include "reference/constrained/rule_draft.h"
#include "reference/constrained/source_cursor.h"
#include "reference/constrained/utf8_ranges.h"

namespace servelab {
namespace {

constexpr int kMaxGroupDepth = 100;  // a deeper nest would only exhaust the parser's stack

bool is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_';
}

bool is_newline(char c) {
    return c == '\n' || c == '\r';
}

// A repetition with no upper bound, kept so that one whose item can match
// "" (it would loop without reading anything) is reported where it stands.
struct UnboundedRepetition {
    DraftSequence item;
    size_t offset = 0;
};

class GbnfParser {
  public:
    explicit GbnfParser(std::string_view text) : source_(text, "grammar", true) {}

    void parse_rules();
    // The checks a whole grammar gets before it is built (parse_gbnf).
    void check_defined() const;
    void check_has_rule(const std::string& root) const;
    void check_repeated_items() const;
    void check_left_recursion() const;
    // Adds the rules; fails on one `builder` has already defined.
    void add_to(GrammarBuilder& builder) const;

  private:
    void skip_space(bool newlines);
    std::string parse_name();
    void parse_rule();
    std::vector<DraftSequence> parse_alternatives(bool nested);
    DraftSequence parse_sequence(bool nested);
    bool parse_item(DraftSequence& out, bool nested);
    bool parse_postfix(DraftSequence& out, size_t item_start, bool nested);
    void parse_braces(int& min_count, int& max_count, bool nested);
    int parse_count();
    void parse_literal(DraftSequence& out);
    void parse_class(DraftSequence& out);
    uint32_t parse_class_char();
    uint32_t parse_escape();
    void parse_any_char(DraftSequence& out);
    void parse_group(DraftSequence& out);
    void parse_reference(DraftSequence& out);
    [[noreturn]] void report_left_recursion(const std::vector<int32_t>& cycle, size_t offset) const;

    SourceCursor source_;
    DraftRules draft_;
    std::unordered_map<int32_t, size_t> defined_at_;  // named rule → where its definition starts
    std::unordered_map<int32_t, size_t> first_use_;   // named rule → where it is first referenced
    std::vector<UnboundedRepetition> loops_;
    std::optional<DraftSymbol> any_char_;  // `.`, made once
    std::string rule_name_;                // the rule being parsed: helpers are named after it
    int group_depth_ = 0;
};

void GbnfParser::skip_space(bool newlines) {
    while (!source_.at_end()) {
        const char c = source_.peek();
        if (c == ' ' || c == '\t' || (newlines && is_newline(c))) {
            source_.skip();
        } else if (c == '#') {  // a comment runs to the end of its line
            while (!source_.at_end() && !is_newline(source_.peek())) source_.skip();
        } else {
            return;
        }
    }
}

std::string GbnfParser::parse_name() {
    std::string name;
    while (!source_.at_end() && is_name_char(source_.peek())) {
        name += source_.peek();
        source_.skip();
    }
    return name;
}

void GbnfParser::parse_rules() {
    skip_space(true);
    while (!source_.at_end()) {
        parse_rule();
        skip_space(true);
    }
}

void GbnfParser::parse_rule() {
    const size_t start = source_.offset();
    rule_name_ = parse_name();
    if (rule_name_.empty()) {
        source_.fail(fmt::format("expected a rule name, found {}", source_.shown_next()));
    }
    skip_space(false);
    if (!source_.take("::=")) {
        source_.fail(fmt::format("expected '::=' after the rule name '{}'", rule_name_));
    }
    const int32_t rule = draft_.named_rule(rule_name_);
    if (defined_at_.count(rule)) {
        source_.fail(start, fmt::format("rule '{}' is defined twice (first at {})", rule_name_,
                                        source_.position(defined_at_.at(rule))));
    }
    defined_at_[rule] = start;
    skip_space(true);
    for (DraftSequence& sequence : parse_alternatives(false)) {
        draft_.add_alternative(rule, std::move(sequence));
    }
    if (!source_.at_end() && !is_newline(source_.peek())) {
        source_.fail(fmt::format("unexpected {} in rule '{}'", source_.shown_next(), rule_name_));
    }
}

std::vector<DraftSequence> GbnfParser::parse_alternatives(bool nested) {
    std::vector<DraftSequence> alternatives = {parse_sequence(nested)};
    while (true) {
        if (!nested) {  // a rule goes on where the next line starts with '|'
            const size_t end_of_line = source_.offset();
            skip_space(true);
            if (source_.peek() != '|') source_.seek(end_of_line);
        }
        if (!source_.take("|")) return alternatives;
        skip_space(true);
        alternatives.push_back(parse_sequence(nested));
    }
}

DraftSequence GbnfParser::parse_sequence(bool nested) {
    DraftSequence out;
    while (true) {
        const size_t item_start = out.size();
        if (!parse_item(out, nested)) break;
        while (parse_postfix(out, item_start, nested)) {
        }
    }
    const char c = source_.peek();
    if (c == '*' || c == '+' || c == '?' || c == '{') {
        source_.fail(fmt::format("'{}' has nothing before it to repeat", c));
    }
    return out;
}

bool GbnfParser::parse_item(DraftSequence& out, bool nested) {
    if (source_.at_end()) return false;
    const char c = source_.peek();
    if (c == '"') {
        parse_literal(out);
    } else if (c == '[') {
        parse_class(out);
    } else if (c == '.') {
        parse_any_char(out);
    } else if (c == '(') {
        parse_group(out);
    } else if (is_name_char(c)) {
        parse_reference(out);
    } else {
        return false;
    }
    skip_space(nested);
    return true;
}

// `*` `+` `?` `{m}` `{m,}` `{m,n}` after an item: the item's symbols
// (out[item_start..]) are replaced by their repetition.
bool GbnfParser::parse_postfix(DraftSequence& out, size_t item_start, bool nested) {
    const size_t at = source_.offset();
    int min_count = 0, max_count = -1;
    if (source_.take("*")) {
        min_count = 0;  // and no upper bound
    } else if (source_.take("+")) {
        min_count = 1;
    } else if (source_.take("?")) {
        max_count = 1;
    } else if (source_.peek() == '{') {
        parse_braces(min_count, max_count, nested);
    } else {
        return false;
    }
    const DraftSequence item(out.begin() + std::ptrdiff_t(item_start), out.end());
    if (max_count < 0) loops_.push_back({item, at});
    const DraftSequence repeated = draft_.repetition(item, min_count, max_count, rule_name_, at);
    out.resize(item_start);
    out.insert(out.end(), repeated.begin(), repeated.end());
    if (draft_.num_elements() > kMaxGbnfElements) {
        source_.fail(at, fmt::format("the grammar is too large: over {} elements once its "
                                     "repetitions are unrolled",
                                     kMaxGbnfElements));
    }
    skip_space(nested);
    return true;
}

void GbnfParser::parse_braces(int& min_count, int& max_count, bool nested) {
    const size_t start = source_.offset();
    source_.skip();  // '{'
    skip_space(nested);
    min_count = parse_count();
    skip_space(nested);
    if (source_.take("}")) {
        max_count = min_count;
        return;
    }
    if (!source_.take(",")) source_.fail("expected ',' or '}' in a repetition count");
    skip_space(nested);
    max_count = source_.peek() >= '0' && source_.peek() <= '9' ? parse_count() : -1;
    skip_space(nested);
    if (!source_.take("}")) source_.fail("expected '}' to close the repetition count");
    if (max_count >= 0 && max_count < min_count) {
        source_.fail(start, fmt::format("the repetition {{{},{}}} has its minimum over its maximum",
                                        min_count, max_count));
    }
}

int GbnfParser::parse_count() {
    const size_t start = source_.offset();
    const int64_t count = source_.take_number(kMaxGbnfRepetition);
    if (count < 0) source_.fail("expected a number in the repetition count");
    if (count > kMaxGbnfRepetition) {
        source_.fail(start,
                     fmt::format("a repetition count over the limit of {}", kMaxGbnfRepetition));
    }
    return int(count);
}

void GbnfParser::parse_literal(DraftSequence& out) {
    const size_t start = source_.offset();
    source_.skip();  // '"'
    std::string bytes;
    while (!source_.take("\"")) {
        if (source_.at_end() || is_newline(source_.peek())) {
            source_.fail(start,
                         "unterminated literal (a literal ends on its own line; write \\n "
                         "for a newline)");
        }
        const size_t char_start = source_.offset();
        if (source_.peek() == '\\') {
            bytes += utf8_encode(parse_escape());
        } else {
            source_.take_codepoint();
            bytes += source_.text().substr(char_start, source_.offset() - char_start);
        }
    }
    for (const GrammarSymbol& symbol : literal_symbols(bytes)) out.push_back({symbol, start});
}

void GbnfParser::parse_class(DraftSequence& out) {
    const size_t start = source_.offset();
    source_.skip();  // '['
    const bool negated = source_.take("^");
    std::vector<CodepointRange> ranges;
    while (!source_.take("]")) {
        if (source_.at_end() || is_newline(source_.peek())) {
            source_.fail(start, "unterminated character class");
        }
        const size_t range_start = source_.offset();
        const uint32_t low = parse_class_char();
        uint32_t high = low;
        if (source_.peek() == '-' && source_.peek(1) != ']') {
            source_.skip();
            if (source_.at_end() || is_newline(source_.peek())) {
                source_.fail(start, "unterminated character class");
            }
            high = parse_class_char();
            if (high < low) {
                source_.fail(range_start,
                             fmt::format("the range U+{:04X}-U+{:04X} runs backwards", low, high));
            }
        }
        ranges.push_back({low, high});
    }
    if (negated) ranges = complement_codepoints(std::move(ranges));
    const std::optional<DraftSymbol> symbol = draft_.character_class(ranges, rule_name_, start);
    if (!symbol) source_.fail(start, "the character class matches no character");
    out.push_back(*symbol);
}

uint32_t GbnfParser::parse_class_char() {
    return source_.peek() == '\\' ? parse_escape() : source_.take_codepoint();
}

// \n \r \t \\ \" \[ \] \- \^ \xHH \uHHHH \UHHHHHHHH, as a code point.
uint32_t GbnfParser::parse_escape() {
    const size_t start = source_.offset();
    source_.skip();  // '\'
    if (source_.at_end()) source_.fail(start, "a '\\' at the end of the text");
    const char c = source_.peek();
    const std::string shown = source_.shown_next();
    source_.skip();
    if (c == 'n') return '\n';
    if (c == 'r') return '\r';
    if (c == 't') return '\t';
    if (std::string_view("\\\"[]-^").find(c) != std::string_view::npos) return uint8_t(c);
    const int num_digits = c == 'x' ? 2 : c == 'u' ? 4 : c == 'U' ? 8 : 0;
    if (num_digits == 0) source_.fail(start, fmt::format("unknown escape: '\\' before {}", shown));
    const uint32_t codepoint = source_.take_hex(num_digits, std::string("\\") + c);
    if (codepoint > kMaxCodepoint || (codepoint >= 0xD800 && codepoint <= 0xDFFF)) {
        source_.fail(start, fmt::format("the escape names U+{:04X}, which is not a character "
                                        "UTF-8 can carry",
                                        codepoint));
    }
    return codepoint;
}

void GbnfParser::parse_any_char(DraftSequence& out) {
    const size_t start = source_.offset();
    source_.skip();  // '.'
    if (!any_char_) any_char_ = draft_.character_class({{0, kMaxCodepoint}}, "any", start);
    out.push_back({any_char_->symbol, start});
}

void GbnfParser::parse_group(DraftSequence& out) {
    const size_t start = source_.offset();
    source_.skip();  // '('
    if (++group_depth_ > kMaxGroupDepth) {
        source_.fail(start, fmt::format("groups nested more than {} deep", kMaxGroupDepth));
    }
    skip_space(true);
    std::vector<DraftSequence> alternatives = parse_alternatives(true);
    if (!source_.take(")")) {
        if (source_.at_end()) source_.fail(start, "the group is never closed with ')'");
        source_.fail(fmt::format("expected ')' to close the group at {}, found {}",
                                 source_.position(start), source_.shown_next()));
    }
    --group_depth_;
    if (alternatives.size() == 1) {  // a plain sequence needs no rule of its own
        out.insert(out.end(), alternatives[0].begin(), alternatives[0].end());
        return;
    }
    const int32_t group = draft_.helper_rule(rule_name_ + "-group");
    for (DraftSequence& sequence : alternatives) draft_.add_alternative(group, std::move(sequence));
    out.push_back(draft_reference(group, start));
}

void GbnfParser::parse_reference(DraftSequence& out) {
    const size_t start = source_.offset();
    const int32_t rule = draft_.named_rule(parse_name());
    first_use_.emplace(rule, start);
    out.push_back(draft_reference(rule, start));
}

void GbnfParser::check_defined() const {
    // The undefined rule whose first use comes first in the text.
    std::optional<int32_t> undefined;
    for (int32_t r = 0; r < int32_t(draft_.num_rules()); ++r) {
        if (draft_.is_helper(r) || defined_at_.count(r)) continue;
        if (!undefined || first_use_.at(r) < first_use_.at(*undefined)) undefined = r;
    }
    if (undefined) {
        source_.fail(
            first_use_.at(*undefined),
            fmt::format("rule '{}' is used here but never defined", draft_.name(*undefined)));
    }
}

void GbnfParser::check_has_rule(const std::string& root) const {
    if (!draft_.has_named_rule(root)) {
        source_.fail(0, fmt::format("the grammar has no rule '{}', where a sentence starts", root));
    }
}

void GbnfParser::check_repeated_items() const {
    const std::vector<bool> nullable = nullable_rules(draft_.shapes());
    for (const UnboundedRepetition& loop : loops_) {
        bool item_nullable = true;
        for (const DraftSymbol& s : loop.item) {
            item_nullable = item_nullable && s.symbol.kind == GrammarSymbol::Kind::kRule &&
                            nullable[size_t(s.symbol.rule)];
        }
        if (item_nullable) {
            source_.fail(loop.offset,
                         "the repeated item can match the empty string, so the repetition could "
                         "go on forever without reading anything; make the item non-empty "
                         "(x* rather than (x?)*)");
        }
    }
}

// A rule that can begin with itself (through rules that may match "") would
// make a pushdown matcher expand it forever (rule_graph.h); reported at the
// reference that closes the cycle, naming the source's rules on the way.
void GbnfParser::check_left_recursion() const {
    const RuleShapes shapes = draft_.shapes();
    const std::optional<LeftRecursion> found = find_left_recursion(shapes, nullable_rules(shapes));
    if (!found) return;
    const RuleReference& at = found->closing;
    const DraftSymbol& closing =
        draft_.alternatives(at.rule)[size_t(at.alternative)][size_t(at.symbol)];
    report_left_recursion(found->cycle, closing.offset);
}

// `cycle` lists the rules from the one that begins with itself around to
// the reference at `offset` that closes the loop.
void GbnfParser::report_left_recursion(const std::vector<int32_t>& cycle, size_t offset) const {
    std::vector<std::string> names;  // the source's rules; helpers only where there is none
    for (const int32_t r : cycle) {
        if (!draft_.is_helper(r)) names.push_back(draft_.name(r));
    }
    if (names.empty()) {
        for (const int32_t r : cycle) names.push_back(draft_.name(r));
    }
    names.push_back(names.front());
    if (names.size() > 12) {  // a one-line message, however long the cycle
        const size_t num_left_out = names.size() - 10;
        names.erase(names.begin() + 5, names.end() - 5);
        names.insert(names.begin() + 5, fmt::format("... ({} more)", num_left_out));
    }
    source_.fail(offset, fmt::format("rule '{}' is left-recursive ({}): it can begin with itself, "
                                     "which a pushdown matcher would expand forever; write the "
                                     "repetition with * or + instead",
                                     names.front(), fmt::join(names, " -> ")));
}

void GbnfParser::add_to(GrammarBuilder& builder) const {
    for (int32_t r = 0; r < int32_t(draft_.num_rules()); ++r) {
        const std::string& name = draft_.name(r);
        if (defined_at_.count(r) && builder.has_rule(name) && builder.defined(builder.rule(name))) {
            source_.fail(defined_at_.at(r), fmt::format("rule '{}' is already defined", name));
        }
    }
    draft_.add_to(builder);
}

}  // namespace

Grammar parse_gbnf(std::string_view text, const std::string& root) {
    GbnfParser parser(text);
    parser.parse_rules();
    parser.check_defined();
    parser.check_has_rule(root);
    parser.check_repeated_items();
    parser.check_left_recursion();
    GrammarBuilder builder;
    parser.add_to(builder);
    return builder.build(root);
}

void add_gbnf_rules(GrammarBuilder& builder, std::string_view text) {
    GbnfParser parser(text);
    parser.parse_rules();
    parser.check_repeated_items();
    parser.add_to(builder);
}

}  // namespace servelab
