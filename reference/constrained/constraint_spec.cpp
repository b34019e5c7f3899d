// constraint_spec.cpp — see constraint_spec.h.
#include "reference/constrained/constraint_spec.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "reference/constrained/gbnf_parser.h"
#include "reference/constrained/json_schema_grammar.h"
#include "reference/constrained/regex_grammar.h"

namespace servelab {

std::string ConstraintSpec::key() const {
    // Kind first, then the text: a pattern and a grammar with equal text differ.
    std::string key = std::to_string(int(kind)) + ":";
    if (kind == Kind::kChoice) return key + nlohmann::json(choices).dump();
    return key + text;
}

Grammar grammar_of(const ConstraintSpec& spec) {
    switch (spec.kind) {
        case ConstraintSpec::Kind::kNone:
            break;
        case ConstraintSpec::Kind::kJsonObject:
            return json_object_grammar();
        case ConstraintSpec::Kind::kJsonSchema: {
            // Ordered: the properties come out as the schema lists them.
            const nlohmann::ordered_json schema =
                nlohmann::ordered_json::parse(spec.text, nullptr, false);
            if (schema.is_discarded()) throw GrammarError("the JSON schema is not valid JSON");
            return json_schema_grammar(schema);
        }
        case ConstraintSpec::Kind::kRegex:
            return regex_grammar(spec.text);
        case ConstraintSpec::Kind::kChoice:
            return choice_grammar(spec.choices);
        case ConstraintSpec::Kind::kGbnf:
            return parse_gbnf(spec.text);
        case ConstraintSpec::Kind::kGrammar:
            if (spec.grammar) return *spec.grammar;
            break;
    }
    throw GrammarError("grammar_of: the constraint is empty");
}

}  // namespace servelab
