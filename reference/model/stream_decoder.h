// stream_decoder.h — incremental, UTF-8-safe detokenization for streaming.
//
// Part of the model loader (all labs). A token may end in the middle of a
// multi-byte UTF-8 character (byte-level BPE splits emoji and CJK freely), so
// printing each token's bytes as it arrives would emit broken characters.
#pragma once

#include <string>

#include "reference/model/tokenizer.h"

namespace servelab {

// Incremental, UTF-8-safe detokenization for streaming: push ids one at a
// time and get back only complete UTF-8 characters; bytes of a character
// split across tokens are held until the character is complete.
class StreamDecoder {
  public:
    explicit StreamDecoder(const Tokenizer& tokenizer, bool render_special = false)
        : tokenizer_(tokenizer), render_special_(render_special) {}
    std::string push(TokenId id);
    // The held bytes at end of stream (invalid UTF-8 shown as U+FFFD).
    std::string flush();

  private:
    const Tokenizer& tokenizer_;
    bool render_special_;
    std::string pending_;  // bytes of an incomplete UTF-8 character
};

}  // namespace servelab
