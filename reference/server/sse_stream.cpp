// sse_stream.cpp — see sse_stream.h.
#include "reference/server/sse_stream.h"

#include <httplib.h>

#include <chrono>
#include <span>
#include <utility>

namespace servelab {
namespace {

std::string sse(const nlohmann::json& chunk) {
    return "data: " + response_text(chunk) + "\n\n";
}

// False when the client is gone (the write failed, or would).
bool send(httplib::DataSink& sink, const std::string& text) {
    return sink.is_writable() && sink.write(text.data(), text.size());
}

}  // namespace

SseStream::SseStream(std::vector<std::shared_ptr<RequestStream>> choices, ResponseHeader header,
                     int64_t prompt_tokens, bool include_usage, ModelRoute& route,
                     HttpMetrics& http_metrics, std::atomic<int64_t>& in_flight,
                     const ToolRequest& tools)
    : header_(std::move(header)),
      prompt_tokens_(prompt_tokens),
      include_usage_(include_usage),
      route_(route),
      http_metrics_(http_metrics),
      in_flight_(in_flight),
      tools_(tools),
      markers_(marker_tokens(tools.format, route.tokenizer)),
      call_ids_(tools.format) {
    for (auto& stream : choices) {
        Choice& choice = choices_.emplace_back();
        choice.stream = std::move(stream);
        if (tools_.parses_calls()) choice.tool_calls.emplace(tools_.format, tools_.max_calls());
    }
}

void SseStream::attach(const std::shared_ptr<SseStream>& stream, httplib::Response& response) {
    ++stream->in_flight_;  // the answer outlives the handler that admitted it
    response.set_chunked_content_provider(
        "text/event-stream",
        // Runs on this connection's thread until every choice has ended (or
        // the client is gone).
        [stream](size_t, httplib::DataSink& sink) { return stream->write(sink); },
        // Runs however the response ended, even when the client left before
        // the provider ever ran (the headers could not be written).
        [stream](bool) { stream->release(); });
}

bool SseStream::write(httplib::DataSink& sink) {
    // Short waits, so a client that left is noticed quickly.
    const auto wait = std::chrono::milliseconds(choices_.size() > 1 ? 5 : 100);
    while (num_ended_ < choices_.size()) {
        for (size_t i = 0; i < choices_.size(); ++i) {
            if (choices_[i].ended) continue;
            StreamEvent event;
            if (!choices_[i].stream->next(event, wait)) {
                if (!sink.is_writable()) return false;  // the client left: release() cancels
                continue;
            }
            const bool written = event.kind == StreamEvent::Kind::kText ? write_text(i, event, sink)
                                                                        : write_end(i, event, sink);
            if (!written) return false;  // the client left: release() cancels
        }
    }
    finish(sink);
    return true;
}

bool SseStream::write_text(size_t index, const StreamEvent& event, httplib::DataSink& sink) {
    Choice& choice = choices_[index];
    std::string text = event.text;
    if (choice.tool_calls) {
        text = choice.tool_calls->push(text_with_marker(event.token, event.text, markers_));
        if (text.empty() && !event.logprobs) return true;  // held back: nothing to send yet
    }
    nlohmann::json logprobs = nullptr;
    if (event.logprobs) {
        logprobs = logprobs_json(header_.chat, std::span(&*event.logprobs, 1), route_.tokenizer,
                                 choice.text_bytes);
        choice.text_bytes += int64_t(route_.tokenizer.token_to_bytes(event.token).size());
    }
    if (!send(sink,
              sse(stream_chunk(header_, int(index), text, nullptr, choice.first, logprobs)))) {
        return false;
    }
    choice.first = false;
    return true;
}

bool SseStream::write_end(size_t index, const StreamEvent& event, httplib::DataSink& sink) {
    Choice& choice = choices_[index];
    choice.ended = true;
    ++num_ended_;
    if (!event.result) {  // the engine refused it: an error event, then the end
        failed_ = true;
        // Written or not, go on: a client that left is noticed by the next write or wait.
        send(sink, sse(error_body({400, "invalid_request_error", event.error, "", ""})));
        return true;
    }
    if (event.result->finish_reason == FinishReason::kCancelled) {
        cut_short_ = true;
    } else {
        route_.metrics.record(*event.result);
    }
    completion_tokens_ += int64_t(event.result->tokens.size());
    if (index == 0) cached_prompt_tokens_ = event.result->cached_prompt_tokens;
    const char* finish_reason = finish_reason_name(event.result->finish_reason);
    if (choice.tool_calls && !write_tool_calls(index, finish_reason, sink)) return false;
    return send(sink, sse(stream_chunk(header_, int(index), "", finish_reason, choice.first)));
}

bool SseStream::write_tool_calls(size_t index, const char*& finish_reason,
                                 httplib::DataSink& sink) {
    Choice& choice = choices_[index];
    const ToolCallStream::End end = choice.tool_calls->finish();
    if (!end.content.empty()) {
        if (!send(sink,
                  sse(stream_chunk(header_, int(index), end.content, nullptr, choice.first)))) {
            return false;
        }
        choice.first = false;
    }
    const nlohmann::json calls = tool_calls_json(end.calls, call_ids_);
    for (size_t i = 0; i < calls.size(); ++i) {
        if (!send(sink,
                  sse(tool_call_chunk(header_, int(index), int(i), calls[i], choice.first)))) {
            return false;
        }
        choice.first = false;
    }
    if (!end.calls.empty()) finish_reason = "tool_calls";
    return true;
}

void SseStream::finish(httplib::DataSink& sink) {
    if (include_usage_) {
        send(sink,
             sse(usage_chunk(header_, prompt_tokens_, completion_tokens_, cached_prompt_tokens_)));
    }
    send(sink, "data: [DONE]\n\n");
    sink.done();
    outcome_recorded_ = true;
    if (failed_) {
        http_metrics_.record_http_error(400);
    } else if (cut_short_) {
        route_.metrics.record_request_cancelled();
    } else {
        route_.metrics.record_request_success();
    }
}

void SseStream::release() {
    if (!outcome_recorded_) {
        for (Choice& choice : choices_) choice.stream->cancel();
        route_.metrics.record_request_cancelled();
    }
    --in_flight_;
}

}  // namespace servelab
