// token_vocabulary.cpp — see token_vocabulary.h.
#include "reference/constrained/token_vocabulary.h"

#include <cstdio>

namespace servelab {
namespace {

// A byte token's text is "<0xNN>" (llama.cpp's convention); its byte.
std::string byte_token_bytes(const std::string& text) {
    unsigned value = 0;
    char close = 0;
    if (std::sscanf(text.c_str(), "<0x%2X%c", &value, &close) == 2 && close == '>' &&
        text.size() == 6) {
        return std::string(1, char(value));
    }
    return {};
}

// The bytes `id` puts in the output text: none for tokens that never stand
// for text (control, unknown, unused) and for the end tokens, which stand for
// the end of the output rather than for text.
std::string output_bytes(const Tokenizer& tokenizer, TokenId id) {
    if (tokenizer.is_end_of_generation(id)) return {};
    switch (tokenizer.token_type(id)) {
        case TokenType::kNormal:
        case TokenType::kUserDefined:
            return tokenizer.token_to_bytes(id);
        case TokenType::kByte:
            return byte_token_bytes(tokenizer.token_text(id));
        default:
            return {};
    }
}

}  // namespace

TokenVocabulary TokenVocabulary::from_tokenizer(const Tokenizer& tokenizer) {
    TokenVocabulary vocabulary;
    vocabulary.token_bytes.resize(size_t(tokenizer.vocab_size()));
    for (TokenId id = 0; id < tokenizer.vocab_size(); ++id) {
        vocabulary.token_bytes[size_t(id)] = output_bytes(tokenizer, id);
        if (tokenizer.is_end_of_generation(id)) vocabulary.end_tokens.push_back(id);
    }
    return vocabulary;
}

}  // namespace servelab
