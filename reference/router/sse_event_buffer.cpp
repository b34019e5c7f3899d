// sse_event_buffer.cpp — see sse_event_buffer.h.
#include "reference/router/sse_event_buffer.h"

namespace servelab {

bool SseEventBuffer::append(std::string_view chunk, std::string& complete) {
    pending_.append(chunk);
    // A "\n\n" may straddle the old and the new bytes: start one byte back.
    const size_t from = scanned_ > 0 ? scanned_ - 1 : 0;
    if (pending_.find("\n\n", from) == std::string::npos) {
        scanned_ = pending_.size();
        return pending_.size() <= max_event_bytes_;
    }
    // There is one in the new bytes, so the backward search for the last
    // one stops there too: neither search reads the old bytes.
    const size_t cut = pending_.rfind("\n\n") + 2;
    const std::string_view events(pending_.data(), cut);
    constexpr std::string_view kDone = "data: [DONE]\n\n";
    ended_with_done_ =
        events.size() >= kDone.size() && events.substr(events.size() - kDone.size()) == kDone &&
        (events.size() == kDone.size() || events[events.size() - kDone.size() - 1] == '\n');
    complete.append(events);
    pending_.erase(0, cut);
    scanned_ = pending_.size();
    return pending_.size() <= max_event_bytes_;
}

}  // namespace servelab
