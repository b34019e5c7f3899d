// trace_prompt_test.cpp — a trace request's prompt, as ids and as text.
//
// Serving benchmark (issue 10). `bench serve` sends text prompts to servers
// that take no token ids (llama.cpp's), so the text must be exactly the
// trace's length in SmolLM2 tokens, or the two servers would be measured on
// different work.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "kernels/common/error.h"
#include "reference/experiments/trace.h"
#include "reference/model/gguf_reader.h"
#include "tests/unit/test_util.h"

namespace servelab {
namespace {

TEST(TracePrompt, TextIsOneWordPerTokenAndSharesItsGroupsPrefix) {
    const TraceRequest a{
        .id = 3, .prompt_tokens = 40, .output_tokens = 1, .prefix_group = 1, .prefix_tokens = 25};
    const TraceRequest b{
        .id = 4, .prompt_tokens = 30, .output_tokens = 1, .prefix_group = 1, .prefix_tokens = 25};
    const std::string text_a = trace_prompt_text(a), text_b = trace_prompt_text(b);
    EXPECT_EQ(std::count(text_a.begin(), text_a.end(), ' '), 40);
    EXPECT_EQ(text_a, trace_prompt_text(a)) << "the same request draws the same text";
    EXPECT_NE(text_a, trace_prompt_text(a, 1)) << "a salt draws another prompt";
    EXPECT_EQ(trace_prompt_ids(a, 1000), trace_prompt_ids(a, 1000, 0));
    // The first 25 words agree, the 26th starts the request's own part.
    size_t end_a = 0, end_b = 0;
    for (int words = 0; words < 25; ++words) {
        end_a = text_a.find(' ', end_a + 1);
        end_b = text_b.find(' ', end_b + 1);
    }
    EXPECT_EQ(text_a.substr(0, end_a), text_b.substr(0, end_b));
    EXPECT_NE(text_a.substr(end_a), text_b.substr(end_b).substr(0, text_a.size() - end_a));
}

// Lab 11's traces: a prompt as segments, each drawn from its id alone, so two
// prompts agree exactly as far as their segment lists do.
TEST(TracePrompt, SegmentsAgreeAsFarAsTheirListsDo) {
    const TraceRequest a{
        .id = 1, .prompt_tokens = 30, .output_tokens = 1, .segments = {{7, 10}, {8, 20}}};
    const TraceRequest b{
        .id = 2, .prompt_tokens = 25, .output_tokens = 1, .segments = {{7, 10}, {9, 15}}};
    const std::vector<TokenId> ids_a = trace_prompt_ids(a, 50000),
                               ids_b = trace_prompt_ids(b, 50000);
    ASSERT_EQ(ids_a.size(), 30u);
    ASSERT_EQ(ids_b.size(), 25u);
    EXPECT_TRUE(std::equal(ids_a.begin(), ids_a.begin() + 10, ids_b.begin()));
    EXPECT_NE(std::vector<TokenId>(ids_a.begin() + 10, ids_a.begin() + 25),
              std::vector<TokenId>(ids_b.begin() + 10, ids_b.end()));
    TraceRequest cut = a;
    cut.truncate_prompt(14);
    EXPECT_EQ(cut.prompt_tokens, 14);
    ASSERT_EQ(cut.segments.size(), 2u);
    EXPECT_EQ(cut.segments[1].length, 4);
    EXPECT_EQ(trace_prompt_ids(cut, 50000),
              std::vector<TokenId>(ids_a.begin(), ids_a.begin() + 14));
}

TEST(TracePrompt, MalformedSegmentsAreOneLineErrorsNamingTheLine) {
    const std::string path = ::testing::TempDir() + "/bad_segments.jsonl";
    const std::vector<std::pair<std::string, std::string>> cases = {
        {R"({"prompt_tokens": 5, "output_tokens": 1, "segments": [[1, 4]]})", "add up to 4"},
        {R"({"prompt_tokens": 5, "output_tokens": 1, "segments": [[1, 5, 2]]})", "[id, length]"},
        {R"({"prompt_tokens": 5, "output_tokens": 1, "segments": [[-1, 5]]})", "2^40"},
        {R"({"prompt_tokens": 5, "output_tokens": 1, "segments": []})", "non-empty"},
        {R"({"prompt_tokens": 5, "output_tokens": 1, "prefix_tokens": 2, "segments": [[1, 5]]})",
         "not both"}};
    for (const auto& [line, expected] : cases) {
        {
            std::ofstream file(path);
            file << line << "\n";
        }
        try {
            load_trace(path);
            ADD_FAILURE() << "accepted " << line;
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(":1: "), std::string::npos) << e.what();
            EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
        }
    }
}

TEST(TracePrompt, EveryWordIsOneSmolLm2Token) {
    const std::string path = test::source_path(test::kSmolLm2Path);
    if (!std::filesystem::exists(path)) GTEST_SKIP() << "no model at " << path;
    const Tokenizer tokenizer = Tokenizer::from_gguf(GgufFile::open(path));
    for (const int64_t length : {1, 17, 300}) {
        for (int64_t id = 0; id < 20; ++id) {
            const TraceRequest request{.id = id, .prompt_tokens = length, .output_tokens = 1};
            const std::string text = trace_prompt_text(request);
            EXPECT_EQ(int64_t(tokenizer.encode(text, false).size()), length) << text;
        }
    }
}

}  // namespace
}  // namespace servelab
