// grammar_cache.cpp — see grammar_cache.h.
#include "reference/constrained/grammar_cache.h"

#include <algorithm>

namespace servelab {

GrammarCache::GrammarCache(std::shared_ptr<const TokenVocabulary> vocabulary,
                           GrammarCompileOptions options, size_t capacity)
    : vocabulary_(std::move(vocabulary)),
      options_(options),
      capacity_(std::max<size_t>(capacity, 1)) {}

std::shared_ptr<const CompiledGrammar> GrammarCache::get(const ConstraintSpec& spec) {
    const std::string key = spec.key();
    {
        std::lock_guard lock(mutex_);
        const auto found = by_key_.find(key);
        if (found != by_key_.end()) {
            entries_.splice(entries_.begin(), entries_, found->second);
            ++num_hits_;
            return found->second->second;
        }
    }
    std::shared_ptr<const CompiledGrammar> compiled =
        CompiledGrammar::compile(grammar_of(spec), vocabulary_, options_);
    std::lock_guard lock(mutex_);
    ++num_compiled_;
    if (by_key_.count(key) != 0) return by_key_.at(key)->second;  // another thread won
    entries_.emplace_front(key, compiled);
    by_key_[key] = entries_.begin();
    if (entries_.size() > capacity_) {
        by_key_.erase(entries_.back().first);
        entries_.pop_back();
    }
    return compiled;
}

int64_t GrammarCache::num_compiled() const {
    std::lock_guard lock(mutex_);
    return num_compiled_;
}

int64_t GrammarCache::num_hits() const {
    std::lock_guard lock(mutex_);
    return num_hits_;
}

}  // namespace servelab
