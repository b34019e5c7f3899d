// tokenize_route_test.cpp — /tokenize and /detokenize against what generation computes.
//
// Serving layer (chapter 11.7; reference/server/tokenize_route.h). Checked
// without HTTP, on a tiny model (ChatML, no template of its own):
//   random text prompts, token-id prompts and conversations tokenize to
//     exactly the prompt the one front door builds for the same generation
//     request (RequestBuilder::build), and "count" and "max_model_len" agree;
//   add_generation_prompt: false ends the prompt with the last message;
//   a conversation's tokens detokenize to its rendered prompt text;
//   bad bodies get 400 naming the field, an unknown model 404.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "reference/server/request_admission.h"
#include "reference/server/tokenize_route.h"
#include "tests/unit/engine_test_util.h"

namespace servelab {
namespace {

class TokenizeRouteTest : public test::TinyModelTest {
  protected:
    void SetUp() override {
        TinyModelOptions options;
        options.num_layers = 1;
        load_tiny_model(options);
        engine_ = std::make_unique<Engine>(*model_, *runner_, EngineConfig{});
        loop_ = std::make_unique<EngineLoop>(*engine_, EngineLoopConfig{});
        routes_.push_back(std::make_unique<ModelRoute>(
            ServedModel{"tiny", model_.get(), loop_.get()}, RequestBuilderOptions{}));
    }
    nlohmann::json tokenize(const nlohmann::json& body) {
        nlohmann::json answer;
        const std::optional<ApiError> refusal = tokenize_answer(body.dump(), routes_, answer);
        EXPECT_FALSE(refusal) << body.dump() << ": " << refusal->message;
        return answer;
    }
    ApiError refusal_of(const std::string& body, bool detokenize) {
        nlohmann::json answer;
        const std::optional<ApiError> refusal = detokenize
                                                    ? detokenize_answer(body, routes_, answer)
                                                    : tokenize_answer(body, routes_, answer);
        if (!refusal) ADD_FAILURE() << "accepted " << body;
        return refusal.value_or(ApiError{});
    }
    // The prompt a generation request with this body runs (the front door's).
    std::vector<TokenId> generation_prompt(const nlohmann::json& body, bool chat) {
        const ModelRoute& route = *routes_.front();
        return route.builder.build(spec_of(parse_api_request(body, chat, route.limits))).prompt;
    }
    std::string random_text(int64_t length) {
        const std::vector<std::string> pieces = {"a",  "b", "c", "h",  " ",        "ij",
                                                 "<|", ">", ".", "\n", "\xc3\xa9", "<|im_start|>"};
        std::string text;
        for (int64_t i = 0; i < length; ++i) {
            text += pieces[size_t(random_.integer(0, int64_t(pieces.size()) - 1))];
        }
        return text;
    }

    std::unique_ptr<Engine> engine_;
    std::unique_ptr<EngineLoop> loop_;
    std::vector<std::unique_ptr<ModelRoute>> routes_;
};

TEST_F(TokenizeRouteTest, TokensAreThePromptGenerationComputesForTheSameBody) {
    SCOPED_TRACE(random_.trace());
    for (int round = 0; round < 20; ++round) {
        const nlohmann::json text_body = {{"model", "tiny"},
                                          {"prompt", random_text(random_.integer(1, 40))}};
        nlohmann::json ids_body = {{"model", "tiny"},
                                   {"prompt", random_prompt(random_.integer(1, 20))}};
        nlohmann::json messages = nlohmann::json::array();
        for (int64_t i = random_.integer(1, 3); i > 0; --i) {
            messages.push_back({{"role", i % 2 ? "user" : "assistant"},
                                {"content", random_text(random_.integer(0, 20))}});
        }
        const nlohmann::json chat_body = {{"model", "tiny"}, {"messages", messages}};
        for (const auto& [body, chat] : {std::pair{text_body, false}, std::pair{ids_body, false},
                                         std::pair{chat_body, true}}) {
            const nlohmann::json answer = tokenize(body);
            const std::vector<TokenId> expected = generation_prompt(body, chat);
            EXPECT_EQ(answer["tokens"].get<std::vector<TokenId>>(), expected) << body.dump();
            EXPECT_EQ(answer["count"], expected.size());
            EXPECT_EQ(answer["max_model_len"], routes_.front()->builder.context_length());
        }
    }
}

TEST_F(TokenizeRouteTest, AConversationsTokensDetokenizeToItsRenderedPrompt) {
    const std::vector<ChatMessage> messages = {{"system", "Be brief."}, {"user", "Hi there"}};
    nlohmann::json json_messages = nlohmann::json::array();
    for (const ChatMessage& m : messages) {
        json_messages.push_back({{"role", m.role}, {"content", m.content}});
    }
    const ModelRoute& route = *routes_.front();
    for (const bool open_turn : {true, false}) {
        const nlohmann::json tokens = tokenize({{"model", "tiny"},
                                                {"messages", json_messages},
                                                {"add_generation_prompt", open_turn}})["tokens"];
        nlohmann::json answer;
        ASSERT_FALSE(detokenize_answer(nlohmann::json{{"model", "tiny"}, {"tokens", tokens}}.dump(),
                                       routes_, answer));
        ChatTemplateOptions options;
        options.add_generation_prompt = open_turn;
        EXPECT_EQ(answer["prompt"], route.builder.render_chat(messages, options))
            << "add_generation_prompt " << open_turn;
    }
    const size_t open = tokenize({{"model", "tiny"}, {"messages", json_messages}})["count"];
    const size_t closed = tokenize({{"model", "tiny"},
                                    {"messages", json_messages},
                                    {"add_generation_prompt", false}})["count"];
    EXPECT_LT(closed, open) << "without the open assistant turn the prompt is shorter";
}

TEST_F(TokenizeRouteTest, BadBodiesGet400NamingTheFieldAndAnUnknownModel404) {
    struct Case {
        const char* body;
        bool detokenize;
        int status;
        const char* param;
    };
    const Case cases[] = {
        {R"({"model": "tiny"})", false, 400, "prompt"},
        {R"({"model": "tiny", "prompt": "a", "messages": []})", false, 400, "prompt"},
        {R"({"model": "tiny", "messages": []})", false, 400, "messages"},
        {R"({"model": "tiny", "prompt": [1, 100000]})", false, 400, "prompt"},
        {R"({"model": "tiny", "messages": [{"role": "user", "content": "x"}],
             "add_generation_prompt": "yes"})",
         false, 400, "add_generation_prompt"},
        {R"({"model": "other", "prompt": "a"})", false, 404, "model"},
        {R"({"prompt": "a"})", false, 400, "model"},
        {R"({"model": "tiny"})", true, 400, "tokens"},
        {R"({"model": "tiny", "tokens": [1, -1]})", true, 400, "tokens"},
        {R"({"model": "tiny", "tokens": [100000]})", true, 400, "tokens"},
        {R"({"model": "tiny", "tokens": "1 2"})", true, 400, "tokens"},
        {R"({"model": "other", "tokens": [1]})", true, 404, "model"},
        {R"([1])", true, 400, ""},
    };
    for (const Case& c : cases) {
        const ApiError error = refusal_of(c.body, c.detokenize);
        EXPECT_EQ(error.status, c.status) << c.body;
        EXPECT_EQ(error.param, c.param) << c.body;
        EXPECT_FALSE(error.message.empty()) << c.body;
    }
}

}  // namespace
}  // namespace servelab
