// tool_call_stream.cpp — see tool_call_stream.h.
#include "reference/server/tool_call_stream.h"

#include <algorithm>

namespace servelab {

ToolCallStream::ToolCallStream(ToolCallFormat format, size_t max_calls)
    : format_(format), syntax_(tool_call_syntax(format)), max_calls_(max_calls) {}

std::string ToolCallStream::release_until(size_t end) {
    std::string content = answer_.substr(released_, end - released_);
    released_ = end;
    return content;
}

size_t ToolCallStream::possible_marker_tail() const {
    const std::string_view open = std::string_view(answer_).substr(released_);
    size_t longest = 0;
    for (const std::string& marker : syntax_.call_markers) {
        // The longest proper prefix of the marker that the answer ends with.
        for (size_t length = std::min(marker.size() - 1, open.size()); length > longest; --length) {
            if (open.ends_with(std::string_view(marker).substr(0, length))) {
                longest = length;
                break;
            }
        }
    }
    return longest;
}

std::string ToolCallStream::push(std::string_view piece) {
    answer_ += piece;
    if (plain_) return release_until(answer_.size());
    if (holding_) return "";
    if (syntax_.starts_at_beginning) {
        const std::string_view start =
            std::string_view(answer_).substr(skip_json_space(answer_, 0));
        if (start.empty()) return "";  // only space so far
        for (const std::string& marker : syntax_.call_markers) {
            if (start.starts_with(marker)) {
                holding_ = true;
                return "";
            }
            if (std::string_view(marker).starts_with(start)) return "";  // may still become one
        }
        plain_ = true;
        return release_until(answer_.size());
    }
    size_t first = std::string::npos;
    for (const std::string& marker : syntax_.call_markers) {
        first = std::min(first, answer_.find(marker, released_));
    }
    if (first != std::string::npos) {
        holding_ = true;
        return release_until(first);
    }
    return release_until(answer_.size() - possible_marker_tail());
}

ToolCallStream::End ToolCallStream::finish() const {
    const ToolCallParse parse = parse_tool_calls(format_, answer_, max_calls_);
    End end;
    if (!parse.called) {
        end.content = answer_.substr(released_);
        return end;
    }
    // The content before the calls; push() never returned past its end.
    if (parse.content.size() > released_) end.content = parse.content.substr(released_);
    end.calls = parse.calls;
    return end;
}

}  // namespace servelab
