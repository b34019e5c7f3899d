// routing_policy_test.cpp — chapter 11.7 (routing): the router's policies,
// its prefix-affinity table and the routing text of a request.
//
// Round robin cycles and skips backends that are out; least-outstanding
// takes the least loaded; cache-aware sends prompts that share leading
// blocks to the same backend, spreads different ones, yields to the load
// bound, prefers the longest known chain, never picks a backend that is
// out, and keeps its table within its bound. Then the keys themselves
// (prompt_key.h) and the backend URLs the CLI accepts (backend_pool.h).
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "kernels/common/error.h"
#include "reference/router/backend_pool.h"
#include "reference/router/prompt_key.h"
#include "reference/router/routing_policy.h"

namespace servelab {
namespace {

constexpr int64_t kBlockChars = 8;

std::vector<BackendLoad> idle(int n) {
    return std::vector<BackendLoad>(size_t(n));
}

// A prompt of `blocks` whole blocks, block i being eight copies of letters[i]:
// easy to read in a failure, and two prompts share exactly their common letters' blocks.
std::vector<uint64_t> keys_of(const std::string& letters) {
    std::string text;
    for (const char letter : letters) text += std::string(size_t(kBlockChars), letter);
    return prefix_block_keys(text, kBlockChars);
}

TEST(RoutingPolicy, RoundRobinCyclesAndSkipsBackendsThatAreOut) {
    RoutingPolicy policy(RoutingPolicyKind::kRoundRobin);
    std::vector<BackendLoad> loads = idle(3);
    std::vector<int> picks;
    for (int i = 0; i < 6; ++i) picks.push_back(policy.route({}, loads).backend);
    EXPECT_EQ(picks, (std::vector<int>{0, 1, 2, 0, 1, 2}));
    loads[1].available = false;
    picks.clear();
    for (int i = 0; i < 4; ++i) picks.push_back(policy.route({}, loads).backend);
    EXPECT_EQ(picks, (std::vector<int>{0, 2, 0, 2}));
    // Load does not matter to round robin.
    loads[0].outstanding = 100;
    EXPECT_EQ(policy.route({}, loads).backend, 0);
}

TEST(RoutingPolicy, NoneAvailableGivesNoBackend) {
    for (const RoutingPolicyKind kind :
         {RoutingPolicyKind::kRoundRobin, RoutingPolicyKind::kLeastOutstanding,
          RoutingPolicyKind::kCacheAware}) {
        RoutingPolicy policy(kind);
        std::vector<BackendLoad> loads = idle(2);
        loads[0].available = loads[1].available = false;
        const RouteDecision decision = policy.route(keys_of("ab"), loads);
        EXPECT_EQ(decision.backend, -1) << routing_policy_name(kind);
        EXPECT_EQ(decision.reason, RouteReason::kNoneAvailable);
    }
}

TEST(RoutingPolicy, LeastOutstandingPicksTheMinimum) {
    RoutingPolicy policy(RoutingPolicyKind::kLeastOutstanding);
    std::vector<BackendLoad> loads = {{true, 5}, {true, 2}, {true, 7}};
    EXPECT_EQ(policy.route({}, loads).backend, 1);
    loads[1].available = false;  // the minimum among those available
    EXPECT_EQ(policy.route({}, loads).backend, 0);
}

TEST(RoutingPolicy, LeastOutstandingSharesAnIdleFleet) {
    // Sequential requests see every count at 0; ties rotate, so all three get work.
    RoutingPolicy policy(RoutingPolicyKind::kLeastOutstanding);
    std::set<int> used;
    for (int i = 0; i < 3; ++i) used.insert(policy.route({}, idle(3)).backend);
    EXPECT_EQ(used.size(), 3u);
}

TEST(RoutingPolicy, CacheAwareSendsASharedPrefixToOneBackend) {
    RoutingPolicy policy(RoutingPolicyKind::kCacheAware);
    const RouteDecision first = policy.route(keys_of("sysAq"), idle(3));
    EXPECT_EQ(first.reason, RouteReason::kNoMatch);
    for (const char* question : {"x", "yy", "zzz"}) {
        // Same system prompt ("sysA"), a different question: the same backend.
        const RouteDecision again = policy.route(keys_of(std::string("sysA") + question), idle(3));
        EXPECT_EQ(again.backend, first.backend) << question;
        EXPECT_EQ(again.reason, RouteReason::kAffinityHit);
        EXPECT_EQ(again.matched_blocks, 4);
    }
}

TEST(RoutingPolicy, CacheAwareSpreadsDifferentPrefixes) {
    RoutingPolicy policy(RoutingPolicyKind::kCacheAware);
    std::set<int> used;
    for (const char* system : {"aaaa", "bbbb", "cccc"}) {
        const RouteDecision decision = policy.route(keys_of(std::string(system) + "q"), idle(3));
        EXPECT_EQ(decision.reason, RouteReason::kNoMatch);
        used.insert(decision.backend);
    }
    EXPECT_EQ(used.size(), 3u);
}

TEST(RoutingPolicy, CacheAwareLoadBoundOverridesAffinity) {
    CacheAwareOptions options;
    options.balance_abs_threshold = 4;
    options.balance_rel_threshold = 1.5;
    RoutingPolicy policy(RoutingPolicyKind::kCacheAware, options);
    const int affine = policy.route(keys_of("abcd"), idle(3)).backend;
    std::vector<BackendLoad> loads = idle(3);
    // 4 more than the least loaded: within the bound, affinity holds.
    loads[size_t(affine)].outstanding = 5;
    for (BackendLoad& load : loads) {
        if (&load != &loads[size_t(affine)]) load.outstanding = 1;
    }
    EXPECT_EQ(policy.route(keys_of("abcd"), loads).backend, affine);
    // 5 more, and 6x: overridden, to the least loaded.
    loads[size_t(affine)].outstanding = 6;
    const int other = (affine + 1) % 3;
    loads[size_t(other)].outstanding = 0;
    const RouteDecision overridden = policy.route(keys_of("abcd"), loads);
    EXPECT_EQ(overridden.reason, RouteReason::kLoadOverride);
    EXPECT_EQ(overridden.backend, other);
    // The prefix now lives on `other` too: the next one goes there while loads are even.
    EXPECT_EQ(policy.route(keys_of("abcd"), idle(3)).backend, other);
}

TEST(RoutingPolicy, CacheAwareRatioBoundKeepsAffinityAtHighLoad) {
    CacheAwareOptions options;
    options.balance_abs_threshold = 4;
    options.balance_rel_threshold = 1.5;
    RoutingPolicy policy(RoutingPolicyKind::kCacheAware, options);
    const int affine = policy.route(keys_of("abcd"), idle(2)).backend;
    std::vector<BackendLoad> loads = {{true, 100}, {true, 100}};
    loads[size_t(affine)].outstanding = 110;  // 10 more, but only 1.1x: not worth a miss
    EXPECT_EQ(policy.route(keys_of("abcd"), loads).reason, RouteReason::kAffinityHit);
}

TEST(RoutingPolicy, CacheAwareLongestChainWins) {
    RoutingPolicy policy(RoutingPolicyKind::kCacheAware);
    // "abcd" goes to one backend; then "ab", with that one out, to another,
    // which takes over the keys of "a" and "ab" but not of "abc" and "abcd".
    const int long_owner = policy.route(keys_of("abcd"), idle(3)).backend;
    std::vector<BackendLoad> without = idle(3);
    without[size_t(long_owner)].available = false;
    const int short_owner = policy.route(keys_of("ab"), without).backend;
    ASSERT_NE(long_owner, short_owner);
    // "abx" shares only "ab": short_owner's.
    EXPECT_EQ(policy.route(keys_of("abx"), idle(3)).backend, short_owner);
    // "abcdef" matches "ab" (2 blocks, on short_owner) and "abcd" (4 blocks,
    // on long_owner): the longer chain wins.
    const RouteDecision decision = policy.route(keys_of("abcdef"), idle(3));
    EXPECT_EQ(decision.backend, long_owner);
    EXPECT_EQ(decision.matched_blocks, 4);
}

TEST(RoutingPolicy, CacheAwareNeverPicksABackendThatIsOut) {
    RoutingPolicy policy(RoutingPolicyKind::kCacheAware);
    const int affine = policy.route(keys_of("abcd"), idle(3)).backend;
    std::vector<BackendLoad> loads = idle(3);
    loads[size_t(affine)].available = false;
    const RouteDecision decision = policy.route(keys_of("abcd"), loads);
    EXPECT_NE(decision.backend, affine);
    EXPECT_EQ(decision.reason, RouteReason::kNoMatch);
}

TEST(RoutingPolicy, AffinityTableStaysWithinItsBoundLeastRecentFirst) {
    PrefixAffinityTable table(10);
    const std::vector<uint64_t> old_keys = keys_of("abcdef");  // 6 keys
    table.record(old_keys, 0);
    const std::vector<uint64_t> new_keys = keys_of("ghijkl");  // 6 more: 2 old ones go
    table.record(new_keys, 1);
    EXPECT_EQ(table.size(), 10);
    EXPECT_FALSE(table.contains(old_keys[0]));
    EXPECT_FALSE(table.contains(old_keys[1]));
    EXPECT_TRUE(table.contains(old_keys[2]));
    for (const uint64_t key : new_keys) EXPECT_TRUE(table.contains(key));
    // Recording old keys again makes them the most recent: the next eviction spares them.
    table.record({old_keys[2]}, 0);
    table.record(keys_of("m"), 1);
    EXPECT_TRUE(table.contains(old_keys[2]));
    EXPECT_FALSE(table.contains(old_keys[3]));
    for (int round = 0; round < 100; ++round) {
        table.record(keys_of(std::string(1, char('A' + round % 26)) + "xyz"), round % 3);
        EXPECT_LE(table.size(), 10);
    }
}

TEST(RoutingPolicyPromptKey, KeysAreChainedOverWholeBlocks) {
    const std::vector<uint64_t> a = prefix_block_keys("0123456789abcdefXY", kBlockChars);
    ASSERT_EQ(a.size(), 2u);  // the two-character tail is no block
    const std::vector<uint64_t> b = prefix_block_keys("0123456789abcdeZ", kBlockChars);
    EXPECT_EQ(a[0], b[0]);
    EXPECT_NE(a[1], b[1]);
    // The same block after a different one: a different key (the chain).
    const std::vector<uint64_t> c = prefix_block_keys("x1234567abcdefgh", kBlockChars);
    const std::vector<uint64_t> d = prefix_block_keys("y1234567abcdefgh", kBlockChars);
    EXPECT_NE(c[1], d[1]);
    EXPECT_TRUE(prefix_block_keys("short", kBlockChars).empty());
}

TEST(RoutingPolicyPromptKey, ChatTextSharesTheSystemPromptsLeadingBlocks) {
    const nlohmann::json one = {
        {"messages",
         {{{"role", "system"}, {"content", "You are a patient tutor of physics."}},
          {{"role", "user"}, {"content", "What is a joule?"}}}}};
    const nlohmann::json two = {
        {"messages",
         {{{"role", "system"},
           {"content", {{{"type", "text"}, {"text", "You are a patient tutor of physics."}}}}},
          {{"role", "user"}, {"content", "Why is the sky blue?"}}}}};
    const std::string text_one = routing_text(one, true);
    const std::string text_two = routing_text(two, true);
    const size_t system_chars = std::string("system").size() + 1 +
                                std::string("You are a patient tutor of physics.").size() + 1;
    EXPECT_EQ(text_one.substr(0, system_chars), text_two.substr(0, system_chars));
    EXPECT_NE(text_one, text_two);
    EXPECT_EQ(routing_text({{"prompt", "plain"}}, false), "plain");
    EXPECT_EQ(routing_text({{"prompt", {1, 2, 3}}}, false), "[1,2,3]");
    EXPECT_EQ(routing_text({{"model", "m"}}, true), "");
    EXPECT_EQ(routing_text(nlohmann::json::array(), false), "");
}

TEST(RoutingPolicyBackendUrl, AcceptsHttpHostPortOnly) {
    const BackendUrl url = parse_backend_url("http://10.0.0.7:8001/");
    EXPECT_EQ(url.host, "10.0.0.7");
    EXPECT_EQ(url.port, 8001);
    EXPECT_EQ(url.text(), "http://10.0.0.7:8001");
    EXPECT_EQ(parse_backend_url("http://replica-2.local:80").host, "replica-2.local");
    for (const char* bad : {"https://a:1", "a:1", "http://a", "http://:80", "http://a:0",
                            "http://a:65536", "http://a:80/v1", "http://u@a:80", "http://a:8x"}) {
        EXPECT_THROW(parse_backend_url(bad), Error) << bad;
    }
}

TEST(RoutingPolicy, ParsesItsName) {
    EXPECT_EQ(parse_routing_policy("cache-aware"), RoutingPolicyKind::kCacheAware);
    EXPECT_EQ(routing_policy_name(parse_routing_policy("round-robin")), std::string("round-robin"));
    EXPECT_THROW(parse_routing_policy("random"), Error);
}

}  // namespace
}  // namespace servelab
