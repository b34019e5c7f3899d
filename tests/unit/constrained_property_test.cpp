// constrained_property_test.cpp — Lab 12's property test: random schemas,
// random constrained walks; every finished output parses and validates, and
// every token the mask refuses really leaves the language.
//
// Lab 12 (chapter 11.6, constrained decoding): all three exercises at once.
// A random schema (random_json_schema.h) becomes a grammar through your
// object and array rules; it is compiled for a made-up vocabulary (the mask
// cache is built by your walk) and walked as a model would be decoded: at
// each step the cached mask is compared, token by token, with the Earley
// oracle's definition (an allowed token's bytes continue the language, a
// refused one's leave it); a token is drawn uniformly among the allowed ones
// and taken by your accept_token; now and then a few more are taken and
// given back by rollback, as speculative decoding does with rejected drafts,
// and the matcher must stand exactly where it stood. A walk that finishes
// (an end token) must be a JSON text that validates against the schema
// (json_schema_validator_oracle.h). The Python side
// (tests/e2e/test_bench_grammar.py) validates SmolLM2 walks with jsonschema.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <vector>

#include "reference/constrained/compiled_grammar.h"
#include "reference/constrained/grammar_matcher.h"
#include "reference/constrained/json_schema_grammar.h"
#include "tests/unit/grammar_test_util.h"
#include "tests/unit/json_schema_validator_oracle.h"
#include "tests/unit/mask_oracle.h"
#include "tests/unit/random_json_schema.h"
#include "tests/unit/test_util.h"

namespace servelab {
namespace {

using json = nlohmann::ordered_json;

constexpr int kSoftMaxTokens = 30;  // past it, a walk closes as fast as it can
constexpr int kMaxTokens = 150;

// A token the mask allows, drawn uniformly; closing, an end token when one
// is allowed, else one holding a closing byte (a quote or a bracket).
TokenId draw(const TokenBitmask& mask, const TokenVocabulary& v, bool closing,
             std::mt19937_64& rng) {
    std::vector<TokenId> allowed, ends, closers;
    for (TokenId t = 0; t < mask.size(); ++t) {
        if (!mask.test(t)) continue;
        allowed.push_back(t);
        if (test::is_end_token(v, t)) ends.push_back(t);
        if (v.token_bytes[size_t(t)].find_first_of("\"}]") != std::string::npos) {
            closers.push_back(t);
        }
    }
    const std::vector<TokenId>& pool = !closing           ? allowed
                                       : !ends.empty()    ? ends
                                       : !closers.empty() ? closers
                                                          : allowed;
    return pool.empty() ? -1 : pool[size_t(rng() % pool.size())];
}

// Takes a few allowed tokens ahead (drafts) and gives them back: the matcher
// must then stand where it stood, its mask unchanged.
void draft_and_roll_back(GrammarMatcher& m, const TokenBitmask& mask_before,
                         const std::string& output, std::mt19937_64& rng,
                         const std::string& where) {
    const TokenVocabulary& v = m.compiled().vocabulary();
    const int32_t before = m.num_tokens();
    TokenBitmask mask = mask_before;
    const int drafts = 1 + int(rng() % 4);
    for (int k = 0; k < drafts; ++k) {
        const TokenId t = draw(mask, v, false, rng);
        if (t < 0 || !m.accept_token(t)) break;
        m.fill_next_token_bitmask(mask);
    }
    const int32_t taken = m.num_tokens() - before;
    m.rollback(taken);
    TokenBitmask after;
    m.fill_next_token_bitmask(after);
    ASSERT_EQ(m.num_tokens(), before) << where;
    ASSERT_TRUE(after == mask_before)
        << "after " << taken << " draft tokens and rollback(" << taken << ") the mask differs "
        << "from the one before the drafts, after " << test::shown_bytes(output)
        << ": rollback lost the state it must return to (a state saved for rollback must never "
           "be changed by a later token); "
        << where;
}

// One walk; returns its output when it finished (an end token), else "".
std::string walk_once(const std::shared_ptr<const CompiledGrammar>& compiled,
                      test::RandomSource& random, const std::string& where, bool& finished) {
    const Grammar& g = compiled->grammar();
    const TokenVocabulary& v = compiled->vocabulary();
    GrammarMatcher m(compiled);
    std::string output;
    TokenBitmask mask;
    finished = false;
    for (int step = 0; step < kMaxTokens; ++step) {
        m.fill_next_token_bitmask(mask);
        const std::string mistake = test::mask_mistake(g, v, output, mask);
        EXPECT_TRUE(mistake.empty())
            << mistake << "; "
            << "the mask (cached; built by your walk over the grammar your "
               "object and array rules made): "
            << where;
        if (!mistake.empty()) return "";
        if (random.integer(0, 3) == 0) {
            draft_and_roll_back(m, mask, output, random.engine(), where);
            if (::testing::Test::HasFailure()) return "";
        }
        const TokenId t = draw(mask, v, step >= kSoftMaxTokens, random.engine());
        if (t < 0) {
            ADD_FAILURE() << "the mask allows nothing after " << test::shown_bytes(output)
                          << ", not even an end token: " << where;
            return "";
        }
        if (!m.accept_token(t)) {
            ADD_FAILURE() << "accept_token refused " << test::shown_token(v, t)
                          << ", which the mask allowed, after " << test::shown_bytes(output) << ": "
                          << where;
            return "";
        }
        if (test::is_end_token(v, t)) {
            finished = true;
            return output;
        }
        output += v.token_bytes[size_t(t)];
    }
    return "";
}

TEST(ConstrainedProperty, RandomSchemasRandomWalksValidate) {
    test::RandomSource random;
    const auto vocabulary =
        std::make_shared<TokenVocabulary>(test::synthetic_vocabulary(400, random.seed()));
    test::RandomJsonSchema schemas(random.engine());
    int walks = 0, finished = 0;
    for (int s = 0; s < 24; ++s) {
        const json schema = schemas.draw();
        const std::string where = "schema " + schema.dump() + "; " + random.trace();
        Grammar g;
        try {
            g = json_schema_grammar(schema);
        } catch (const SchemaError& e) {
            // Only a schema that validates nothing may be refused.
            ASSERT_NE(std::string(e.what()).find("validates no"), std::string::npos)
                << e.what() << "; " << where;
            continue;
        }
        const auto compiled = CompiledGrammar::compile(g, vocabulary);
        for (int w = 0; w < 2; ++w) {
            bool done = false;
            const std::string output = walk_once(compiled, random, where, done);
            if (HasFailure()) return;
            ++walks;
            if (!done) continue;
            ++finished;
            ASSERT_TRUE(test::grammar_accepts(g, output))
                << "the matcher took an end token after " << test::shown_bytes(output)
                << ", which is not a sentence; " << where;
            // Extra property names may repeat (json_schema_grammar.h says so).
            const std::string violation =
                test::text_violation(schema, output, /*allow_duplicate_keys=*/true);
            if (violation == test::kNotJudged) continue;
            ASSERT_TRUE(violation.empty())
                << violation << "; "
                << "a finished walk's output does not validate: " << test::shown_bytes(output)
                << ": the grammar allows more than the schema (its object and array rules: "
                   "required properties, minItems/maxItems, prefixItems, additionalProperties); "
                << where;
        }
    }
    EXPECT_GE(finished * 2, walks) << "most walks should finish; " << random.trace();
}

}  // namespace
}  // namespace servelab
