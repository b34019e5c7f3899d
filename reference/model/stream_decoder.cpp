// stream_decoder.cpp — hold back partial UTF-8 characters while streaming.
//
// Part of the model loader (all labs). See stream_decoder.h. Each push appends
// the token's bytes to `pending_` and releases every complete character from
// the front; only an unfinished character at the very end is kept for later.
#include "reference/model/stream_decoder.h"

#include <string_view>

#include "reference/model/unicode_categories.h"

namespace servelab {
namespace {

constexpr std::string_view kReplacementUtf8 = "\xEF\xBF\xBD";  // U+FFFD

// Move the complete characters at the front of `pending` to the result. Bytes
// that can never form a character are replaced by U+FFFD right away, so the
// result is always valid UTF-8. An unfinished character at the end stays in
// `pending`, unless `at_end` says no more bytes will come.
std::string take_complete_characters(std::string& pending, bool at_end) {
    std::string out;
    const std::string_view bytes = pending;
    size_t pos = 0;
    while (pos < bytes.size()) {
        int bad_length = 0;
        const int length = utf8_char_length(bytes.substr(pos), &bad_length);
        if (length > 0) {
            out.append(bytes.substr(pos, length));
            pos += length;
        } else if (length < 0) {
            out.append(kReplacementUtf8);
            pos += bad_length;
        } else if (at_end) {
            out.append(kReplacementUtf8);  // the stream stopped mid-character
            pos = bytes.size();
        } else {
            break;  // wait for the rest of this character
        }
    }
    pending.erase(0, pos);
    return out;
}

}  // namespace

std::string StreamDecoder::push(TokenId id) {
    pending_ += tokenizer_.token_to_bytes(id, render_special_);
    return take_complete_characters(pending_, /*at_end=*/false);
}

std::string StreamDecoder::flush() {
    return take_complete_characters(pending_, /*at_end=*/true);
}

}  // namespace servelab
