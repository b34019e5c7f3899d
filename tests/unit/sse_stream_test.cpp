// sse_stream_test.cpp — a streamed answer's events, offsets and release (the serving layer).
//
// reference/server/sse_stream.h without HTTP: a real engine loop feeds the
// streams, and the sink is a string. Checked here:
//   every event is one "data: …\n\n"; each choice's chunks carry their own
//     index and logprob text offsets (starting at 0, never another
//     choice's), then one chunk with its finish reason; the usage chunk
//     counts every choice's tokens, and [DONE] comes last;
//   a client gone before the first byte, or in the middle, has every
//     choice cancelled at release, and the request counted cancelled;
//   attach() counts the answer in flight until the response releases it.
#include <gtest/gtest.h>

#include <httplib.h>

#include <nlohmann/json.hpp>

#include <atomic>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "reference/server/model_route.h"
#include "reference/server/sse_stream.h"
#include "tests/unit/engine_test_util.h"

namespace servelab {
namespace {

class SseStreamTest : public test::TinyModelTest {
  protected:
    void SetUp() override {
        TinyModelOptions options;
        options.num_layers = 2;
        load_tiny_model(options);
        engine_ = std::make_unique<Engine>(*model_, *runner_, EngineConfig{});
        loop_ = std::make_unique<EngineLoop>(*engine_, EngineLoopConfig{});
        route_ = std::make_unique<ModelRoute>(ServedModel{"tiny", model_.get(), loop_.get()},
                                              RequestBuilderOptions{});
        engine_thread_ = std::thread([this] { loop_->run(); });
    }
    void TearDown() override {
        loop_->stop();
        engine_thread_.join();
    }
    std::shared_ptr<SseStream> stream_of(int num_choices, bool include_usage) {
        SamplingParams params;
        params.max_tokens = 6;
        params.temperature = 0.8f;
        params.seed = uint64_t(random_.integer(0, 1000));
        params.logprobs = 1;
        params.ignore_eos = true;  // every choice sends text before its end
        prompt_ = random_prompt(random_.integer(2, 20));
        streams_ = loop_->submit_group(prompt_, params, num_choices);
        const ResponseHeader header{"cmpl-0", 0, "tiny", false};
        return std::make_shared<SseStream>(streams_, header, int64_t(prompt_.size()), include_usage,
                                           *route_, http_metrics_, in_flight_);
    }
    // The model's requests counted as `outcome` ("success", "cancelled").
    std::string requests_counted(const std::string& outcome) const {
        MetricFamilies families;
        route_->metrics.collect(loop_->stats(), model_label("tiny"), families);
        const std::string text = families.render();
        const std::string name = "servelab_request_" + outcome + "_total{model=\"tiny\"} ";
        const size_t at = text.find(name);
        if (at == std::string::npos) return "absent";
        return text.substr(at + name.size(), text.find('\n', at) - at - name.size());
    }

