// stop_checker.cpp — see stop_checker.h.
#include "reference/engine/stop_checker.h"

#include <algorithm>

namespace servelab {

const char* finish_reason_name(FinishReason reason) {
    switch (reason) {
        case FinishReason::kStop:
            return "stop";
        case FinishReason::kLength:
            return "length";
        case FinishReason::kCancelled:
            return "cancelled";
    }
    return "?";
}

StopChecker::StopChecker(const Tokenizer& tokenizer, const SamplingParams& params)
    : tokenizer_(tokenizer), params_(params), decoder_(tokenizer) {}

bool StopChecker::is_stop_token(TokenId token) const {
    if (!params_.ignore_eos && tokenizer_.is_end_of_generation(token)) return true;
    return std::find(params_.stop_token_ids.begin(), params_.stop_token_ids.end(), token) !=
           params_.stop_token_ids.end();
}

size_t StopChecker::held_back_length() const {
    size_t longest = 0;
    for (const std::string& stop : params_.stop_strings) {
        for (size_t len = std::min(stop.size() - 1, text_.size() - streamed_); len > longest;
             --len) {
            if (text_.compare(text_.size() - len, len, stop, 0, len) == 0) {
                longest = len;
                break;
            }
        }
    }
    return longest;
}

std::optional<FinishReason> StopChecker::push(TokenId token, std::string& text_out) {
    text_out.clear();
    ++num_generated_;
    if (num_generated_ > params_.min_tokens && is_stop_token(token)) {
        text_out = finish();
        return FinishReason::kStop;
    }
    text_ += decoder_.push(token);

    // Search only where a new match can start: a stop string may begin in
    // the held-back tail, never in text already streamed.
    for (const std::string& stop : params_.stop_strings) {
        const size_t match = text_.find(stop, streamed_);
        if (match != std::string::npos) {
            text_.resize(match);
            stopped_by_string_ = true;
            text_out = text_.substr(streamed_);
            streamed_ = text_.size();
            return FinishReason::kStop;
        }
    }
    const size_t safe_end = text_.size() - held_back_length();
    text_out = text_.substr(streamed_, safe_end - streamed_);
    streamed_ = safe_end;
    if (num_generated_ >= params_.max_tokens) {
        text_out += finish();
        return FinishReason::kLength;
    }
    return std::nullopt;
}

std::string StopChecker::finish() {
    if (!stopped_by_string_) text_ += decoder_.flush();
    std::string rest = text_.substr(streamed_);
    streamed_ = text_.size();
    return rest;
}

}  // namespace servelab
