// tokenizer.cpp — byte-level BPE (GPT-2 style) from GGUF metadata.
//
// Part of the model loader (all labs; chapter: tokens in, tokens out).
// Encoding, in four steps:
//   1. special tokens: with parse_special, texts like "<|im_start|>" are cut
//      out of the input first and become their single ids;
//   2. pre-tokenization: the remaining text is split into words
//      (pretokenizer.h); BPE never merges across a word boundary;
//   3. byte-level: each byte of a word starts as its own symbol, the token of
//      that byte;
//   4. BPE: repeatedly merge the adjacent pair of symbols whose merge rule
//      comes earliest in tokenizer.ggml.merges, until no rule applies.
// Decoding maps each token's text back through the byte alphabet.
#include "reference/model/tokenizer.h"

#include <algorithm>
#include <array>
#include <queue>
#include <unordered_map>

#include "kernels/common/error.h"
#include "reference/model/gguf_reader.h"
#include "reference/model/pretokenizer.h"
#include "reference/model/unicode_categories.h"

namespace servelab {
namespace {

// ---------------------------------------------------------------- the byte alphabet

// GPT-2's vocabulary is a set of strings, but its symbols are bytes. To keep
// every byte visible and unambiguous in those strings (a raw 0x20 or 0x0A
// would be invisible, and "a b" in merges uses space as the separator), each
// byte gets a stand-in character: printable Latin-1 bytes ('!'..'~',
// '¡'..'¬', '®'..'ÿ') stand for themselves, and the other 68 bytes (controls,
// space, DEL, no-break space, soft hyphen) take U+0100, U+0101, ... in byte
// order. So space is 'Ġ' (U+0120) and newline 'Ċ' (U+010A).
constexpr uint32_t kFirstShifted = 0x100;
constexpr uint32_t kAlphabetEnd = kFirstShifted + 68;  // one past the largest stand-in

bool stands_for_itself(int byte) {
    return (byte >= '!' && byte <= '~') || (byte >= 0xA1 && byte <= 0xAC) ||
           (byte >= 0xAE && byte <= 0xFF);
}

std::array<uint32_t, 256> make_byte_to_char() {
    std::array<uint32_t, 256> table{};
    uint32_t next_shifted = kFirstShifted;
    for (int byte = 0; byte < 256; ++byte) {
        table[byte] = stands_for_itself(byte) ? byte : next_shifted++;
    }
    return table;
}

// The stand-in characters back to bytes; -1 for characters outside the alphabet.
std::array<int16_t, kAlphabetEnd> make_char_to_byte(const std::array<uint32_t, 256>& byte_to_char) {
    std::array<int16_t, kAlphabetEnd> table;
    table.fill(-1);
    for (int byte = 0; byte < 256; ++byte) table[byte_to_char[byte]] = static_cast<int16_t>(byte);
    return table;
}

// ---------------------------------------------------------------- small helpers

constexpr TokenId kNoToken = -1;

uint64_t pair_key(TokenId left, TokenId right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
}

// Texts of tokens that end a model's turn in the chat formats we know of.
constexpr std::string_view kEndOfTurnTexts[] = {
    "<|im_end|>", "<|endoftext|>", "<|eot_id|>",      "<|eom_id|>",
    "<|end|>",    "<end_of_turn>", "<|end_of_text|>",
};

// Part of the input: plain text still to be tokenized, or an already-known
// special token (when `id` >= 0).
struct Fragment {
    std::string_view text;
    TokenId id = -1;
};

}  // namespace

// ---------------------------------------------------------------- state

struct Tokenizer::Impl {
    // A merge rule joins two adjacent symbols (known by their token ids) into one.
    struct MergeRule {
        int32_t rank;    // position in tokenizer.ggml.merges: lower merges first
        TokenId result;  // the token of the joined text
    };

