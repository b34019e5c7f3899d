// constrained_engine_test.cpp — constrained decoding inside the continuously batched engine
// (Lab 12).
//
// Chapter 11.6. A request with a grammar (SamplingParams::grammar) must only
// ever produce a sentence of it (or a prefix, when max_tokens cuts it), and
// stop with "stop" when the sentence is complete and nothing may extend it.
// The outputs are checked against std::regex, an independent matcher of the
// same patterns. Everywhere the engine samples: mixed batches (a constrained
// request's tokens do not depend on its neighbours), n completions (each its
// own matcher), speculative decoding (drafts cut to the grammar, verified
// under per-position masks: greedy output unchanged), and preemption by
// recompute (the matcher keeps its place).
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "reference/constrained/grammar_cache.h"
#include "reference/engine/engine.h"
#include "reference/speculative/model_drafter.h"
#include "tests/unit/engine_test_util.h"

namespace servelab {
namespace {

// Bounded patterns whose syntax means the same to std::regex (ECMAScript)
// and to our regex grammar (Python's re): every sentence is short, so a
// request ends with "stop" well inside max_tokens.
const char* const kPatterns[] = {
    "[a-c]{2,6}(x|yz)?",          "(ab|cd){1,3}!",
    "[0-9]{1,3}(\\.[0-9]{1,2})?", "(true|false|null)",
    "[A-Z][a-z]{0,4} [a-z]{1,3}",
};

class ConstrainedEngine : public test::TinyModelTest {
  protected:
    void SetUp() override {
        load_tiny_model({.num_layers = 2, .context_length = 256});
        grammars_ = std::make_unique<GrammarCache>(std::make_shared<const TokenVocabulary>(
            TokenVocabulary::from_tokenizer(model_->tokenizer)));
    }

    std::shared_ptr<const CompiledGrammar> regex(const std::string& pattern) {
        return grammars_->get({ConstraintSpec::Kind::kRegex, pattern, {}, nullptr, "regex"});
    }

