// tokenizer.h — byte-level BPE tokenizer built from GGUF metadata.
//
// Part of the model loader (all labs; chapter: tokens in, tokens out). Reads
// `tokenizer.ggml.{model,pre,tokens,token_type,merges,bos_token_id,...}`.
// Supports `tokenizer.ggml.model = "gpt2"` (byte-level BPE) with the
// pre-tokenizer named by `tokenizer.ggml.pre`. Token ids equal llama.cpp's for
// the same GGUF (tests/unit/tokenizer_golden_test.cpp checks a corpus).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace servelab {

class GgufFile;

using TokenId = int32_t;

// tokenizer.ggml.token_type values (llama.cpp's enum).
enum class TokenType : int32_t {
    kUndefined = 0,
    kNormal = 1,
    kUnknown = 2,
    kControl = 3,
    kUserDefined = 4,
    kUnused = 5,
    kByte = 6,
};

// A byte range [begin, end) of a text.
struct TextSpan {
    size_t begin = 0;
    size_t end = 0;
};

class Tokenizer {
  public:
    // Throws servelab::Error on missing keys, unsupported model/pre-tokenizer,
    // or inconsistent arrays (e.g. token_type length != tokens length).
    static Tokenizer from_gguf(const GgufFile& file);

    Tokenizer(Tokenizer&&) noexcept;
    Tokenizer& operator=(Tokenizer&&) noexcept;
    ~Tokenizer();

    // Text to ids. With `parse_special`, control token texts in `text` (e.g.
    // "<|im_start|>") become their single ids; without it they are tokenized
    // as plain text. User-defined tokens become their ids either way, as in
    // llama.cpp and Hugging Face. Never adds BOS; callers use add_bos().
    std::vector<TokenId> encode(std::string_view text, bool parse_special) const;
    // encode(text, /*parse_special=*/true), except that a control token's
    // text overlapping one of `plain_spans` stays plain text: how a chat
    // prompt keeps text that came from a message from spelling the
    // template's control tokens (reference/chat/chat_format.h). Without spans
    // it is encode(text, true).
    std::vector<TokenId> encode_with_plain_spans(std::string_view text,
                                                 std::span<const TextSpan> plain_spans) const;
    // The texts encode(..., true) turns into control (or unknown) tokens.
    std::vector<std::string_view> control_token_texts() const;

    // Ids to bytes. Control tokens are rendered as their text only when
    // `render_special` is set. Output may end inside a UTF-8 character when
    // the ids do; use StreamDecoder for incremental output.
    std::string decode(std::span<const TokenId> ids, bool render_special = false) const;
    // The bytes one token stands for (same rules as decode).
    std::string token_to_bytes(TokenId id, bool render_special = false) const;

    int32_t vocab_size() const;
    const std::string& token_text(TokenId id) const;  // as stored in the GGUF
    TokenType token_type(TokenId id) const;
    TokenId find_token(std::string_view text) const;  // -1 when absent

    TokenId bos_id() const;  // -1 when the model has none
    TokenId eos_id() const;
    bool add_bos() const;  // tokenizer.ggml.add_bos_token
    // True for ids that end generation (eos, and control tokens such as
    // <|im_end|> / <|endoftext|> that the model declares as end-of-turn).
    bool is_end_of_generation(TokenId id) const;
    const std::string& pre_tokenizer() const;
    // The token standing for one raw byte, or -1 when the vocabulary has none
    // (such bytes are dropped by encode, as llama.cpp does).
    TokenId byte_token(uint8_t byte) const;

  private:
    Tokenizer();
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

// The character GPT-2's byte-level alphabet uses for `byte`, as UTF-8: the
// text of that byte's token in a byte-level vocabulary ("Ġ" for a space).
std::string byte_alphabet_text(uint8_t byte);

}  // namespace servelab
