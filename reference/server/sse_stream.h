// sse_stream.h — one streamed answer: its choices' tokens written as server-sent events.
//
// Part of the serving layer (chapter 11.7, docs/serving.md). A request
// with "stream": true is answered as it is generated, one event per piece
// of text of any choice, in the order the tokens arrive:
//   data: {chunk of choice i}\n\n          text (and logprobs), per token
//   data: {chunk of choice i, a call}\n\n  with tools, once per call it made
//                                          (tool_call_response.h), at its end
//   data: {chunk of choice i, finish}\n\n  once per choice: its finish reason
//   data: {error}\n\n                      instead, for a choice the engine refused
//   data: {usage chunk}\n\n                with stream_options.include_usage
//   data: [DONE]\n\n
// The stream owns what outlives the handler that admitted the request: the
// choices' streams, each choice's logprob text offset (bytes of text sent
// before its next token), and the release. An answer that reaches [DONE]
// counts its request's one outcome there: success, cancelled (the drain
// timed out), or an HTTP 400 (a choice refused). One that does not (the
// client left, even before the first byte) has every choice cancelled at
// its release, and counts the request cancelled.
//
// Threads: the handler's worker thread constructs it and attach()es it to
// the response; cpp-httplib then calls write() and release() on that same
// connection thread, one after the other, after the handler returns. No
// two calls run at once, so the stream has no lock. It meets other threads
// only through thread-safe objects: the RequestStreams (the engine thread
// pushes), the metrics, and the server's in-flight count (an atomic that
// stop() waits on until every answer has written its last byte).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "reference/server/engine_loop.h"
#include "reference/server/model_route.h"
#include "reference/server/openai_responses.h"
#include "reference/server/server_metrics.h"
#include "reference/server/tool_call_response.h"
#include "reference/server/tool_call_stream.h"

namespace httplib {
struct Response;
class DataSink;
}  // namespace httplib

namespace servelab {

class SseStream {
  public:
    // `choices` are the request's streams, choice i at index i. `route` (its
    // metrics and tokenizer), `http_metrics` and `in_flight` must outlive
    // the response.
    // With `tools` that parses_calls(), each choice's text goes through a
    // ToolCallStream.
    SseStream(std::vector<std::shared_ptr<RequestStream>> choices, ResponseHeader header,
              int64_t prompt_tokens, bool include_usage, ModelRoute& route,
              HttpMetrics& http_metrics, std::atomic<int64_t>& in_flight,
              const ToolRequest& tools = {});

    // Makes `stream` the body of `response` (text/event-stream, chunked), and
    // counts it in flight until release(). The response shares ownership.
    static void attach(const std::shared_ptr<SseStream>& stream, httplib::Response& response);

    // The content provider: writes every choice's events as they come until
    // each has ended, then the usage chunk and [DONE]; true then. False as
    // soon as the client is found gone (release() cancels).
    bool write(httplib::DataSink& sink);
    // The releaser, run once however the response ended: cancels every
    // choice unless write() reached the end, and leaves the in-flight count.
    void release();

  private:
    struct Choice {
        std::shared_ptr<RequestStream> stream;
        bool first = true;       // no chunk sent yet (chat's first carries the role)
        bool ended = false;      // its end event has been read
        int64_t text_bytes = 0;  // logprobs' text_offset: bytes of text sent so far
        std::optional<ToolCallStream> tool_calls;  // with tools: holds back what may be a call
    };
    // One event of choice `index`; false when the client is gone.
    bool write_text(size_t index, const StreamEvent& event, httplib::DataSink& sink);
    bool write_end(size_t index, const StreamEvent& event, httplib::DataSink& sink);
    // With tools: the choice's held content and its calls, as chunks; the
    // finish reason to send ("tool_calls" if it called any).
    bool write_tool_calls(size_t index, const char*& finish_reason, httplib::DataSink& sink);
    // Usage, [DONE], and the request's outcome counted.
    void finish(httplib::DataSink& sink);

    std::vector<Choice> choices_;
    const ResponseHeader header_;
    const int64_t prompt_tokens_;
    const bool include_usage_;
    ModelRoute& route_;
    HttpMetrics& http_metrics_;
    std::atomic<int64_t>& in_flight_;
    const ToolRequest tools_;
    const MarkerTokens markers_;  // the format's control-token markers in this vocabulary
    ToolCallIds call_ids_;

    int64_t completion_tokens_ = 0;     // over every choice, for the usage chunk
    int64_t cached_prompt_tokens_ = 0;  // choice 0's: the prompt's, counted once
    size_t num_ended_ = 0;
    bool cut_short_ = false;         // a choice ended "cancelled" (the drain timed out)
    bool failed_ = false;            // the engine refused a choice
    bool outcome_recorded_ = false;  // write() reached the end and counted it
};

}  // namespace servelab