    // Runs every request to the end in one engine; results by request id.
    std::map<int64_t, GenerationResult> run_all(Engine& engine) {
        std::map<int64_t, GenerationResult> results;
        for (int step = 0; engine.has_unfinished(); ++step) {
            EXPECT_LT(step, 20'000) << "no progress";
            if (step >= 20'000) break;
            for (FinishedRequest& f : engine.step().finished) {
                results[f.request_id] = std::move(f.result);
            }
        }
        return results;
    }

    // The request alone in an engine of its own.
    GenerationResult alone(const std::vector<TokenId>& prompt, const SamplingParams& params) {
        EngineConfig config;
        config.num_kv_blocks = 256;
        config.block_size = 4;
        Engine engine(*model_, *runner_, config);
        const int64_t id = engine.add_request(prompt, params);
        return run_all(engine).at(id);
    }

    void expect_sentence(const GenerationResult& result, const std::string& pattern) {
        EXPECT_EQ(result.finish_reason, FinishReason::kStop)
            << "pattern " << pattern << ": a bounded grammar's output must end with stop, got '"
            << result.text << "'";
        EXPECT_TRUE(std::regex_match(result.text, std::regex(pattern)))
            << "the output '" << result.text << "' is not a sentence of " << pattern
            << ": the mask let a token through that leaves the language";
    }

    std::unique_ptr<GrammarCache> grammars_;
};

TEST_F(ConstrainedEngine, EveryOutputIsASentenceOfItsGrammarInAMixedBatch) {
    SCOPED_TRACE(random_.trace());
    EngineConfig config;
    config.num_kv_blocks = 256;
    config.block_size = 4;
    config.scheduler.max_num_batched_tokens = 24;  // prefill chunks share steps with decodes
    Engine engine(*model_, *runner_, config);
    std::map<int64_t, std::string> pattern_of;
    std::map<int64_t, std::pair<std::vector<TokenId>, SamplingParams>> request_of;
    for (int i = 0; i < 15; ++i) {
        const std::vector<TokenId> prompt = random_prompt(random_.integer(3, 30));
        SamplingParams params;
        params.max_tokens = 40;
        params.temperature = i % 3 == 0 ? 0.0f : 1.2f;
        params.seed = uint64_t(random_.integer(0, 1 << 30));
        const bool constrained = i % 4 != 3;  // every fourth runs free beside the others
        if (constrained) params.grammar = regex(kPatterns[i % std::size(kPatterns)]);
        const int64_t id = engine.add_request(prompt, params);
        if (constrained) pattern_of[id] = kPatterns[i % std::size(kPatterns)];
        request_of[id] = {prompt, params};
    }
    const std::map<int64_t, GenerationResult> results = run_all(engine);
    ASSERT_EQ(results.size(), request_of.size());
    for (const auto& [id, result] : results) {
        if (pattern_of.count(id)) expect_sentence(result, pattern_of.at(id));
        // A constrained request's tokens depend on its own grammar and seed only.
        const auto& [prompt, params] = request_of.at(id);
        EXPECT_EQ(result.tokens, alone(prompt, params).tokens)
            << "request " << id << " differs from its run alone";
    }
}

TEST_F(ConstrainedEngine, AChoiceEndsWithStopOnOneOfTheChoices) {
    SCOPED_TRACE(random_.trace());
    const std::vector<std::string> choices = {"yes", "no", "maybe not", "n/a"};
    SamplingParams params;
    params.temperature = 1.0f;
    params.max_tokens = 32;
    params.grammar =
        grammars_->get({ConstraintSpec::Kind::kChoice, "", choices, nullptr, "choice"});
    for (int i = 0; i < 8; ++i) {
        params.seed = uint64_t(i);
        const GenerationResult result = alone(random_prompt(10), params);
        EXPECT_EQ(result.finish_reason, FinishReason::kStop);
        EXPECT_NE(std::find(choices.begin(), choices.end(), result.text), choices.end())
            << "'" << result.text << "' is not one of the choices";
    }
}

TEST_F(ConstrainedEngine, EachOfNCompletionsWalksItsOwnMatcher) {
    SCOPED_TRACE(random_.trace());
    EngineConfig config;
    config.num_kv_blocks = 256;
    config.block_size = 4;
    Engine engine(*model_, *runner_, config);
    const std::vector<TokenId> prompt = random_prompt(12);
    SamplingParams params;
    params.temperature = 1.5f;
    params.max_tokens = 40;
    params.seed = 7;
    params.grammar = regex(kPatterns[0]);
    const std::vector<GenerationResult> results = engine.generate_parallel(prompt, params, 5);
    ASSERT_EQ(results.size(), 5u);
    for (size_t i = 0; i < results.size(); ++i) {
        expect_sentence(results[i], kPatterns[0]);
        // Completion i is the request seeded seed + i, run alone.
        EXPECT_EQ(results[i].tokens, alone(prompt, completion_params(params, int(i))).tokens)
            << "completion " << i << " is not its seed's request alone";
    }
}

TEST_F(ConstrainedEngine, SpeculationCutsDraftsToTheGrammarAndKeepsGreedyOutput) {
    SCOPED_TRACE(random_.trace());
    for (const char* drafter_name : {"ngram", "self"}) {
        SCOPED_TRACE(drafter_name);
        EngineConfig config;
        config.num_kv_blocks = 256;
        config.block_size = 4;
        Engine engine(*model_, *runner_, config);
        // The target as its own draft proposes what it would say unconstrained:
        // drafts the grammar must cut.
        std::unique_ptr<ModelDrafter> self = ModelDrafter::draft_model(*model_, *model_, 256, 4);
        engine.add_drafter("self", *self);
        std::map<int64_t, std::pair<std::vector<TokenId>, SamplingParams>> request_of;
        std::map<int64_t, std::string> pattern_of;
        for (int i = 0; i < 6; ++i) {
            // Repeats in the prompt give prompt lookup something to propose.
            std::vector<TokenId> prompt = random_prompt(6);
            prompt.insert(prompt.end(), prompt.begin(), prompt.end());
            SamplingParams params;
            params.max_tokens = 40;
            params.temperature = i % 2 == 0 ? 0.0f : 0.8f;
            params.seed = uint64_t(i);
            params.grammar = regex(kPatterns[i % std::size(kPatterns)]);
            params.num_speculative_tokens = 4;
            params.drafter = drafter_name;
            const int64_t id = engine.add_request(prompt, params);
            request_of[id] = {prompt, params};
            pattern_of[id] = kPatterns[i % std::size(kPatterns)];
        }
        for (const auto& [id, result] : run_all(engine)) {
            const auto& [prompt, params] = request_of.at(id);
            expect_sentence(result, pattern_of.at(id));
            if (params.temperature == 0.0f) {
                SamplingParams plain = params;
                plain.num_speculative_tokens = 0;
                EXPECT_EQ(result.tokens, alone(prompt, plain).tokens)
                    << "greedy constrained output must not change with speculation";
            }
        }
    }
}

TEST_F(ConstrainedEngine, PreemptedRequestsKeepTheirPlaceInTheGrammar) {
    SCOPED_TRACE(random_.trace());
    EngineConfig config;
    config.num_kv_blocks = 24;  // tight: requests are preempted and recomputed
    config.block_size = 4;
    Engine engine(*model_, *runner_, config);
    std::map<int64_t, std::pair<std::vector<TokenId>, SamplingParams>> request_of;
    for (int i = 0; i < 8; ++i) {
        const std::vector<TokenId> prompt = random_prompt(random_.integer(10, 20));
        SamplingParams params;
        params.max_tokens = 40;
        params.temperature = 1.0f;
        params.seed = uint64_t(100 + i);
        params.grammar = regex("[a-z]{8,14}");
        request_of[engine.add_request(prompt, params)] = {prompt, params};
    }
    int64_t preemptions = 0;
    for (const auto& [id, result] : run_all(engine)) {
        preemptions += result.num_preemptions;
        expect_sentence(result, "[a-z]{8,14}");
        const auto& [prompt, params] = request_of.at(id);
        EXPECT_EQ(result.tokens, alone(prompt, params).tokens);
    }
    EXPECT_GT(preemptions, 0) << "the pool was meant to force preemption";
}

}  // namespace
}  // namespace servelab