    std::vector<std::string> texts;                // token id -> text as stored in the GGUF
    std::vector<TokenType> types;                  // token id -> type
    std::vector<std::string> bytes;                // token id -> decoded bytes (normal tokens only)
    std::unordered_map<std::string, TokenId> ids;  // text -> token id
    std::unordered_map<uint64_t, MergeRule> merges;  // (left id, right id) -> rule
    std::array<uint32_t, 256> byte_to_char = make_byte_to_char();
    std::array<int16_t, kAlphabetEnd> char_to_byte = make_char_to_byte(byte_to_char);
    std::array<TokenId, 256> byte_tokens{};  // byte -> token of its stand-in, or kNoToken
    std::vector<TokenId> specials;           // split out before BPE; longest text first
    std::vector<TokenId> end_of_generation;
    std::string pre_name;
    PreTokenizerKind pre_kind = PreTokenizerKind::kGpt2;
    TokenId bos = -1;
    TokenId eos = -1;
    bool add_bos = false;

    void load_vocabulary(const GgufFile& file);
    void load_merges(const GgufFile& file);
    void load_special_ids(const GgufFile& file);
    TokenId optional_token_id(const GgufFile& file, std::string_view key) const;
    void check_id(TokenId id) const;

    std::string decode_alphabet(std::string_view text) const;
    std::vector<Fragment> split_special(std::string_view text, bool parse_special,
                                        std::span<const TextSpan> plain_spans = {}) const;
    void encode_word(std::string_view word, std::vector<TokenId>& out) const;
    // Special fragments as their ids, plain ones pre-tokenized and BPE-encoded.
    std::vector<TokenId> encode_fragments(std::span<const Fragment> fragments) const;
};

// ---------------------------------------------------------------- loading

void Tokenizer::Impl::load_vocabulary(const GgufFile& file) {
    texts = file.get_string_array("tokenizer.ggml.tokens");
    if (texts.empty()) throw Error("tokenizer.ggml.tokens is empty");
    const auto n_tokens = static_cast<int64_t>(texts.size());
    if (n_tokens > INT32_MAX) throw Error("tokenizer.ggml.tokens has too many entries");

    // token_type is optional: without it every token is an ordinary one.
    types.assign(texts.size(), TokenType::kNormal);
    if (file.find("tokenizer.ggml.token_type") != nullptr) {
        const std::vector<int64_t> raw = file.get_int_array("tokenizer.ggml.token_type");
        if (static_cast<int64_t>(raw.size()) != n_tokens) {
            throw Error("tokenizer.ggml.token_type has " + std::to_string(raw.size()) +
                        " entries but tokenizer.ggml.tokens has " + std::to_string(n_tokens));
        }
        for (size_t i = 0; i < raw.size(); ++i) {
            if (raw[i] < 0 || raw[i] > static_cast<int64_t>(TokenType::kByte)) {
                throw Error("tokenizer.ggml.token_type[" + std::to_string(i) +
                            "] = " + std::to_string(raw[i]) + " is not a known token type");
            }
            types[i] = static_cast<TokenType>(raw[i]);
        }
    }

    // If a text appears twice the later id wins, as in llama.cpp.
    for (TokenId id = 0; id < n_tokens; ++id) ids[texts[id]] = id;

    bytes.resize(texts.size());
    for (TokenId id = 0; id < n_tokens; ++id) {
        if (types[id] == TokenType::kNormal) bytes[id] = decode_alphabet(texts[id]);
    }

    // The token of each byte's stand-in character. A vocabulary may lack some
    // (SmolLM2 has no token for 21 bytes that its training text never held,
    // such as 0x04 or 0xFF); those bytes are dropped when encoding, which is
    // what llama.cpp and Hugging Face do too.
    for (int byte = 0; byte < 256; ++byte) {
        std::string stand_in;
        append_utf8(stand_in, byte_to_char[byte]);
        const auto it = ids.find(stand_in);
        byte_tokens[byte] = it == ids.end() ? kNoToken : it->second;
    }
}

void Tokenizer::Impl::load_merges(const GgufFile& file) {
    const std::vector<std::string> rules = file.get_string_array("tokenizer.ggml.merges");
    for (size_t rank = 0; rank < rules.size(); ++rank) {
        const std::string& rule = rules[rank];
        const std::string where =
            "tokenizer.ggml.merges[" + std::to_string(rank) + "] '" + rule + "'";
        // "left right": the separator is the first space after the first
        // character (the byte alphabet has no plain space in token texts).
        const size_t space = rule.find(' ', 1);
        if (space == std::string::npos) {
            throw Error(where + " is not two tokens separated by a space");
        }
        const std::string left = rule.substr(0, space);
        const std::string right = rule.substr(space + 1);
        const auto left_it = ids.find(left);
        const auto right_it = ids.find(right);
        const auto result_it = ids.find(left + right);
        if (left_it == ids.end()) throw Error(where + " refers to unknown token '" + left + "'");
        if (right_it == ids.end()) throw Error(where + " refers to unknown token '" + right + "'");
        if (result_it == ids.end()) {
            throw Error(where + " produces '" + left + right + "', which is not a token");
        }
        // emplace keeps the first (best-ranked) rule if a pair is listed twice.
        merges.emplace(pair_key(left_it->second, right_it->second),
                       MergeRule{static_cast<int32_t>(rank), result_it->second});
    }
}

TokenId Tokenizer::Impl::optional_token_id(const GgufFile& file, std::string_view key) const {
    if (file.find(key) == nullptr) return -1;
    const uint64_t id = file.get_uint(key);
    if (id >= texts.size()) {
        throw Error(std::string(key) + " = " + std::to_string(id) + " is out of range (" +
                    std::to_string(texts.size()) + " tokens)");
    }
    return static_cast<TokenId>(id);
}

void Tokenizer::Impl::load_special_ids(const GgufFile& file) {
    bos = optional_token_id(file, "tokenizer.ggml.bos_token_id");
    eos = optional_token_id(file, "tokenizer.ggml.eos_token_id");
    add_bos = file.get_bool("tokenizer.ggml.add_bos_token", false);

    // Tokens matched in the text before BPE: control and unknown tokens (only
    // with parse_special) and user-defined ones. Longer texts are matched first
    // so that "<|im_start|>" wins over a shorter token it contains.
    for (TokenId id = 0; id < static_cast<TokenId>(texts.size()); ++id) {
        const TokenType type = types[id];
        const bool special = type == TokenType::kControl || type == TokenType::kUserDefined ||
                             type == TokenType::kUnknown;
        if (special && !texts[id].empty()) specials.push_back(id);
    }
    std::stable_sort(specials.begin(), specials.end(),
                     [&](TokenId a, TokenId b) { return texts[a].size() > texts[b].size(); });

    // Generation ends at eos, at the declared end-of-turn / end-of-message
    // tokens, and at any token spelled like a known end-of-turn marker.
    for (const char* key : {"tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}) {
        const TokenId id = optional_token_id(file, key);
        if (id >= 0) end_of_generation.push_back(id);
    }
    if (eos >= 0) end_of_generation.push_back(eos);
    for (std::string_view text : kEndOfTurnTexts) {
        if (const auto it = ids.find(std::string(text)); it != ids.end()) {
            end_of_generation.push_back(it->second);
        }
    }
}

Tokenizer Tokenizer::from_gguf(const GgufFile& file) {
    const std::string model = file.get_string("tokenizer.ggml.model");
    if (model != "gpt2") {
        throw Error("unsupported tokenizer model '" + model +
                    "' (servelab supports only 'gpt2', byte-level BPE)");
    }
    Tokenizer tokenizer;
    Impl& impl = *tokenizer.impl_;
    // Like llama.cpp, a GGUF without tokenizer.ggml.pre gets the default rules.
    impl.pre_name = file.get_string("tokenizer.ggml.pre", "default");
    impl.pre_kind = pre_tokenizer_from_name(impl.pre_name);
    impl.load_vocabulary(file);
    impl.load_merges(file);
    impl.load_special_ids(file);
    return tokenizer;
}

// ---------------------------------------------------------------- encoding

// Cut special-token texts out of `text`. Tokens are taken one at a time,
// longest first, and each is searched for in every plain fragment left so far
// (the order llama.cpp uses, so that overlapping specials split the same way).
std::vector<Fragment> Tokenizer::Impl::split_special(std::string_view text, bool parse_special,
                                                     std::span<const TextSpan> plain_spans) const {
    // Whether text[begin, end) overlaps a span that must stay plain.
    const auto in_plain_span = [&](size_t begin, size_t end) {
        for (const TextSpan& span : plain_spans) {
            if (begin < span.end && span.begin < end) return true;
        }
        return false;
    };
    std::vector<Fragment> fragments = {{text}};
    for (TokenId id : specials) {
        // User-defined tokens are always matched (Hugging Face treats such
        // "added tokens" as part of the vocabulary's surface); control tokens
        // only when the caller asks for special-token parsing.
        const bool user_defined = types[id] == TokenType::kUserDefined;
        if (!parse_special && !user_defined) continue;
        const std::string_view needle = texts[id];
        std::vector<Fragment> next;
        for (const Fragment& fragment : fragments) {
            if (fragment.id >= 0) {
                next.push_back(fragment);
                continue;
            }
            std::string_view rest = fragment.text;
            size_t from = 0;
            for (size_t at = rest.find(needle, from); at != std::string_view::npos;
                 at = rest.find(needle, from)) {
                const size_t begin = size_t(rest.data() - text.data()) + at;
                if (!user_defined && in_plain_span(begin, begin + needle.size())) {
                    from = at + 1;  // plain text here: look further on
                    continue;
                }
                if (at > 0) next.push_back({rest.substr(0, at)});
                next.push_back({needle, id});
                rest.remove_prefix(at + needle.size());
                from = 0;
            }
            if (!rest.empty()) next.push_back({rest});
        }
        fragments = std::move(next);
    }
    return fragments;
}

// BPE on one word. Symbols form a doubly linked list over the word's bytes;
// a priority queue holds candidate merges of neighbours, best rank first and
// leftmost first among equals. A merge overwrites the left symbol with the
// joined token and unlinks the right one. Candidates whose symbols changed
// (or were removed) since they were queued are stale and skipped when they
// come up; checking only the ids is not enough, because a removed symbol keeps
// its old id and its old link to the right.
void Tokenizer::Impl::encode_word(std::string_view word, std::vector<TokenId>& out) const {
    struct Symbol {
        TokenId id;
        int prev;
        int next;              // -1 at the ends
        bool removed = false;  // merged into its left neighbour
    };
    struct Candidate {
        int32_t rank;
        int left;
        int right;
        TokenId left_id;
        TokenId right_id;
        bool operator>(const Candidate& other) const {
            return rank != other.rank ? rank > other.rank : left > other.left;
        }
    };

    const int n = static_cast<int>(word.size());
    if (n == 0) return;
    std::vector<Symbol> symbols(n);
    for (int i = 0; i < n; ++i) {
        symbols[i] = {byte_tokens[static_cast<uint8_t>(word[i])], i - 1, i + 1 < n ? i + 1 : -1};
    }

    std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
    auto consider = [&](int left, int right) {
        if (left < 0 || right < 0) return;
        const auto it = merges.find(pair_key(symbols[left].id, symbols[right].id));
        if (it == merges.end()) return;
        queue.push({it->second.rank, left, right, symbols[left].id, symbols[right].id});
    };
    for (int i = 0; i + 1 < n; ++i) consider(i, i + 1);

    while (!queue.empty()) {
        const Candidate best = queue.top();
        queue.pop();
        Symbol& left = symbols[best.left];
        Symbol& right = symbols[best.right];
        const bool still_valid = !left.removed && left.next == best.right &&
                                 left.id == best.left_id && right.id == best.right_id;
        if (!still_valid) continue;
        left.id = merges.at(pair_key(best.left_id, best.right_id)).result;
        right.removed = true;
        const int after = right.next;
        left.next = after;
        if (after >= 0) symbols[after].prev = best.left;
        consider(left.prev, best.left);
        consider(best.left, after);
    }

    for (int i = 0; i >= 0; i = symbols[i].next) {
        if (symbols[i].id != kNoToken) out.push_back(symbols[i].id);  // a byte without a token
    }
}

std::vector<TokenId> Tokenizer::encode(std::string_view text, bool parse_special) const {
    return impl_->encode_fragments(impl_->split_special(text, parse_special));
}

std::vector<TokenId> Tokenizer::encode_with_plain_spans(
    std::string_view text, std::span<const TextSpan> plain_spans) const {
    return impl_->encode_fragments(impl_->split_special(text, /*parse_special=*/true, plain_spans));
}

std::vector<std::string_view> Tokenizer::control_token_texts() const {
    std::vector<std::string_view> out;
    for (TokenId id : impl_->specials) {
        if (impl_->types[id] != TokenType::kUserDefined) out.push_back(impl_->texts[id]);
    }
    return out;
}

std::vector<TokenId> Tokenizer::Impl::encode_fragments(std::span<const Fragment> fragments) const {
    std::vector<TokenId> out;
    for (const Fragment& fragment : fragments) {
        if (fragment.id >= 0) {
            out.push_back(fragment.id);
            continue;
        }
        for (const std::string& word : pretokenize(fragment.text, pre_kind)) {
            encode_word(word, out);
        }
    }
    return out;
}

// ---------------------------------------------------------------- decoding

// Map a token's text back through the byte alphabet. A character outside the
// alphabet (not produced by GPT-2-style converters) is kept as its UTF-8.
std::string Tokenizer::Impl::decode_alphabet(std::string_view text) const {
    std::string out;
    for (uint32_t cp : decode_utf8_lenient(text)) {
        if (cp < kAlphabetEnd && char_to_byte[cp] >= 0) {
            out += static_cast<char>(char_to_byte[cp]);
        } else {
            append_utf8(out, cp);
        }
    }
    return out;
}

void Tokenizer::Impl::check_id(TokenId id) const {
    if (id < 0 || id >= static_cast<TokenId>(texts.size())) {
        throw Error("token id " + std::to_string(id) + " is out of range (" +
                    std::to_string(texts.size()) + " tokens)");
    }
}

std::string Tokenizer::token_to_bytes(TokenId id, bool render_special) const {
    impl_->check_id(id);
    switch (impl_->types[id]) {
        case TokenType::kNormal:
            return impl_->bytes[id];
        case TokenType::kUserDefined:
            return impl_->texts[id];  // stored as plain text, not in the byte alphabet
        case TokenType::kControl:
        case TokenType::kUnknown:
            return render_special ? impl_->texts[id] : std::string();
        default:
            return {};  // unused, byte and undefined tokens have no text of their own
    }
}

std::string Tokenizer::decode(std::span<const TokenId> ids, bool render_special) const {
    std::string out;
    for (TokenId id : ids) out += token_to_bytes(id, render_special);
    return out;
}

// ---------------------------------------------------------------- accessors

Tokenizer::Tokenizer() : impl_(std::make_unique<Impl>()) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

int32_t Tokenizer::vocab_size() const {
    return static_cast<int32_t>(impl_->texts.size());
}

const std::string& Tokenizer::token_text(TokenId id) const {
    impl_->check_id(id);
    return impl_->texts[id];
}

TokenType Tokenizer::token_type(TokenId id) const {
    impl_->check_id(id);
    return impl_->types[id];
}

TokenId Tokenizer::find_token(std::string_view text) const {
    const auto it = impl_->ids.find(std::string(text));
    return it == impl_->ids.end() ? -1 : it->second;
}

TokenId Tokenizer::bos_id() const {
    return impl_->bos;
}
TokenId Tokenizer::eos_id() const {
    return impl_->eos;
}
bool Tokenizer::add_bos() const {
    return impl_->add_bos;
}
const std::string& Tokenizer::pre_tokenizer() const {
    return impl_->pre_name;
}
TokenId Tokenizer::byte_token(uint8_t byte) const {
    return impl_->byte_tokens[byte];
}

std::string byte_alphabet_text(uint8_t byte) {
    std::string text;
    append_utf8(text, make_byte_to_char()[byte]);
    return text;
}

bool Tokenizer::is_end_of_generation(TokenId id) const {
    const auto& eog = impl_->end_of_generation;
    return std::find(eog.begin(), eog.end(), id) != eog.end();
}

}  // namespace servelab
