// engine_loop_test.cpp — many threads feeding one engine loop (the serving layer).
//
// The server's HTTP handlers run on a thread pool and hand requests to one
// engine thread (reference/server/engine_loop.h). Checked here without HTTP:
//   concurrent submitters each get exactly the tokens their request gets
//     alone (greedy and seeded sampling), whatever else is batched with it;
//   a cancelled stream ends with finish reason "cancelled" and its blocks
//     come back;
//   a full waiting queue refuses at once (QueueFull), and stop() drains
//     every admitted request to its end, or cancels it at the drain deadline;
//   a group (an HTTP request's n choices) is admitted whole or not at all;
//   the gauges say what runs while a step is still computing;
//   two loops driven by one thread (two served models) take turns: while
//     one has work, the other, however saturated, steps at most once
//     between its steps, and each answers as it does alone.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cmath>

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

#include "reference/server/engine_loop.h"
#include "tests/unit/engine_test_util.h"

namespace servelab {
namespace {

class EngineLoopTest : public test::TinyModelTest {
  protected:
    void SetUp() override {
        TinyModelOptions options;
        options.num_layers = 2;
        load_tiny_model(options);
    }
    // Reads a stream to its end.
    static StreamEvent read_to_end(RequestStream& stream, std::string& text) {
        StreamEvent event;
        while (true) {
            if (!stream.next(event, std::chrono::milliseconds(30000))) {
                ADD_FAILURE() << "no event for 30 s";
                return event;
            }
            if (event.kind == StreamEvent::Kind::kEnd) return event;
            text += event.text;
        }
    }
};

// The loop on a thread of its own, as the server's main thread would run it.
class LoopThread {
  public:
    explicit LoopThread(EngineLoop& loop) : loop_(loop), thread_([&loop] { loop.run(); }) {}
    ~LoopThread() { finish(); }
    // stop(), then wait for the drain.
    void finish() {
        loop_.stop();
        if (thread_.joinable()) thread_.join();
    }

