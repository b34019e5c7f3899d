// compiled_grammar.cpp — see compiled_grammar.h.
#include "reference/constrained/compiled_grammar.h"

#include <fmt/format.h>

#include "reference/constrained/mask_cache_builder.h"

namespace servelab {
namespace {

void check_vocabulary(const TokenVocabulary* vocabulary) {
    if (vocabulary == nullptr) throw Error("compiling a grammar needs a vocabulary (got none)");
    for (const TokenId t : vocabulary->end_tokens) {
        if (t < 0 || t >= vocabulary->size()) {
            throw Error(fmt::format("the vocabulary's end token {} is outside it ({} tokens)", t,
                                    vocabulary->size()));
        }
    }
}

// One entry per element: the kBytes ones built, the others left empty.
std::vector<PositionMasks> build_mask_cache(const Grammar& grammar, const TokenTrie& trie,
                                            const TokenVocabulary& vocabulary,
                                            const CompileDeadline& deadline) {
    MaskCacheBuilder builder(grammar, trie, vocabulary, deadline);
    std::vector<PositionMasks> cache(grammar.num_elements());
    for (int32_t e = 0; e < int32_t(grammar.num_elements()); ++e) {
        if (grammar.element(e).kind != GrammarElement::Kind::kBytes) continue;
        deadline.check();
        cache[size_t(e)] = builder.build(e);
    }
    deadline.check();
    return cache;
}

}  // namespace

std::shared_ptr<const CompiledGrammar> CompiledGrammar::compile(
    Grammar grammar, std::shared_ptr<const TokenVocabulary> vocabulary,
    const GrammarCompileOptions& options) {
    const CompileDeadline deadline{std::chrono::steady_clock::now(), options.time_limit};
    check_vocabulary(vocabulary.get());
    std::shared_ptr<CompiledGrammar> compiled(new CompiledGrammar());
    compiled->grammar_ = std::move(grammar);
    compiled->vocabulary_ = std::move(vocabulary);
    compiled->trie_ = std::make_shared<const TokenTrie>(*compiled->vocabulary_);
    if (options.mask_cache) {
        compiled->position_masks_ = build_mask_cache(compiled->grammar_, *compiled->trie_,
                                                     *compiled->vocabulary_, deadline);
    }
    return compiled;
}

}  // namespace servelab
