// token_trie.cpp — see token_trie.h.
#include "reference/constrained/token_trie.h"

#include <algorithm>
#include <string_view>

namespace servelab {
namespace {

// The ids of the tokens with bytes (end tokens left out), in byte order of
// their bytes (ties by id): the order a depth-first walk of the trie meets them.
std::vector<TokenId> tokens_in_byte_order(const TokenVocabulary& vocabulary) {
    std::vector<bool> is_end(size_t(vocabulary.size()), false);
    for (const TokenId t : vocabulary.end_tokens) is_end[size_t(t)] = true;
    std::vector<TokenId> order;
    for (TokenId t = 0; t < vocabulary.size(); ++t) {
        if (!vocabulary.token_bytes[size_t(t)].empty() && !is_end[size_t(t)]) order.push_back(t);
    }
    std::stable_sort(order.begin(), order.end(), [&](TokenId a, TokenId b) {
        // Compared as unsigned bytes, so the children of a node come in byte order.
        const auto& x = vocabulary.token_bytes[size_t(a)];
        const auto& y = vocabulary.token_bytes[size_t(b)];
        return std::lexicographical_compare(x.begin(), x.end(), y.begin(), y.end(),
                                            [](char l, char r) { return uint8_t(l) < uint8_t(r); });
    });
    return order;
}

size_t common_prefix_length(std::string_view a, std::string_view b) {
    size_t n = 0;
    while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
    return n;
}

}  // namespace

// Sorted token bytes list the trie's nodes in depth-first order: each token
// adds the nodes of its bytes past the prefix it shares with the previous
// one. A node's subtree ends where the next node at its depth or above
// starts, which is when the path below it is closed.
TokenTrie::TokenTrie(const TokenVocabulary& vocabulary) {
    nodes_.push_back(Node{});
    std::vector<int32_t> path = {0};  // path[d]: the open node at depth d
    const auto close_below = [&](size_t depth) {
        while (path.size() > depth + 1) {
            const int32_t node = path.back();
            nodes_[size_t(node)].subtree_size = int32_t(nodes_.size()) - node;
            path.pop_back();
        }
    };
    std::string_view previous;
    for (const TokenId t : tokens_in_byte_order(vocabulary)) {
        const std::string_view bytes = vocabulary.token_bytes[size_t(t)];
        const size_t shared = common_prefix_length(previous, bytes);
        close_below(shared);
        for (size_t d = shared; d < bytes.size(); ++d) {
            path.push_back(int32_t(nodes_.size()));
            nodes_.push_back(Node{uint8_t(bytes[d]), int32_t(d + 1), 1, {}});
        }
        nodes_[size_t(path.back())].tokens.push_back(t);
        previous = bytes;
    }
    close_below(0);
    nodes_[0].subtree_size = int32_t(nodes_.size());
}

}  // namespace servelab
