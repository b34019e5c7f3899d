// stop_checker.h — decide when a request is done, and what text may be streamed.
//
// Part of the engine (all labs). A request ends on an end-of-generation token
// (unless ignore_eos), one of its stop token ids (neither before min_tokens),
// max_tokens, or a stop string. A stop string can span tokens, so text that might be the start of
// one is held back from the stream until it is known not to be.
#pragma once

#include <optional>
#include <string>

#include "reference/model/stream_decoder.h"
#include "reference/sampling/sampling_params.h"

namespace servelab {

// kCancelled: the caller cancelled the request (Engine::cancel, Lab 5).
enum class FinishReason { kStop, kLength, kCancelled };
// "stop" / "length" (OpenAI's names) / "cancelled"
const char* finish_reason_name(FinishReason reason);

class StopChecker {
  public:
    StopChecker(const Tokenizer& tokenizer, const SamplingParams& params);

    // Account for one generated token. Returns the reason when the request is
    // finished. `text_out` receives the text that is now safe to stream.
    std::optional<FinishReason> push(TokenId token, std::string& text_out);
    // Called once at the end: returns the held-back text that is not part of
    // a stop string.
    std::string finish();

    // The output text so far (stop strings excluded once matched).
    const std::string& text() const { return text_; }
    int32_t num_generated() const { return num_generated_; }

  private:
    bool is_stop_token(TokenId token) const;
    // Length of the longest suffix of text_ that is a proper prefix of a stop string.
    size_t held_back_length() const;

    const Tokenizer& tokenizer_;
    const SamplingParams& params_;
    StreamDecoder decoder_;
    std::string text_;     // every decoded byte of the output
    size_t streamed_ = 0;  // bytes of text_ already handed out
    int32_t num_generated_ = 0;
    bool stopped_by_string_ = false;
};

}  // namespace servelab
