// tool_call_response.h — a chat answer that called tools, in OpenAI's shapes.
//
// Part of the serving layer (chapter 11.7; docs/serving.md "Tool calling").
// When a request offered tools and did not say "tool_choice": "none", each
// choice's answer is read as calls (tool_call_parser.h). One that parses is
// answered as OpenAI answers calls:
//   whole:    "message": {"role": "assistant", "content": <text before the
//             calls, or null>, "tool_calls": [{"id": "call_…", "type":
//             "function", "function": {"name", "arguments": "<JSON text>"}}]},
//             "finish_reason": "tool_calls";
//   streamed: content deltas while no call can have begun (tool_call_stream.h),
//             then one delta per call, {"tool_calls": [{"index": i, "id",
//             "type": "function", "function": {"name", "arguments"}}]} (the
//             whole call at once, which the official client's accumulation
//             takes as it takes a call's first delta), then the finish chunk
//             with "finish_reason": "tool_calls".
// An answer that does not parse is plain content, as without tools.
//
// The parser reads the answer's text with the format's control-token
// markers put back (decoding drops control tokens' text: Mistral's
// [TOOL_CALLS], Llama's <|python_tag|>).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "reference/chat/tool_call_parser.h"
#include "reference/chat/tool_request.h"
#include "reference/engine/generator.h"
#include "reference/model/tokenizer.h"
#include "reference/server/openai_responses.h"

namespace servelab {

// Fresh ids for calls: "call_" and 24 random letters and digits, or, for
// the mistral format, 9 (its templates refuse a history whose ids are not).
class ToolCallIds {
  public:
    explicit ToolCallIds(ToolCallFormat format);
    std::string next();

  private:
    ToolCallFormat format_;
    std::mt19937_64 random_;
};

// The format's control-token markers this vocabulary has, by token id.
using MarkerTokens = std::vector<std::pair<TokenId, std::string>>;
MarkerTokens marker_tokens(ToolCallFormat format, const Tokenizer& tokenizer);

// One streamed token's text as a parser reads it: `text`, or the marker
// when `token` is one (its decoded text is empty).
std::string text_with_marker(TokenId token, const std::string& text, const MarkerTokens& markers);
// A whole answer's text with the markers put back where their tokens were
// (at the byte offset of the text the tokens before them decoded to, while
// that lies inside result.text, which a stop string may have cut).
std::string text_with_markers(const GenerationResult& result, const Tokenizer& tokenizer,
                              const MarkerTokens& markers);

// [{"id", "type": "function", "function": {"name", "arguments"}}, …].
nlohmann::json tool_calls_json(const std::vector<ParsedToolCall>& calls, ToolCallIds& ids);

// The whole response (completion_response's body, chat) with each choice
// that called tools rewritten as above. Nothing changes unless
// tools.parses_calls().
void add_tool_calls(nlohmann::json& body, const std::vector<GenerationResult>& results,
                    const ToolRequest& tools, const Tokenizer& tokenizer);

// A streamed chunk of choice `index` carrying one call's delta: `call` is one
// item of tool_calls_json, sent with "index": call_index. The choice's first
// chunk carries the role too.
nlohmann::json tool_call_chunk(const ResponseHeader& header, int index, int call_index,
                               const nlohmann::json& call, bool first);

}  // namespace servelab
