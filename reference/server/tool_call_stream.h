// tool_call_stream.h — a streamed chat answer that may turn into tool calls.
//
// Part of the serving layer (chapter 11.7; docs/serving.md "Tool calling").
// With tools, a streamed answer cannot show a call's text as content, and
// cannot know it is a call until its marker has arrived whole. So, as with
// stop strings, text is held back:
//   - text that cannot begin a call is content, sent at once;
//   - a tail that could still grow into a call marker ("<tool_" of
//     "<tool_call>") waits until the next piece decides;
//   - from a whole marker on, everything is held until the answer ends,
//     and then parsed (tool_call_parser.h): calls, or, if it is not well
//     formed, content after all.
// Formats whose answer is calls only (llama3_json) decide at the answer's
// first non-space text: a marker ("{", <|python_tag|>) holds all of it.
// Whatever the pieces, the content sent plus finish()'s rest is the content
// the whole answer has (parse_tool_calls on the joined text); the tests check it.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "reference/chat/tool_call_format.h"
#include "reference/chat/tool_call_parser.h"

namespace servelab {

class ToolCallStream {
  public:
    // `max_calls` as parse_tool_calls takes it (ToolRequest::max_calls).
    ToolCallStream(ToolCallFormat format, size_t max_calls);

    // The next piece of the answer (control markers put back, tool_call_response.h).
    // Returns the text now known to be content (often "").
    std::string push(std::string_view piece);

    struct End {
        std::string content;                // the content push() has not returned
        std::vector<ParsedToolCall> calls;  // none: the whole answer was content
    };
    // The answer is complete.
    End finish() const;

  private:
    // answer_[released_, end) as content, now.
    std::string release_until(size_t end);
    // How many bytes at the end of answer_ could begin a marker.
    size_t possible_marker_tail() const;

    ToolCallFormat format_;
    ToolCallSyntax syntax_;
    size_t max_calls_;
    std::string answer_;    // every piece so far
    size_t released_ = 0;   // answer_'s first bytes, returned as content
    bool holding_ = false;  // a marker began at released_: hold the rest
    bool plain_ = false;    // starts_at_beginning: the answer began with no marker
};

}  // namespace servelab
