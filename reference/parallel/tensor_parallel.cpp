// tensor_parallel.cpp — see tensor_parallel.h.
#include "reference/parallel/tensor_parallel.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "kernels/common/error.h"

namespace servelab {
namespace {

bool can_split(const ModelConfig& config, int num_ranks) {
    if (num_ranks == 1) return true;
    if (config.is_mla()) return false;
    if (config.num_heads % num_ranks != 0) return false;
    return config.num_kv_heads % num_ranks == 0 || num_ranks % config.num_kv_heads == 0;
}

// [begin, end) of piece `index` when `total` is cut into `pieces` nearly
// equal pieces (the first total % pieces get one more).
std::pair<int64_t, int64_t> even_piece(int64_t total, int pieces, int index) {
    const int64_t base = total / pieces;
    const int64_t extra = total % pieces;
    const int64_t begin = index * base + std::min<int64_t>(index, extra);
    return {begin, begin + base + (index < extra ? 1 : 0)};
}

}  // namespace

std::vector<int> valid_tensor_parallel_sizes(const ModelConfig& config) {
    std::vector<int> sizes;
    for (int n = 1; n <= config.num_heads; ++n) {
        if (can_split(config, n)) sizes.push_back(n);
    }
    return sizes;
}

TensorParallelShard plan_shard(const ModelConfig& config, int num_ranks, int rank) {
    if (num_ranks < 1 || !can_split(config, num_ranks)) {
        throw Error(fmt::format(
            "--tp {}: the model's {} query heads and {} KV heads{} do not split {} ways; valid "
            "--tp: {}",
            num_ranks, config.num_heads, config.num_kv_heads, config.is_mla() ? " (MLA)" : "",
            num_ranks, fmt::join(valid_tensor_parallel_sizes(config), ", ")));
    }
    if (rank < 0 || rank >= num_ranks) {
        throw Error(fmt::format("tensor parallel: rank {} outside [0, {})", rank, num_ranks));
    }
    TensorParallelShard shard;
    shard.rank = rank;
    shard.num_ranks = num_ranks;
    const int64_t heads_per_rank = config.num_heads / num_ranks;
    shard.q_head_begin = rank * heads_per_rank;
    if (config.num_kv_heads >= num_ranks) {
        shard.kv_head_begin = rank * (config.num_kv_heads / num_ranks);
    } else {
        // Fewer KV heads than ranks: this rank's query heads all read the one
        // KV head of their group, which other ranks hold too (replicated).
        shard.kv_head_begin = shard.q_head_begin / config.heads_per_kv_head();
    }
    std::tie(shard.ffn_begin, shard.ffn_end) = even_piece(config.ffn_dim, num_ranks, rank);
    for (int r = 0; r < num_ranks; ++r) {
        const auto [begin, end] = even_piece(config.vocab_size, num_ranks, r);
        shard.vocab_counts.push_back(end - begin);
        if (r == rank) std::tie(shard.vocab_begin, shard.vocab_end) = std::pair(begin, end);
    }
    return shard;
}

ModelConfig local_config(const ModelConfig& config, const TensorParallelShard& shard) {
    ModelConfig local = config;
    local.num_heads = config.num_heads / shard.num_ranks;
    local.num_kv_heads = std::max<int64_t>(1, config.num_kv_heads / shard.num_ranks);
    local.ffn_dim = shard.ffn_end - shard.ffn_begin;
    return local;
}

int64_t all_reduce_bytes_per_step(const ModelConfig& config, int64_t num_tokens) {
    return (2 * config.num_layers + 1) * num_tokens * config.dim * int64_t(sizeof(float));
}

int64_t head_gather_bytes_per_step(const ModelConfig& config, int64_t num_logit_rows) {
    return num_logit_rows * config.vocab_size * int64_t(sizeof(float));
}

}  // namespace servelab
