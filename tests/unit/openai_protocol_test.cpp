// openai_protocol_test.cpp — request bodies the OpenAI API accepts, and the 4xx for the rest.
//
// Serving layer (issue 10). Each bad field gets status, type and param the
// way OpenAI's own API reports them, so real clients raise the right error.
#include <gtest/gtest.h>

#include "reference/server/openai_protocol.h"

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
