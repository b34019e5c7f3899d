// cmd_bench_prefix_cache.cpp — `servelab bench prefix-cache`: a trace through the scheduler and
// a prefix cache, without the model (Lab 11).
//
// What each cache and admission policy would compute for a trace, in
// milliseconds: hit rate, tokens computed, preemptions (prefix_cache_replay.h).
// --tree-after N also prints the radix tree after N requests: as JSON (with
// --json) for the notebook's drawing, else indented, one node per line. The requests are replayed
// --repeats times and the median time reported: Lab 11's throughput case times the cache this way.
#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "kernels/common/error.h"
#include "reference/cli/cli_options.h"
#include "reference/cli/commands.h"
#include "reference/experiments/prefix_cache_replay.h"
#include "reference/experiments/trace.h"

namespace servelab::cli {
namespace {

struct PrefixCacheBenchOptions {
    TraceOptions trace{.path = "data/traces/branching.jsonl"};
    std::string prefix_cache = "radix";
    SchedulerOptions scheduler{.config = {}, .policy = "lpm"};
    int64_t num_blocks = 512;
    int64_t block_size = 16;
    int64_t tree_after = 0;
    RepeatOptions repeat{.repeats = 1};
    OutputOptions output;
};

nlohmann::json tree_json(const std::vector<RadixCache::NodeView>& nodes) {
    nlohmann::json all = nlohmann::json::array();
    for (const RadixCache::NodeView& n : nodes) {
        all.push_back({{"id", n.id},
                       {"parent", n.parent},
                       {"blocks", n.blocks.size()},
                       {"first_token", n.tokens.empty() ? -1 : n.tokens.front()},
                       {"lock_ref", n.lock_ref},
                       {"last_used", n.last_used}});
    }
    return all;
}

// One node per line, each indented under its parent (nodes() lists parents
// before children, depth first, so the lines read as the tree).
void print_tree(const std::vector<RadixCache::NodeView>& nodes, int64_t after_requests,
                int64_t block_size) {
    if (nodes.empty()) {
        std::printf("radix tree: fewer than %lld requests finished, nothing to draw\n",
                    (long long)after_requests);
        return;
    }
    std::printf("radix tree after %lld requests (%zu nodes; blocks of %lld tokens):\n",
                (long long)after_requests, nodes.size(), (long long)block_size);
    std::vector<int> depth(nodes.size(), 0);
    std::vector<std::pair<PrefixNode, int>> open;  // (node, depth) of the path printed last
    for (size_t i = 0; i < nodes.size(); ++i) {
        const RadixCache::NodeView& n = nodes[i];
        while (!open.empty() && open.back().first != n.parent) open.pop_back();
        depth[i] = open.empty() ? 0 : open.back().second + 1;
        open.push_back({n.id, depth[i]});
        const std::string indent(size_t(2 + 2 * depth[i]), ' ');
        if (n.parent == kNoPrefixNode) {
            std::printf("%sroot  lock_ref %d\n", indent.c_str(), n.lock_ref);
            continue;
        }
        std::printf("%snode %lld: %zu block%s from token %lld  lock_ref %d  last used %llu\n",
                    indent.c_str(), (long long)n.id, n.blocks.size(),
                    n.blocks.size() == 1 ? "" : "s", (long long)n.tokens.front(), n.lock_ref,
                    (unsigned long long)n.last_used);
    }
}

void run_bench_prefix_cache(const PrefixCacheBenchOptions& opts) {
    if (opts.tree_after > 0 && opts.prefix_cache != "radix") {
        throw Error("--tree-after draws the radix tree: it needs --prefix-cache radix");
    }
    const std::vector<TraceRequest> trace = opts.trace.load();
    PrefixReplayOptions replay;
    replay.prefix_cache = parse_prefix_cache_kind(opts.prefix_cache);
    replay.scheduler = opts.scheduler.resolve();
    replay.num_blocks = opts.num_blocks;
    replay.block_size = opts.block_size;
    replay.snapshot_after = opts.tree_after;
    std::vector<double> seconds;
    PrefixReplayResult result;
    for (int i = 0; i < opts.repeat.repeats; ++i) {
        result = replay_prefix_cache(trace, replay);
        seconds.push_back(result.seconds);
    }
    std::sort(seconds.begin(), seconds.end());
    const double median_s = seconds[seconds.size() / 2];
    const double hit_rate =
        result.prompt_tokens > 0 ? double(result.cached_prompt_tokens) / result.prompt_tokens : 0;
    nlohmann::json report = {
        {"trace", opts.trace.path},
        {"prefix_cache", opts.prefix_cache},
        {"policy", opts.scheduler.policy},
        {"num_blocks", opts.num_blocks},
        {"block_size", opts.block_size},
        {"requests", result.requests},
        {"prompt_tokens", result.prompt_tokens},
        {"cached_prompt_tokens", result.cached_prompt_tokens},
        {"prefix_hit_rate", hit_rate},
        {"tokens_computed", result.tokens_computed},
        {"steps", result.steps},
        {"cached_blocks", result.cached_blocks},
        {"preemptions", result.preemptions},
        {"seconds", median_s},
        {"requests_per_s", median_s > 0 ? double(result.requests) / median_s : 0.0}};
    if (opts.tree_after > 0) report["tree"] = tree_json(result.snapshot);
    if (opts.output.json) {
        print_json(report);
        return;
    }
    std::printf("%s: %lld requests, %s cache, %s admission, %lld blocks of %lld tokens\n",
                opts.trace.path.c_str(), (long long)result.requests, opts.prefix_cache.c_str(),
                opts.scheduler.policy.c_str(), (long long)opts.num_blocks,
                (long long)opts.block_size);
    std::printf("prefix-cache hits   %9.1f%% of %lld prompt tokens\n", 100 * hit_rate,
                (long long)result.prompt_tokens);
    std::printf("tokens computed     %10lld\n", (long long)result.tokens_computed);
    std::printf("preemptions         %10lld\n", (long long)result.preemptions);
    std::printf("replay time         %10.3f s (%.0f requests/s through the cache)\n", median_s,
                median_s > 0 ? result.requests / median_s : 0.0);
    if (opts.tree_after > 0) print_tree(result.snapshot, opts.tree_after, opts.block_size);
}

}  // namespace

void add_bench_prefix_cache(CLI::App& bench) {
    auto opts = std::make_shared<PrefixCacheBenchOptions>();
    CLI::App* cmd = bench.add_subcommand(
        "prefix-cache",
        "replay a trace through the scheduler and a prefix cache, without the model (Lab 11)");
    opts->trace.add_to(*cmd, TraceOptions::kLimit);
    cmd->add_option("--prefix-cache", opts->prefix_cache, "'hash' or 'radix'")
        ->check(CLI::IsMember({"hash", "radix"}))
        ->capture_default_str();
    cmd->add_option("--kv-blocks", opts->num_blocks, "blocks in the pool")
        ->check(CLI::Range(int64_t(1), int64_t(1) << 24))
        ->capture_default_str();
    cmd->add_option("--block-size", opts->block_size, "tokens per block")
        ->check(CLI::Range(1, 4096))
        ->capture_default_str();
    opts->scheduler.add_to(*cmd, {"fcfs", "lpm"}, false);
    cmd->add_option("--tree-after", opts->tree_after,
                    "radix: print the tree after N requests finished (0 = no; JSON with --json)")
        ->check(CLI::NonNegativeNumber)
        ->capture_default_str();
    opts->repeat.add_to(*cmd, "replays (the median time is reported)", 1000);
    opts->output.add_to(*cmd);
    cmd->callback([opts] { run_bench_prefix_cache(*opts); });
}

}  // namespace servelab::cli
