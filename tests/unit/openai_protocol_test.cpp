// openai_protocol_test.cpp — request bodies the OpenAI API accepts, and the 4xx for the rest.
//
// Serving layer (issue 10). Each bad field gets status, type and param the
// way OpenAI's own API reports them, so real clients raise the right error.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "reference/server/openai_protocol.h"
#include "tests/unit/test_util.h"

namespace servelab {
namespace {

const ProtocolLimits kLimits{.model_name = "smollm2",
                             .context_length = 2048,
                             .vocab_size = 1000,
                             .default_max_tokens = 16,
                             .max_n = 16};

ApiError error_of(const std::string& body_text, bool chat) {
    try {
        parse_api_request(nlohmann::json::parse(body_text), chat, kLimits);
    } catch (const ApiException& e) {
        return e.error();
    }
    ADD_FAILURE() << "accepted: " << body_text;
    return {};
}

TEST(OpenAiProtocol, ACompletionRequestMapsToTheEnginesParameters) {
    const ApiRequest request = parse_api_request(
        nlohmann::json::parse(R"({"model": "smollm2", "prompt": "Once upon", "max_tokens": 7,
            "temperature": 0.5, "top_p": 0.9, "top_k": 40, "seed": 3, "stop": ["\n", "."],
            "n": 2, "stream": true, "stream_options": {"include_usage": true}})"),
        false, kLimits);
    EXPECT_EQ(request.prompt_text, "Once upon");
    EXPECT_EQ(request.params.max_tokens, 7);
    EXPECT_TRUE(request.max_tokens_given);
    EXPECT_FLOAT_EQ(request.params.temperature, 0.5f);
    EXPECT_FLOAT_EQ(request.params.top_p, 0.9f);
    EXPECT_EQ(request.params.top_k, 40);
    EXPECT_EQ(request.params.seed, 3u);
    EXPECT_EQ(request.params.stop_strings, (std::vector<std::string>{"\n", "."}));
    EXPECT_EQ(request.n, 2);
    EXPECT_TRUE(request.stream);
    EXPECT_TRUE(request.include_usage);
    const ApiRequest ids = parse_api_request(
        nlohmann::json::parse(R"({"model": "smollm2", "prompt": [1, 2, 999]})"), false, kLimits);
    EXPECT_EQ(ids.prompt_ids, (std::vector<TokenId>{1, 2, 999}));
    EXPECT_EQ(ids.params.max_tokens, 16) << "OpenAI's default for completions";
    EXPECT_FALSE(ids.max_tokens_given);
    const ApiRequest fixed_length = parse_api_request(
        nlohmann::json::parse(
            R"({"model": "smollm2", "prompt": "x", "max_tokens": 9, "min_tokens": 9})"),
        false, kLimits);
    EXPECT_EQ(fixed_length.params.min_tokens, 9);
}

TEST(OpenAiProtocol, AChatRequestTakesStringAndTextPartContent) {
    const ApiRequest request = parse_api_request(nlohmann::json::parse(R"({"model": "smollm2",
        "messages": [{"role": "developer", "content": "Be brief."},
                     {"role": "user", "content": [{"type": "text", "text": "Hi"},
                                                  {"type": "text", "text": " there"}]}],
        "max_completion_tokens": 5})"),
                                                 true, kLimits);
    ASSERT_EQ(request.messages.size(), 2u);
    EXPECT_EQ(request.messages[0].role, "system");
    EXPECT_EQ(request.messages[1].content, "Hi there");
    EXPECT_EQ(request.params.max_tokens, 5);
}

