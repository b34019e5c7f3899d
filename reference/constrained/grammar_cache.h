// grammar_cache.h — compiled grammars, shared by every request that asks for the same constraint.
//
// Lab 12 support (chapter 11.6, constrained decoding); not an exercise.
// Compiling a grammar for a vocabulary (its mask cache, compiled_grammar.h)
// costs milliseconds to a second; the requests of one application send the
// same few schemas over and over. So compiled grammars are kept by
// ConstraintSpec::key(), the least recently used dropped past `capacity`.
// A compiled grammar is immutable, so the requests using one share it.
//
// Thread-safe: the server's connection threads build requests at once. A
// compile runs outside the lock (two threads may compile one key at the
// same moment; the second result is dropped), so a slow schema never stalls
// requests for grammars already cached.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

#include "reference/constrained/compiled_grammar.h"
#include "reference/constrained/constraint_spec.h"

namespace servelab {

class GrammarCache {
  public:
    GrammarCache(std::shared_ptr<const TokenVocabulary> vocabulary,
                 GrammarCompileOptions options = {}, size_t capacity = 64);

    // The compiled grammar of `spec` (not kNone). Throws GrammarError (and
    // SchemaError) as grammar_of and CompiledGrammar::compile do.
    std::shared_ptr<const CompiledGrammar> get(const ConstraintSpec& spec);

    int64_t num_compiled() const;  // compiles so far (cache misses)
    int64_t num_hits() const;

  private:
    using Entry = std::pair<std::string, std::shared_ptr<const CompiledGrammar>>;
    std::shared_ptr<const TokenVocabulary> vocabulary_;
    GrammarCompileOptions options_;
    size_t capacity_;
    mutable std::mutex mutex_;
    std::list<Entry> entries_;  // most recently used first
    std::unordered_map<std::string, std::list<Entry>::iterator> by_key_;
    int64_t num_compiled_ = 0;
    int64_t num_hits_ = 0;
};

}  // namespace servelab