  private:
    EngineLoop& loop_;
    std::thread thread_;
};

TEST_F(EngineLoopTest, ConcurrentSubmittersGetTheTokensOfTheirRequestAlone) {
    EngineConfig config;
    config.scheduler.max_num_batched_tokens = 32;
    Engine engine(*model_, *runner_, config);
    EngineLoop loop(engine, {});
    LoopThread engine_thread(loop);
    const int num_clients = 16;
    std::vector<std::vector<TokenId>> prompts;
    std::vector<SamplingParams> params(num_clients);
    for (int i = 0; i < num_clients; ++i) {
        prompts.push_back(random_prompt(random_.integer(2, 30)));
        params[size_t(i)].max_tokens = int32_t(random_.integer(1, 12));
        params[size_t(i)].temperature = i % 2 == 0 ? 0.0f : 0.9f;
        params[size_t(i)].seed = uint64_t(100 + i);
    }
    std::vector<GenerationResult> results(num_clients);
    std::vector<std::string> streamed(num_clients);
    std::vector<std::thread> clients;
    for (int i = 0; i < num_clients; ++i) {
        clients.emplace_back([&, i] {
            std::shared_ptr<RequestStream> stream =
                loop.submit(prompts[size_t(i)], params[size_t(i)]);
            StreamEvent end = read_to_end(*stream, streamed[size_t(i)]);
            ASSERT_TRUE(end.result.has_value()) << end.error;
            results[size_t(i)] = *end.result;
        });
    }
    for (std::thread& client : clients) client.join();
    for (int i = 0; i < num_clients; ++i) {
        const GenerationResult alone = solo(prompts[size_t(i)], params[size_t(i)]);
        EXPECT_EQ(results[size_t(i)].tokens, alone.tokens)
            << "client " << i << "; " << random_.trace();
        EXPECT_EQ(streamed[size_t(i)], results[size_t(i)].text) << "client " << i;
    }
}

TEST_F(EngineLoopTest, ACancelledStreamEndsAsCancelledAndFreesItsBlocks) {
    Engine engine(*model_, *runner_, EngineConfig{});
    EngineLoop loop(engine, {});
    LoopThread engine_thread(loop);
    SamplingParams params;
    params.max_tokens = 200;
    params.ignore_eos = true;
    std::shared_ptr<RequestStream> stream = loop.submit(random_prompt(20), params);
    StreamEvent event;
    int texts = 0;
    while (texts < 2 && stream->next(event, std::chrono::milliseconds(30000))) {
        ASSERT_EQ(event.kind, StreamEvent::Kind::kText);
        ++texts;
    }
    stream->cancel();
    std::string rest;
    StreamEvent end = read_to_end(*stream, rest);
    ASSERT_TRUE(end.result.has_value());
    EXPECT_EQ(end.result->finish_reason, FinishReason::kCancelled);
    EXPECT_LT(end.result->tokens.size(), 200u);
    engine_thread.finish();
    EXPECT_EQ(loop.stats().total_cancelled, 1);
    EXPECT_EQ(loop.stats().num_running, 0);
}

TEST_F(EngineLoopTest, AFullQueueRefusesAtOnceAndStopDrainsTheAdmitted) {
    EngineConfig config;
    config.scheduler.max_num_seqs = 1;  // one runs, the others wait
    Engine engine(*model_, *runner_, config);
    EngineLoop loop(engine, {.max_waiting = 3});
    LoopThread engine_thread(loop);
    SamplingParams params;
    params.max_tokens = 40;
    params.ignore_eos = true;
    std::vector<std::shared_ptr<RequestStream>> admitted;
    bool refused = false;
    for (int i = 0; i < 20 && !refused; ++i) {
        try {
            admitted.push_back(loop.submit(random_prompt(8), params));
        } catch (const QueueFull& e) {
            refused = true;
            EXPECT_NE(std::string(e.what()).find("at capacity"), std::string::npos) << e.what();
        }
    }
    EXPECT_TRUE(refused) << "20 submissions, max_waiting 3, one running at a time";
    loop.stop();
    EXPECT_THROW(loop.submit(random_prompt(4), params), QueueFull);
    for (auto& stream : admitted) {
        std::string text;
        StreamEvent end = read_to_end(*stream, text);
        ASSERT_TRUE(end.result.has_value()) << end.error;
        EXPECT_EQ(end.result->tokens.size(), 40u) << "stop() lets admitted requests finish";
    }
}

TEST_F(EngineLoopTest, AGroupIsAdmittedWholeOrNotAtAllAndComputesItsPromptOnce) {
    Engine engine(*model_, *runner_, EngineConfig{});
    EngineLoop loop(engine, {.max_waiting = 4});
    SamplingParams params;
    params.max_tokens = 3;
    params.temperature = 0.8f;
    params.seed = 7;
    const std::vector<TokenId> prompt = random_prompt(6);
    // The loop is not running yet: submissions stay queued and count as waiting.
    const auto three = loop.submit_group(prompt, params, 3);
    EXPECT_EQ(three.size(), 3u);
    EXPECT_EQ(loop.stats().num_waiting, 3);
    EXPECT_THROW(loop.submit_group(prompt, params, 2), QueueFull)
        << "2 more choices do not fit under max_waiting 4 beside 3";
    EXPECT_EQ(loop.stats().num_waiting, 3)
        << "a refused group must queue none of its choices (it was admitted in part)";
    const auto one = loop.submit_group(random_prompt(5), params, 1);
    EXPECT_EQ(loop.stats().num_waiting, 4);
    LoopThread engine_thread(loop);
    for (size_t i = 0; i < three.size(); ++i) {
        std::string text;
        const StreamEvent end = read_to_end(*three[i], text);
        ASSERT_TRUE(end.result.has_value()) << end.error;
        EXPECT_EQ(end.result->tokens, solo(prompt, completion_params(params, int(i))).tokens)
            << "choice " << i << " must sample as a lone request seeded seed + " << i;
        EXPECT_EQ(text, end.result->text) << "choice " << i << " streams its own tokens";
    }
    std::string text;
    EXPECT_TRUE(read_to_end(*one.front(), text).result.has_value());
    engine_thread.finish();
    EXPECT_EQ(loop.stats().total_finished, 4);
    EXPECT_EQ(loop.stats().num_waiting, 0);
    EXPECT_EQ(loop.stats().total_prefill_tokens, 6 + 5)
        << "the 3 choices' prompt must be computed once (forked), not 3 times";
}

// The order in which `groups` (each a request's streams) end, stepping the
// loop on this thread: a group has ended when all its choices have.
std::vector<int> end_order(EngineLoop& loop,
                           const std::vector<std::vector<std::shared_ptr<RequestStream>>>& groups) {
    std::vector<int> order;
    std::vector<size_t> ended(groups.size(), 0);
    for (int turn = 0; turn < 1000 && order.size() < groups.size(); ++turn) {
        loop.turn();
        for (size_t g = 0; g < groups.size(); ++g) {
            for (const auto& stream : groups[g]) {
                StreamEvent event;
                while (stream->next(event, std::chrono::milliseconds(0))) {
                    if (event.kind == StreamEvent::Kind::kEnd) {
                        EXPECT_TRUE(event.result.has_value()) << event.error;
                        if (++ended[g] == groups[g].size()) order.push_back(int(g));
                    }
                }
            }
        }
    }
    return order;
}

TEST_F(EngineLoopTest, ASubmissionsPriorityReachesThePriorityScheduler) {
    for (const SchedulingPolicy policy : {SchedulingPolicy::kPriority, SchedulingPolicy::kFcfs}) {
        EngineConfig config;
        config.scheduler.policy = policy;
        config.scheduler.max_num_seqs = 1;  // one at a time: admission order is end order
        Engine engine(*model_, *runner_, config);
        EngineLoop loop(engine, {});
        EXPECT_EQ(loop.scheduling_policy(), policy);
        SamplingParams params;
        params.max_tokens = 3;
        params.ignore_eos = true;
        // Queued together before the first turn: the scheduler sees all three waiting.
        const std::vector<std::vector<std::shared_ptr<RequestStream>>> groups = {
            loop.submit_group(random_prompt(4), params, 1, /*priority=*/0),
            loop.submit_group(random_prompt(4), params, 1, /*priority=*/5),
            loop.submit_group(random_prompt(4), params, 2, /*priority=*/-5)};
        const std::vector<int> order = end_order(loop, groups);
        if (policy == SchedulingPolicy::kPriority) {
            EXPECT_EQ(order, (std::vector<int>{2, 0, 1}))
                << "smaller priority first, its two choices together, then 0, then 5";
        } else {
            EXPECT_EQ(order, (std::vector<int>{0, 1, 2})) << "FCFS ignores priorities";
        }
    }
}

// A runner that holds every forward pass until opened, so that a step is
// still computing when the gauges are read.
class GatedRunner : public StepRunner {
  public:
    explicit GatedRunner(StepRunner& inner) : inner_(inner) {}
    StepResult run_step(const StepBatch& batch, PagedKvCache& cache) override {
        std::unique_lock lock(mutex_);
        entered_ = true;
        changed_.notify_all();
        changed_.wait(lock, [&] { return open_; });
        lock.unlock();
        return inner_.run_step(batch, cache);
    }
    int64_t num_tokens_computed() const override { return inner_.num_tokens_computed(); }
    bool wait_entered(std::chrono::milliseconds timeout) {
        std::unique_lock lock(mutex_);
        return changed_.wait_for(lock, timeout, [&] { return entered_; });
    }
    void open() {
        std::lock_guard lock(mutex_);
        open_ = true;
        changed_.notify_all();
    }

