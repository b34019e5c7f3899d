// json_string_skipper.h — telling JSON's structure from the inside of its strings, byte by byte.
//
// Support code, not an exercise (chapter 11.7, serving). Two scans read JSON
// text before (or instead of) parsing it: the request body's shape check
// (reference/server/request_json.h: depth and element count, before a parse
// that could be made to allocate without bound) and the tool-call reader's
// search for where a call's object ends (reference/chat/tool_call_parser.h).
// Both must not count a `{` or a `,` that lies inside a string, and a string
// ends only at a quote that is not escaped: `"a\"{"` is one string. This is
// that rule, written once.
#pragma once

namespace servelab {

class JsonStringSkipper {
  public:
    // Feed every byte in order. True when `c` belongs to a string literal
    // (its quotes included), so that the caller reads structure only from
    // the bytes for which this returns false.
    bool in_string(char c) {
        if (inside_) {
            if (escaped_) {
                escaped_ = false;
            } else if (c == '\\') {
                escaped_ = true;
            } else if (c == '"') {
                inside_ = false;
            }
            return true;
        }
        if (c == '"') {
            inside_ = true;
            return true;
        }
        return false;
    }

  private:
    bool inside_ = false;
    bool escaped_ = false;  // the previous byte was a backslash inside a string
};

}  // namespace servelab