TEST(OpenAiProtocol, BadFieldsGetA4xxNamingTheField) {
    struct Case {
        const char* body;
        bool chat;
        int status;
        const char* param;
    };
    const Case cases[] = {
        {R"([1, 2])", false, 400, ""},
        {R"({"prompt": "x"})", false, 400, "model"},
        {R"({"model": "gpt-4", "prompt": "x"})", false, 404, "model"},
        {R"({"model": "smollm2"})", false, 400, "prompt"},
        {R"({"model": "smollm2", "prompt": ""})", false, 400, "prompt"},
        {R"({"model": "smollm2", "prompt": ["a", "b"]})", false, 400, "prompt"},
        {R"({"model": "smollm2", "prompt": [1, 5000]})", false, 400, "prompt"},
        {R"({"model": "smollm2", "prompt": "x", "temperature": "hot"})", false, 400, "temperature"},
        {R"({"model": "smollm2", "prompt": "x", "temperature": 3})", false, 400, "temperature"},
        {R"({"model": "smollm2", "prompt": "x", "top_p": 0})", false, 400, "top_p"},
        {R"({"model": "smollm2", "prompt": "x", "max_tokens": 0})", false, 400, "max_tokens"},
        {R"({"model": "smollm2", "prompt": "x", "max_tokens": 1.5})", false, 400, "max_tokens"},
        {R"({"model": "smollm2", "prompt": "x", "max_tokens": 99999})", false, 400, "max_tokens"},
        {R"({"model": "smollm2", "prompt": "x", "n": 100})", false, 400, "n"},
        {R"({"model": "smollm2", "prompt": "x", "min_tokens": -1})", false, 400, "min_tokens"},
        {R"({"model": "smollm2", "prompt": "x", "max_tokens": 4, "min_tokens": 5})", false, 400,
         "min_tokens"},
        {R"({"model": "smollm2", "prompt": "x", "stop": [1]})", false, 400, "stop"},
        {R"({"model": "smollm2", "prompt": "x", "stop": ["a","b","c","d","e"]})", false, 400,
         "stop"},
        {R"({"model": "smollm2", "prompt": "x", "stream": "yes"})", false, 400, "stream"},
        {R"({"model": "smollm2", "prompt": "x", "logprobs": 21})", false, 400, "logprobs"},
        {R"({"model": "smollm2", "prompt": "x", "logprobs": true})", false, 400, "logprobs"},
        {R"({"model": "smollm2", "prompt": "x", "top_logprobs": 2})", false, 400, "top_logprobs"},
        {R"({"model": "smollm2", "messages": [{"role": "user", "content": "x"}],
            "top_logprobs": 2})",
         true, 400, "top_logprobs"},
        {R"({"model": "smollm2", "messages": [{"role": "user", "content": "x"}],
            "logprobs": true, "top_logprobs": 21})",
         true, 400, "top_logprobs"},
        {R"({"model": "smollm2", "messages": [{"role": "user", "content": "x"}],
            "logprobs": 3})",
         true, 400, "logprobs"},
        {R"({"model": "smollm2", "prompt": "x", "presence_penalty": 3})", false, 400,
         "presence_penalty"},
        {R"({"model": "smollm2", "prompt": "x", "logit_bias": {"1": 500}})", false, 400,
         "logit_bias"},
        {R"({"model": "smollm2", "messages": []})", true, 400, "messages"},
        {R"({"model": "smollm2", "messages": [{"role": "robot", "content": "x"}]})", true, 400,
         "messages[0].role"},
        {R"({"model": "smollm2", "messages": [{"role": "user"}]})", true, 400,
         "messages[0].content"},
        {R"({"model": "smollm2", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]})",
         true, 400, "messages[0].content"},
    };
    for (const Case& c : cases) {
        const ApiError error = error_of(c.body, c.chat);
        EXPECT_EQ(error.status, c.status) << c.body;
        EXPECT_EQ(error.param, c.param) << c.body;
        EXPECT_FALSE(error.message.empty()) << c.body;
        const nlohmann::json body = error_body(error);
        EXPECT_TRUE(body["error"]["message"].is_string()) << c.body;
        EXPECT_EQ(body["error"]["type"], "invalid_request_error") << c.body;
    }
}

TEST(OpenAiProtocol, LogprobsInBothAPIsSpellings) {
    const auto params_of = [](const char* body, bool chat) {
        return parse_api_request(nlohmann::json::parse(body), chat, kLimits).params;
    };
    EXPECT_EQ(params_of(R"({"model": "smollm2", "prompt": "x"})", false).logprobs, -1);
    EXPECT_EQ(params_of(R"({"model": "smollm2", "prompt": "x", "logprobs": 0})", false).logprobs,
              0);
    EXPECT_EQ(params_of(R"({"model": "smollm2", "prompt": "x", "logprobs": 5})", false).logprobs,
              5);
    const char* chat_off = R"({"model": "smollm2", "messages": [{"role": "user", "content": "x"}],
        "logprobs": false})";
    EXPECT_EQ(params_of(chat_off, true).logprobs, -1);
    const char* chat_own = R"({"model": "smollm2", "messages": [{"role": "user", "content": "x"}],
        "logprobs": true})";
    EXPECT_EQ(params_of(chat_own, true).logprobs, 0) << "logprobs: true alone = the token's own";
    const char* chat_top = R"({"model": "smollm2", "messages": [{"role": "user", "content": "x"}],
        "logprobs": true, "top_logprobs": 20})";
    EXPECT_EQ(params_of(chat_top, true).logprobs, 20);
}

ApiRequest parsed(const std::string& body_text, bool chat = false,
                  const ProtocolLimits& limits = kLimits) {
    return parse_api_request(nlohmann::json::parse(body_text), chat, limits);
}

