// prompt_key.h — what a request is routed by: its prompt text, cut into blocks.
//
// Part of the distributed layer (chapter 11.7, "routing"). The router has no
// tokenizer, so it cannot name the KV blocks a replica caches. It names
// their stand-in instead: the prompt TEXT cut into fixed-size character
// blocks, each block keyed by a chained hash
//   key[0] = hash(kChainRoot, chars[0, B)),  key[i] = hash(key[i-1], chars[iB, (i+1)B))
// so key i stands for the whole text up to the end of block i, as a prefix
// cache's block hash does for tokens. Two prompts share key i exactly when
// they share their first (i+1)·B characters (up to a 64-bit collision,
// which can only send a request to a colder replica, never change an answer).
// Only whole blocks get a key: a replica caches whole KV blocks too.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace servelab {

// The text a request is routed by. Completions: the prompt string as given
// (a prompt of token ids or of several strings: its JSON text). Chat: each
// message as role, a separator, its content (a string, or its text parts
// joined), and a message separator, in order, so the same system prompt
// always gives the same leading characters. A body without a prompt or
// messages gives "" (no key): the replica, not the router, answers 400.
std::string routing_text(const nlohmann::json& body, bool chat);

// The chained keys of the whole `block_chars`-character blocks of `text`
// (text.size() / block_chars of them; `block_chars` > 0).
std::vector<uint64_t> prefix_block_keys(std::string_view text, int64_t block_chars);

}  // namespace servelab
