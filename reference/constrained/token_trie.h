// token_trie.h — the vocabulary's tokens as a trie of their bytes.
//
// Lab 12 (chapter 11.6, constrained decoding). Tokens share prefixes
// ("\"", "\":", "\"name"...), so walking them as a trie checks each shared
// prefix against the grammar once, and a prefix the grammar rejects prunes
// every token below it at once. Nodes are stored in depth-first order, so a
// subtree is a contiguous range [node, node + subtree_size): skipping it is
// one addition.
#pragma once

#include <cstdint>
#include <vector>

#include "reference/constrained/token_vocabulary.h"

namespace servelab {

class TokenTrie {
  public:
    struct Node {
        uint8_t byte = 0;             // the byte that leads here from the parent (root: 0)
        int32_t depth = 0;            // bytes from the root
        int32_t subtree_size = 1;     // this node and all below it
        std::vector<TokenId> tokens;  // the tokens whose bytes end here
    };
    // Every token with bytes (empty ones are left out, and so are the end
    // tokens: they are allowed where the output may end, whatever bytes a
    // hand-made vocabulary gives them).
    explicit TokenTrie(const TokenVocabulary& vocabulary);
    // Node 0 is the root (no byte, no tokens).
    const std::vector<Node>& nodes() const { return nodes_; }

  private:
    std::vector<Node> nodes_;
};

}  // namespace servelab
