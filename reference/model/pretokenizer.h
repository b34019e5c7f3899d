// pretokenizer.h — split text into "words" before byte-level BPE runs on each.
//
// Part of the model loader (all labs; tokenizer). BPE never merges across a
// word boundary, so where the pre-tokenizer cuts decides which tokens can
// appear: " world" (space + letters) is one word, "123" three single digits.
//
// Hugging Face describes these splitters as regular expressions such as the
// GPT-2 one:
//     's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// std::regex cannot express \p{L} (Unicode letters), so each expression is
// written here by hand as a small "matcher": given a position, how long is
// the match that the regex would find there? A model's pre-tokenizer is a
// list of such expressions applied in order; each one re-splits every piece
// produced by the previous one, and cannot see past that piece's ends.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace servelab {

enum class PreTokenizerKind {
    kGpt2,       // the GPT-2 expression alone
    kStarCoder,  // \p{N} (every digit alone), then GPT-2; used by SmolLM2 ("smollm")
    kDefault,    // llama.cpp's fallback list for BPE models: punctuation runs, GPT-2,
                 // \p{N}+, [0-9][0-9][0-9]
};

// Maps a `tokenizer.ggml.pre` value to its rules. Throws servelab::Error
// "unsupported pre-tokenizer 'X' (supported: ...)" for any other name.
PreTokenizerKind pre_tokenizer_from_name(std::string_view name);

// Split `text` into words. Invalid UTF-8 bytes become U+FFFD (as in llama.cpp),
// so the concatenated words equal `text` exactly when `text` is valid UTF-8.
std::vector<std::string> pretokenize(std::string_view text, PreTokenizerKind kind);

}  // namespace servelab