    std::unique_ptr<Engine> engine_;
    std::unique_ptr<EngineLoop> loop_;
    std::unique_ptr<ModelRoute> route_;
    std::thread engine_thread_;
    HttpMetrics http_metrics_;
    std::atomic<int64_t> in_flight_{0};
    std::vector<TokenId> prompt_;
    std::vector<std::shared_ptr<RequestStream>> streams_;
};

// A sink that keeps what is written, and reports the client gone after
// `writable_writes` writes.
struct StringSink {
    explicit StringSink(int writable_writes = 1 << 30) : writes_left(writable_writes) {
        sink.write = [this](const char* data, size_t size) {
            if (writes_left <= 0) return false;
            --writes_left;
            text.append(data, size);
            return true;
        };
        sink.is_writable = [this] { return writes_left > 0; };
        sink.done = [this] { done = true; };
    }
    httplib::DataSink sink;
    std::string text;
    int writes_left;
    bool done = false;
};

// The events' payloads, in order; every event must be "data: …\n\n".
std::vector<std::string> events_of(const std::string& text) {
    std::vector<std::string> events;
    size_t at = 0;
    while (at < text.size()) {
        const size_t end = text.find("\n\n", at);
        EXPECT_NE(end, std::string::npos) << "an event without its blank line: " << text.substr(at);
        if (end == std::string::npos) break;
        EXPECT_EQ(text.compare(at, 6, "data: "), 0) << text.substr(at, end - at);
        events.push_back(text.substr(at + 6, end - at - 6));
        at = end + 2;
    }
    return events;
}

TEST_F(SseStreamTest, EachChoiceStreamsItsOwnOffsetsThenItsEndThenUsageAndDone) {
    StringSink out;
    {
        httplib::Response response;
        const std::shared_ptr<SseStream> stream = stream_of(3, /*include_usage=*/true);
        SseStream::attach(stream, response);
        ASSERT_TRUE(stream->write(out.sink));  // as the library calls the provider
        EXPECT_TRUE(out.done);
    }  // the releaser runs
    EXPECT_EQ(in_flight_.load(), 0);
    const std::vector<std::string> events = events_of(out.text);
    ASSERT_GE(events.size(), 2u);
    EXPECT_EQ(events.back(), "[DONE]");
    std::map<int, std::vector<int64_t>> offsets;  // per choice, in order
    std::map<int, int> ends;
    int64_t tokens = 0;
    for (size_t e = 0; e + 2 < events.size(); ++e) {
        const nlohmann::json chunk = nlohmann::json::parse(events[e]);
        const nlohmann::json& choice = chunk.at("choices").at(0);
        const int index = choice.at("index").get<int>();
        ASSERT_EQ(ends[index], 0) << "choice " << index << " sent a chunk after its end";
        if (!choice.at("finish_reason").is_null()) {
            ++ends[index];
            continue;
        }
        for (const auto& offset : choice.at("logprobs").at("text_offset")) {
            offsets[index].push_back(offset.get<int64_t>());
        }
        ++tokens;
    }
    for (int index = 0; index < 3; ++index) {
        EXPECT_EQ(ends[index], 1) << "choice " << index;
        ASSERT_FALSE(offsets[index].empty()) << "choice " << index;
        EXPECT_EQ(offsets[index][0], 0) << "choice " << index << ": offsets are per choice";
        for (size_t k = 1; k < offsets[index].size(); ++k) {
            EXPECT_GE(offsets[index][k], offsets[index][k - 1]) << "choice " << index;
        }
    }
    const nlohmann::json usage = nlohmann::json::parse(events[events.size() - 2]);
    EXPECT_EQ(usage.at("usage").at("completion_tokens").get<int64_t>(), tokens);
    EXPECT_EQ(usage.at("usage").at("prompt_tokens").get<int64_t>(), int64_t(prompt_.size()));
    EXPECT_EQ(requests_counted("success"), "1");
    EXPECT_EQ(requests_counted("cancelled"), "0");
    for (const auto& choice : streams_) EXPECT_FALSE(choice->cancelled());
}

TEST_F(SseStreamTest, AClientGoneBeforeTheFirstByteHasEveryChoiceCancelledAtRelease) {
    {
        httplib::Response response;
        SseStream::attach(stream_of(2, false), response);
        EXPECT_EQ(in_flight_.load(), 1) << "an attached answer is in flight until released";
    }  // the response ends unwritten: the library runs the releaser
    EXPECT_EQ(in_flight_.load(), 0);
    for (const auto& choice : streams_) EXPECT_TRUE(choice->cancelled());
    EXPECT_EQ(requests_counted("cancelled"), "1");
    EXPECT_EQ(requests_counted("success"), "0");
}

TEST_F(SseStreamTest, AClientGoneMidStreamStopsTheWriteAndIsCancelledAtRelease) {
    {
        httplib::Response response;
        const std::shared_ptr<SseStream> stream = stream_of(2, false);
        SseStream::attach(stream, response);
        StringSink out(/*writable_writes=*/2);
        EXPECT_FALSE(stream->write(out.sink)) << "the client left: write() must say so";
        EXPECT_FALSE(out.done);
    }  // the releaser runs
    EXPECT_EQ(in_flight_.load(), 0);
    for (const auto& choice : streams_) EXPECT_TRUE(choice->cancelled());
    EXPECT_EQ(requests_counted("cancelled"), "1");
    EXPECT_EQ(requests_counted("success"), "0");
}

}  // namespace
}  // namespace servelab
