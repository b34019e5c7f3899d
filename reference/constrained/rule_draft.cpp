// rule_draft.cpp — see rule_draft.h.
#include "reference/constrained/rule_draft.h"

namespace servelab {

int32_t DraftRules::named_rule(const std::string& name) {
    const auto it = named_ids_.find(name);
    if (it != named_ids_.end()) return it->second;
    const auto id = int32_t(rules_.size());
    rules_.push_back({name, false, {}});
    named_ids_.emplace(name, id);
    return id;
}

int32_t DraftRules::helper_rule(const std::string& hint) {
    rules_.push_back({hint, true, {}});
    return int32_t(rules_.size() - 1);
}

void DraftRules::add_alternative(int32_t rule, DraftSequence symbols) {
    num_elements_ += symbols.size() + 1;  // the symbols and the alternative's end
    rules_[size_t(rule)].alternatives.push_back(std::move(symbols));
}

RuleShapes DraftRules::shapes() const {
    RuleShapes shapes(rules_.size());
    for (size_t r = 0; r < rules_.size(); ++r) {
        for (const DraftSequence& alternative : rules_[r].alternatives) {
            std::vector<int32_t>& symbols = shapes[r].emplace_back();
            for (const DraftSymbol& s : alternative) {
                const bool bytes = s.symbol.kind == GrammarSymbol::Kind::kBytes;
                symbols.push_back(bytes ? kByteSetSymbol : s.symbol.rule);
            }
        }
    }
    return shapes;
}

std::optional<DraftSymbol> DraftRules::character_class(const std::vector<CodepointRange>& ranges,
                                                       const std::string& hint, size_t offset) {
    // One-byte characters all go in one byte set; each longer UTF-8 shape
    // is an alternative of its own.
    ByteSet one_byte;
    std::vector<DraftSequence> longer;
    for (const std::vector<ByteSet>& sequence : utf8_sequences(ranges)) {
        if (sequence.size() == 1) {
            for (size_t i = 0; i < one_byte.bits.size(); ++i)
                one_byte.bits[i] |= sequence[0].bits[i];
            continue;
        }
        DraftSequence symbols;
        for (const ByteSet& set : sequence)
            symbols.push_back({GrammarSymbol::of_bytes(set), offset});
        longer.push_back(std::move(symbols));
    }
    if (longer.empty() && one_byte.empty()) return std::nullopt;
    if (longer.empty()) return DraftSymbol{GrammarSymbol::of_bytes(one_byte), offset};
    const int32_t rule = helper_rule(hint + "-char");
    if (!one_byte.empty()) add_alternative(rule, {{GrammarSymbol::of_bytes(one_byte), offset}});
    for (DraftSequence& symbols : longer) add_alternative(rule, std::move(symbols));
    return draft_reference(rule, offset);
}

DraftSequence DraftRules::repetition(const DraftSequence& item, int min_count, int max_count,
                                     const std::string& hint, size_t offset) {
    if (min_count == max_count && min_count <= 1) return min_count == 1 ? item : DraftSequence{};
    DraftSymbol unit = item.empty() ? DraftSymbol{} : item[0];
    if (item.size() != 1) {
        const int32_t wrapped = helper_rule(hint + "-item");
        add_alternative(wrapped, item);
        unit = draft_reference(wrapped, offset);
    }
    // What the caller's sequence gets is a symbol or two, however large the
    // counts: its size stays proportional to the source text.
    DraftSequence out;
    if (min_count == 1) out.push_back(unit);
    if (min_count > 1) {
        const int32_t copies = helper_rule(hint + "-copies");
        add_alternative(copies, DraftSequence(size_t(min_count), unit));
        out.push_back(draft_reference(copies, offset));
    }
    if (max_count < 0) {
        const int32_t loop = helper_rule(hint + "-loop");
        add_alternative(loop, {unit, draft_reference(loop, offset)});
        add_alternative(loop, {});
        out.push_back(draft_reference(loop, offset));
        return out;
    }
    int32_t tail = -1;  // matches up to (k - min_count) more items
    for (int k = min_count; k < max_count; ++k) {
        const int32_t longer_tail = helper_rule(hint + "-tail");
        DraftSequence once = {unit};
        if (tail >= 0) once.push_back(draft_reference(tail, offset));
        add_alternative(longer_tail, std::move(once));
        add_alternative(longer_tail, {});
        tail = longer_tail;
    }
    if (tail >= 0) out.push_back(draft_reference(tail, offset));
    return out;
}

std::vector<int32_t> DraftRules::add_to(GrammarBuilder& builder) const {
    std::vector<int32_t> ids(rules_.size());
    for (size_t r = 0; r < rules_.size(); ++r) {
        if (!rules_[r].is_helper) ids[r] = builder.rule(rules_[r].name);
    }
    for (size_t r = 0; r < rules_.size(); ++r) {
        if (rules_[r].is_helper) ids[r] = builder.fresh_rule(rules_[r].name);
    }
    for (size_t r = 0; r < rules_.size(); ++r) {
        for (const DraftSequence& alternative : rules_[r].alternatives) {
            std::vector<GrammarSymbol> symbols;
            for (DraftSymbol s : alternative) {
                if (s.symbol.kind == GrammarSymbol::Kind::kRule) {
                    s.symbol.rule = ids[size_t(s.symbol.rule)];
                }
                symbols.push_back(s.symbol);
            }
            builder.add_alternative(ids[r], std::move(symbols));
        }
    }
    return ids;
}

}  // namespace servelab
