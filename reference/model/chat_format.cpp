// chat_format.cpp — ChatML prompt rendering and encoding.
//
// Part of the model loader (all labs). See chat_format.h.
#include "reference/model/chat_format.h"

namespace servelab {
namespace {

constexpr std::string_view kTurnStart = "<|im_start|>";
constexpr std::string_view kTurnEnd = "<|im_end|>";

// One piece of the ChatML layout: a marker the template writes, or text.
struct ChatMlPiece {
    std::string_view text;
    bool is_marker;
};

// The layout, once, so that the rendered text and the kText encoding cannot drift apart.
std::vector<ChatMlPiece> chatml_pieces(std::span<const ChatMessage> messages,
                                       bool add_generation_prompt) {
    std::vector<ChatMlPiece> pieces;
    for (const ChatMessage& message : messages) {
        pieces.push_back({kTurnStart, true});
        pieces.push_back({message.role, false});
        pieces.push_back({"\n", false});
        pieces.push_back({message.content, false});
        pieces.push_back({kTurnEnd, true});
        pieces.push_back({"\n", false});
    }
    // The open assistant turn the model is asked to complete.
    if (add_generation_prompt) {
        pieces.push_back({kTurnStart, true});
        pieces.push_back({"assistant\n", false});
    }
    return pieces;
}

// The id kParse gives `marker`, or -1 when the vocabulary has no special
// token spelled so (it is then plain text in both modes, so that the ids agree).
TokenId marker_id(const Tokenizer& tokenizer, std::string_view marker) {
    const std::vector<TokenId> ids = tokenizer.encode(marker, /*parse_special=*/true);
    if (ids.size() != 1) return -1;
    const TokenType type = tokenizer.token_type(ids[0]);
    const bool special = type == TokenType::kControl || type == TokenType::kUserDefined ||
                         type == TokenType::kUnknown;
    return special ? ids[0] : -1;
}

}  // namespace

std::string format_chatml(std::span<const ChatMessage> messages, bool add_generation_prompt) {
    std::string prompt;
    for (const ChatMlPiece& piece : chatml_pieces(messages, add_generation_prompt)) {
        prompt += piece.text;
    }
    return prompt;
}

std::vector<TokenId> encode_chatml(const Tokenizer& tokenizer,
                                   std::span<const ChatMessage> messages,
                                   bool add_generation_prompt,
                                   SpecialTokensInMessages special_tokens) {
    if (special_tokens == SpecialTokensInMessages::kParse) {
        return tokenizer.encode(format_chatml(messages, add_generation_prompt),
                                /*parse_special=*/true);
    }
    const TokenId turn_start = marker_id(tokenizer, kTurnStart);
    const TokenId turn_end = marker_id(tokenizer, kTurnEnd);
    std::vector<TokenId> ids;
    // Text since the last marker, encoded as one run: encoding role, "\n" and
    // content apart would cut words the pre-tokenizer joins, and change ids.
    std::string run;
    const auto flush_run = [&] {
        const std::vector<TokenId> run_ids = tokenizer.encode(run, /*parse_special=*/false);
        ids.insert(ids.end(), run_ids.begin(), run_ids.end());
        run.clear();
    };
    for (const ChatMlPiece& piece : chatml_pieces(messages, add_generation_prompt)) {
        const TokenId id = !piece.is_marker ? -1 : piece.text == kTurnStart ? turn_start : turn_end;
        if (id < 0) {
            run += piece.text;
            continue;
        }
        flush_run();
        ids.push_back(id);
    }
    flush_run();
    return ids;
}

}  // namespace servelab