  private:
    StepRunner& inner_;
    std::mutex mutex_;
    std::condition_variable changed_;
    bool entered_ = false;
    bool open_ = false;
};

TEST_F(EngineLoopTest, TheDrainDeadlineCancelsWhatStillRuns) {
    GatedRunner gated(*runner_);
    Engine engine(*model_, gated, EngineConfig{});
    EngineLoop loop(engine, {});
    SamplingParams params;
    params.max_tokens = int32_t(model_->config.context_length - 8);
    params.ignore_eos = true;
    std::shared_ptr<RequestStream> stream = loop.submit(random_prompt(4), params);
    LoopThread engine_thread(loop);
    // The request is inside its first step when the drain's deadline passes.
    ASSERT_TRUE(gated.wait_entered(std::chrono::milliseconds(30000)));
    loop.stop(std::chrono::milliseconds(0));
    loop.stop();  // a later stop without a deadline must not lift the first one's
    gated.open();
    std::string text;
    const StreamEvent end = read_to_end(*stream, text);
    ASSERT_TRUE(end.result.has_value()) << end.error;
    EXPECT_EQ(end.result->finish_reason, FinishReason::kCancelled)
        << "a request still running at the drain deadline must be cancelled, not run to its "
           "end (its "
        << params.max_tokens << " tokens)";
    EXPECT_LT(end.result->tokens.size(), size_t(params.max_tokens));
    engine_thread.finish();
    EXPECT_EQ(loop.stats().total_cancelled, 1);
    EXPECT_EQ(loop.stats().total_finished, 0);
}

TEST_F(EngineLoopTest, GaugesSayWhatRunsWhileTheStepComputes) {
    GatedRunner gated(*runner_);
    Engine engine(*model_, gated, EngineConfig{});
    EngineLoop loop(engine, {});
    LoopThread engine_thread(loop);
    SamplingParams params;
    params.max_tokens = 2;
    std::shared_ptr<RequestStream> a = loop.submit(random_prompt(30), params);
    std::shared_ptr<RequestStream> b = loop.submit(random_prompt(20), params);
    ASSERT_TRUE(gated.wait_entered(std::chrono::milliseconds(30000)));
    // The first step is inside its forward pass: no step has ended yet.
    const EngineLoopStats during = loop.stats();
    EXPECT_EQ(during.total_steps, 0);
    EXPECT_GE(during.num_running, 1)
        << "num_running read while the first step computes must count its requests, not "
           "wait for the step to end (the gauges are refreshed only when a step ends)";
    EXPECT_EQ(during.num_running + during.num_waiting, 2);
    EXPECT_GT(during.num_kv_blocks_used, 0);
    gated.open();
    std::string text;
    EXPECT_TRUE(read_to_end(*a, text).result.has_value());
    EXPECT_TRUE(read_to_end(*b, text).result.has_value());
    engine_thread.finish();
    EXPECT_EQ(loop.stats().num_running, 0);
}

TEST_F(EngineLoopTest, BadParametersEndTheStreamWithTheEnginesError) {
    Engine engine(*model_, *runner_, EngineConfig{});
    EngineLoop loop(engine, {});
    LoopThread engine_thread(loop);
    SamplingParams params;
    params.max_tokens = 4;
    std::vector<TokenId> prompt = {TokenId(model_->config.vocab_size + 5)};
    std::shared_ptr<RequestStream> stream = loop.submit(prompt, params);
    std::string text;
    StreamEvent end = read_to_end(*stream, text);
    EXPECT_FALSE(end.result.has_value());
    EXPECT_FALSE(end.error.empty());
}

// log softmax(logits / T)[token] for the model's logits after `context`,
// from a forward pass without any cache: independent of the engine's
// paged, batched path.
double model_logprob(ModelRunner& runner, std::span<const TokenId> context, TokenId token,
                     float temperature) {
    const std::vector<float> logits = runner.forward(StepInput{context, 0});
    const double scale = temperature > 0.0f ? double(temperature) : 1.0;
    double max_logit = -INFINITY;
    for (const float l : logits) max_logit = std::max(max_logit, double(l) / scale);
    double sum = 0.0;
    for (const float l : logits) sum += std::exp(double(l) / scale - max_logit);
    return double(logits[size_t(token)]) / scale - max_logit - std::log(sum);
}

TEST_F(EngineLoopTest, LogprobsStreamWithTheirTokensAndMatchTheModelsDistribution) {
    EngineConfig config;
    config.scheduler.max_num_batched_tokens = 16;  // the prompts are chunked
    Engine engine(*model_, *runner_, config);
    EngineLoop loop(engine, {});
    LoopThread engine_thread(loop);
    // Its own runner (buffers), as the engine thread uses runner_ meanwhile.
    ModelRunner checker(model_->config, model_->weights);
    const std::vector<TokenId> prompt = random_prompt(random_.integer(3, 40));
    for (const float temperature : {0.0f, 0.7f}) {
        SamplingParams params;
        params.max_tokens = 5;
        params.temperature = temperature;
        params.seed = uint64_t(random_.integer(0, 1000));
        params.logprobs = 3;
        // Two choices: the second forks the first's prompt and samples its
        // first token from the same logits.
        const auto streams = loop.submit_group(prompt, params, 2);
        // A request without logprobs in the same steps gets none.
        SamplingParams plain = params;
        plain.logprobs = -1;
        const auto other = loop.submit(random_prompt(7), plain);
        for (size_t choice = 0; choice < streams.size(); ++choice) {
            std::vector<StreamEvent> events;
            StreamEvent event;
            while (streams[choice]->next(event, std::chrono::milliseconds(30000)) &&
                   event.kind == StreamEvent::Kind::kText) {
                events.push_back(event);
            }
            ASSERT_TRUE(event.result.has_value()) << event.error;
            const GenerationResult& result = *event.result;
            ASSERT_EQ(result.logprobs.size(), result.tokens.size());
            ASSERT_EQ(events.size(), result.tokens.size());
            std::vector<TokenId> context = prompt;
            for (size_t i = 0; i < result.tokens.size(); ++i) {
                const std::string where = fmt::format("temperature {}, choice {}, token {}; {}",
                                                      temperature, choice, i, random_.trace());
                ASSERT_TRUE(events[i].logprobs.has_value()) << "each streamed token carries its "
                                                               "logprobs; "
                                                            << where;
                const SampledLogprobs& lp = result.logprobs[i];
                EXPECT_EQ(lp.chosen.token, result.tokens[i]) << where;
                EXPECT_EQ(events[i].logprobs->chosen.token, result.tokens[i]) << where;
                EXPECT_NEAR(lp.chosen.logprob,
                            model_logprob(checker, context, result.tokens[i], temperature), 1e-3)
                    << where;
                ASSERT_EQ(lp.top.size(), 3u) << where;
                EXPECT_GE(lp.top[0].logprob, lp.chosen.logprob) << where;
                if (temperature == 0.0f) EXPECT_EQ(lp.top[0].token, lp.chosen.token) << where;
                context.push_back(result.tokens[i]);
            }
        }
        std::string text;
        const StreamEvent end = read_to_end(*other, text);
        ASSERT_TRUE(end.result.has_value());
        EXPECT_TRUE(end.result->logprobs.empty());
    }
}

// A runner that calls `before_step` on the engine thread before each forward
// pass: what the other loop has done at that instant, read without timing.
class StepWatchingRunner : public StepRunner {
  public:
    StepWatchingRunner(StepRunner& inner, std::function<void()> before_step)
        : inner_(inner), before_step_(std::move(before_step)) {}
    StepResult run_step(const StepBatch& batch, PagedKvCache& cache) override {
        before_step_();
        return inner_.run_step(batch, cache);
    }
    int64_t num_tokens_computed() const override { return inner_.num_tokens_computed(); }