TEST(OpenAiProtocol, TopKAtOrBelowZeroIsOffAsInVllm) {
    for (const char* top_k : {"-1", "0", "-7"}) {
        EXPECT_EQ(
            parsed(fmt::format(R"({{"model": "smollm2", "prompt": "x", "top_k": {}}})", top_k))
                .params.top_k,
            0)
            << "top_k " << top_k;
    }
    EXPECT_EQ(parsed(R"({"model": "smollm2", "prompt": "x", "top_k": 40})").params.top_k, 40);
    EXPECT_EQ(error_of(R"({"model": "smollm2", "prompt": "x", "top_k": 1001})", false).param,
              "top_k")
        << "more than the vocabulary is an error, not a silent cap";
}

TEST(OpenAiProtocol, EchoFalseAndBestOf1AreAcceptedAndOtherValuesRefusedNamingThem) {
    EXPECT_EQ(parsed(R"({"model": "smollm2", "prompt": "x", "echo": false})").prompt_text, "x");
    const ApiError on = error_of(R"({"model": "smollm2", "prompt": "x", "echo": true})", false);
    EXPECT_EQ(on.param, "echo");
    EXPECT_NE(on.message.find("echo"), std::string::npos) << on.message;
    EXPECT_EQ(error_of(R"({"model": "smollm2", "prompt": "x", "echo": "no"})", false).param,
              "echo");
    EXPECT_EQ(parsed(R"({"model": "smollm2", "prompt": "x", "best_of": 1})").n, 1)
        << "best_of 1 is one sample, what the server does anyway";
    for (const char* body : {R"({"model": "smollm2", "prompt": "x", "best_of": 2})",
                             R"({"model": "smollm2", "prompt": "x", "audio": {}})",
                             R"({"model": "smollm2", "prompt": "x", "suffix": ""})"}) {
        const ApiError error = error_of(body, false);
        EXPECT_FALSE(error.param.empty()) << body;
        EXPECT_NE(error.message.find(error.param), std::string::npos) << body;
    }
}

TEST(OpenAiProtocol, StopTokenIdsAreTokenIdsOfTheVocabularyAndBounded) {
    EXPECT_EQ(parsed(R"({"model": "smollm2", "prompt": "x", "stop_token_ids": [3, 999]})")
                  .params.stop_token_ids,
              (std::vector<TokenId>{3, 999}));
    EXPECT_TRUE(parsed(R"({"model": "smollm2", "prompt": "x"})").params.stop_token_ids.empty());
    nlohmann::json too_many = {{"model", "smollm2"}, {"prompt", "x"}};
    too_many["stop_token_ids"] = std::vector<int>(kMaxStopTokenIds + 1, 7);
    for (const std::string& body :
         {std::string(R"({"model": "smollm2", "prompt": "x", "stop_token_ids": [1000]})"),
          std::string(R"({"model": "smollm2", "prompt": "x", "stop_token_ids": [-1]})"),
          std::string(R"({"model": "smollm2", "prompt": "x", "stop_token_ids": ["a"]})"),
          std::string(R"({"model": "smollm2", "prompt": "x", "stop_token_ids": 5})"),
          too_many.dump()}) {
        EXPECT_EQ(error_of(body, false).param, "stop_token_ids") << body.substr(0, 80);
    }
}

TEST(OpenAiProtocol, PriorityNeedsAServerThatSchedulesByIt) {
    ProtocolLimits by_priority = kLimits;
    by_priority.priority_scheduling = true;
    EXPECT_EQ(parsed(R"({"model": "smollm2", "prompt": "x", "priority": -7})", false, by_priority)
                  .priority,
              -7);
    EXPECT_EQ(parsed(R"({"model": "smollm2", "prompt": "x"})", false, by_priority).priority, 0);
    EXPECT_EQ(parsed(R"({"model": "smollm2", "prompt": "x", "priority": 0})").priority, 0)
        << "the default priority means nothing to refuse, whatever the policy";
    const ApiError refused =
        error_of(R"({"model": "smollm2", "prompt": "x", "priority": 3})", false);
    EXPECT_EQ(refused.param, "priority");
    EXPECT_NE(refused.message.find("--policy priority"), std::string::npos) << refused.message;
    try {
        parsed(R"({"model": "smollm2", "prompt": "x", "priority": 2147483648})", false,
               by_priority);
        ADD_FAILURE() << "a priority outside int32 was accepted";
    } catch (const ApiException& e) {
        EXPECT_EQ(e.error().param, "priority");
    }
}

TEST(OpenAiProtocol, AnAbsentSeedIsMarkedForTheServerToDraw) {
    EXPECT_FALSE(parsed(R"({"model": "smollm2", "prompt": "x"})").seed_given);
    const ApiRequest seeded = parsed(R"({"model": "smollm2", "prompt": "x", "seed": 0})");
    EXPECT_TRUE(seeded.seed_given) << "seed 0 is a seed like any other";
    EXPECT_EQ(seeded.params.seed, 0u);
}

