// constraint_spec.h — what a request asked its output to match, before it is compiled.
//
// Lab 12 support (chapter 11.6, constrained decoding); not an exercise. The
// front ends spell constraints many ways (OpenAI's response_format, vLLM's
// structured_outputs, llama.cpp's json_schema and grammar, the CLI's flags,
// a tool choice that must be a call); each becomes one ConstraintSpec, which
// RequestBuilder compiles for the model's vocabulary through a GrammarCache.
// Its key() is what the cache keys on: the same constraint text compiles once.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "reference/constrained/grammar.h"

namespace servelab {

struct ConstraintSpec {
    enum class Kind {
        kNone,        // unconstrained
        kJsonObject,  // any JSON object (response_format json_object)
        kJsonSchema,  // `text`: the schema, as JSON text
        kRegex,       // `text`: the pattern (the whole output matches it)
        kChoice,      // `choices`: the output is exactly one of them
        kGbnf,        // `text`: a GBNF grammar, rooted at "root"
        kGrammar,     // `grammar`: built by the caller (a tool call's), keyed by `text`
    };
    Kind kind = Kind::kNone;
    std::string text;
    std::vector<std::string> choices;
    std::shared_ptr<const Grammar> grammar;  // kGrammar
    // The request field to blame when it cannot be compiled ("response_format").
    std::string param;

    bool empty() const { return kind == Kind::kNone; }
    // Equal keys compile to equal grammars.
    std::string key() const;
};

// The grammar `spec` describes. Throws GrammarError (SchemaError for a
// schema) naming what cannot be enforced, and for a kNone spec.
Grammar grammar_of(const ConstraintSpec& spec);

}  // namespace servelab
