// token_bitmask.h — which tokens may come next, one bit a token.
//
// Lab 12 (chapter 11.6, constrained decoding). A mask over SmolLM2's 49,152
// tokens is 6 KiB as bytes but 768 words as bits: cheap to build, to
// combine (OR of the cached sets) and to send to a GPU with the step's plan.
// The sampler applies it first, before penalties, temperature and top-k/p:
// a token the grammar forbids gets logit -inf, so no later filter can bring
// it back and the renormalized distribution covers only allowed tokens.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "reference/model/tokenizer.h"

namespace servelab {

class TokenBitmask {
  public:
    TokenBitmask() = default;
    explicit TokenBitmask(int32_t vocab_size)
        : size_(vocab_size), words_(size_t(vocab_size + 63) / 64, 0) {}

    int32_t size() const { return size_; }
    bool test(TokenId t) const { return (words_[size_t(t) >> 6] >> (t & 63)) & 1; }
    void set(TokenId t) { words_[size_t(t) >> 6] |= uint64_t(1) << (t & 63); }
    void reset(TokenId t) { words_[size_t(t) >> 6] &= ~(uint64_t(1) << (t & 63)); }
    void clear() { std::fill(words_.begin(), words_.end(), 0); }
    // this |= other (same size).
    void merge(const TokenBitmask& other) {
        for (size_t i = 0; i < words_.size(); ++i) words_[i] |= other.words_[i];
    }
    int32_t count() const;
    std::span<const uint64_t> words() const { return words_; }
    std::span<uint64_t> words() { return words_; }
    bool operator==(const TokenBitmask&) const = default;

    // logits[t] = -infinity for every token t not in the mask (ids at or
    // past size(), in a model vocabulary padded beyond the tokenizer's, too).
    void apply(std::span<float> logits) const;

  private:
    int32_t size_ = 0;
    std::vector<uint64_t> words_;
};

}  // namespace servelab