  private:
    StepRunner& inner_;
    std::function<void()> before_step_;
};

TEST_F(EngineLoopTest, TwoLoopsOnOneThreadTakeTurnsSoASaturatedModelCannotStallTheOther) {
    ModelRunner runner_b(model_->config, model_->weights);
    Engine engine_a(*model_, *runner_, EngineConfig{});
    // A's step count as each of B's steps begins, recorded on the driver
    // thread, which is the thread that counts A's steps: the turns are read
    // in the order they happened, however busy the machine.
    std::vector<int64_t> a_steps_at_b_step;
    EngineLoop* loop_a_of_b = nullptr;
    StepWatchingRunner watched_b(
        runner_b, [&] { a_steps_at_b_step.push_back(loop_a_of_b->stats().total_steps); });
    Engine engine_b(*model_, watched_b, EngineConfig{});
    const auto signal = std::make_shared<LoopSignal>();
    EngineLoop loop_a(engine_a, {}, signal);
    EngineLoop loop_b(engine_b, {}, signal);
    loop_a_of_b = &loop_a;
    std::thread driver([&] { run_engine_loops({&loop_a, &loop_b}); });

    // Saturate A: requests that need hundreds of steps.
    SamplingParams long_params;
    long_params.max_tokens = 300;
    long_params.ignore_eos = true;
    std::vector<std::shared_ptr<RequestStream>> saturating;
    for (int i = 0; i < 6; ++i) saturating.push_back(loop_a.submit(random_prompt(24), long_params));
    StreamEvent first;
    ASSERT_TRUE(saturating.front()->next(first, std::chrono::milliseconds(30000)));

    SamplingParams params;
    params.max_tokens = 24;
    params.ignore_eos = true;
    const std::vector<TokenId> prompt = random_prompt(12);
    std::string text;
    const StreamEvent end = read_to_end(*loop_b.submit(prompt, params), text);
    ASSERT_TRUE(end.result.has_value()) << end.error;
    EXPECT_EQ(end.result->tokens, solo(prompt, params).tokens) << random_.trace();
    EXPECT_EQ(loop_a.stats().total_finished, 0) << "A's requests should still be running";

    for (auto& stream : saturating) stream->cancel();
    loop_a.stop();
    loop_b.stop();
    driver.join();
    EXPECT_EQ(loop_a.stats().total_cancelled, 6);
    // Turns: between two of B's steps, A steps at most once (the driver
    // steps each loop with work once per round).
    ASSERT_GE(a_steps_at_b_step.size(), 23u) << "B's 24 tokens need a prefill and 23 decodes";
    for (size_t i = 1; i < a_steps_at_b_step.size(); ++i) {
        const int64_t a_between = a_steps_at_b_step[i] - a_steps_at_b_step[i - 1];
        EXPECT_LE(a_between, 1) << "the saturated loop took " << a_between
                                << " steps between B's steps " << i - 1 << " and " << i
                                << ": the driver must step each loop with work once per round";
    }
}

TEST_F(EngineLoopTest, LoopsDrivenTogetherMustShareTheirSignal) {
    Engine engine_a(*model_, *runner_, EngineConfig{});
    Engine engine_b(*model_, *runner_, EngineConfig{});
    EngineLoop loop_a(engine_a, {});
    EngineLoop loop_b(engine_b, {});
    EXPECT_THROW(run_engine_loops({&loop_a, &loop_b}), Error);
}

}  // namespace
}  // namespace servelab