// The fields each API reads or refuses, written out apart from the parser.
const std::vector<std::string> kHonouredFields = {
    // the request
    "model", "n", "stream", "stream_options", "return_token_ids", "priority",
    // the sampler
    "temperature", "top_p", "top_k", "min_p", "seed", "logit_bias", "repetition_penalty",
    "presence_penalty", "frequency_penalty",
    // the length and the stops
    "max_tokens", "max_completion_tokens", "min_tokens", "ignore_eos", "stop", "stop_token_ids",
    // log-probabilities; and refused unless set to what is done anyway
    "logprobs", "top_logprobs", "echo", "best_of"};

TEST(OpenAiProtocol, EveryFieldOutsideTheKnownOnesIsListedAsIgnoredOnce) {
    test::RandomSource random;
    SCOPED_TRACE(random.trace());
    const std::vector<std::string> unknown_pool = {"user", "metadata", "store", "service_tier",
                                                   "zzz",  "Model",    "top-p", "x y"};
    for (int round = 0; round < 50; ++round) {
        const bool chat = random.integer(0, 1) == 1;
        nlohmann::json body = {{"model", "smollm2"}};
        if (chat) {
            body["messages"] = {{{"role", "user"}, {"content", "x"}}};
        } else {
            body["prompt"] = "x";
        }
        // Known fields at their defaults change nothing, so any subset parses.
        if (random.integer(0, 1)) body["temperature"] = 0.5;
        if (random.integer(0, 1)) body["stop_token_ids"] = {1};
        if (random.integer(0, 1)) body["echo"] = false;
        if (random.integer(0, 1)) body["best_of"] = 1;
        if (random.integer(0, 1)) body["max_completion_tokens"] = 3;
        std::set<std::string> expected;
        for (const std::string& name : unknown_pool) {
            if (random.integer(0, 2) == 0) {
                body[name] = random.integer(0, 1) ? nlohmann::json(1) : nlohmann::json("v");
                expected.insert(name);
            }
        }
        // The completions API's prompt field is not chat's. (The other way
        // round, a chat field sent to completions, is refused: chat_request.h.)
        if (chat && random.integer(0, 3) == 0) {
            body["prompt"] = "y";
            expected.insert("prompt");
        }
        const ApiRequest request = parse_api_request(body, chat, kLimits);
        const std::set<std::string> listed(request.ignored_fields.begin(),
                                           request.ignored_fields.end());
        EXPECT_EQ(listed, expected) << body.dump();
        EXPECT_EQ(listed.size(), request.ignored_fields.size()) << "a field listed twice";
        for (const std::string& name : kHonouredFields) {
            EXPECT_EQ(listed.count(name), 0u) << name << " is read, not ignored";
        }
    }
}

TEST(OpenAiProtocol, TheIgnoredFieldsLineIsBoundedAndOneLine) {
    EXPECT_EQ(ignored_fields_line({"user", "store"}), "fields ignored: user, store");
    std::vector<std::string> many;
    for (int i = 0; i < 100; ++i) many.push_back(std::string(1000, 'a') + "\n" + std::to_string(i));
    many.push_back("evil\nforged line\r");
    many[0] = "line\nbreak";
    const std::string line = ignored_fields_line(many);
    EXPECT_LT(line.size(), 16u * 70u + 64u) << "at most 16 names of at most 64 bytes";
    EXPECT_NE(line.find("and 85 more"), std::string::npos) << line.substr(line.size() - 40);
    EXPECT_EQ(line.find('\n'), std::string::npos) << "a name broke the log line";
    EXPECT_NE(line.find("line?break"), std::string::npos) << line.substr(0, 40);
}

TEST(OpenAiProtocol, TheModelFieldPicksAServedModelAndAnUnknownOneGets404NamingThem) {
    const std::vector<std::string> served{"smollm2", "tiny"};
    EXPECT_EQ(requested_model(nlohmann::json::parse(R"({"model": "tiny"})"), served), "tiny");
    EXPECT_EQ(requested_model(nlohmann::json::parse(R"({"model": "smollm2"})"), served), "smollm2");
    try {
        requested_model(nlohmann::json::parse(R"({"model": "gpt-4"})"), served);
        ADD_FAILURE() << "an unknown model was accepted";
    } catch (const ApiException& e) {
        EXPECT_EQ(e.error().status, 404);
        EXPECT_EQ(e.error().code, "model_not_found");
        EXPECT_EQ(e.error().param, "model");
        EXPECT_NE(e.error().message.find("'smollm2', 'tiny'"), std::string::npos)
            << e.error().message;
    }
    for (const char* body : {R"({"model": 3})", R"({"prompt": "x"})", R"([1, 2])"}) {
        try {
            requested_model(nlohmann::json::parse(body), served);
            ADD_FAILURE() << "accepted " << body;
        } catch (const ApiException& e) {
            EXPECT_EQ(e.error().status, 400) << body;
        }
    }
}

}  // namespace
}  // namespace servelab
