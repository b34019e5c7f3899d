// ngram_drafter.h — the n-gram (prompt lookup) proposer as a Drafter.
//
// Lab 6 (chapter 11.6). Stateless: each request's drafts come from its own
// sequence alone (ngram_proposer.h), so there is nothing to roll back.
#pragma once

#include "reference/speculative/drafter.h"
#include "reference/speculative/ngram_proposer.h"

namespace servelab {

class NgramDrafter : public Drafter {
  public:
    explicit NgramDrafter(const NgramOptions& options = {}) : options_(options) {}

    std::vector<Draft> propose(std::span<const DraftRequest> requests) override {
        std::vector<Draft> drafts(requests.size());
        for (size_t i = 0; i < requests.size(); ++i) {
            drafts[i].tokens = propose_ngram(requests[i].tokens, requests[i].max_drafts, options_);
        }
        return drafts;
    }

  private:
    NgramOptions options_;
};

}  // namespace servelab
