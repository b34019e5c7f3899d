// tensor_parallel.h — which part of the model each rank holds (Megatron-LM style).
//
// Part of Lab 7 (chapter 11.7). Split N ways, every layer is:
//   attention  by heads: rank r holds query heads [q_head_begin, +num_heads/N)
//              and the KV heads they read. With num_kv_heads ≥ N each rank
//              holds num_kv_heads/N of them; with fewer KV heads than ranks
//              (N a multiple of num_kv_heads) each rank holds the one KV
//              head its query heads share, so KV heads are replicated
//              N/num_kv_heads times. Each rank's paged cache holds only its
//              own KV heads.
//   wq, wk, wv column-parallel (this rank's output features = its heads)
//   wo         row-parallel (its input features = its heads' outputs), then
//              one all-reduce of the (T, dim) partial sums
//   gate, up   column-parallel over ffn features [ffn_begin, ffn_end)
//   down       row-parallel over the same features, then one all-reduce
//   embedding  vocab-parallel: rows [vocab_begin, vocab_end); a token outside
//              contributes zeros, and an all-reduce completes every row
//   head       vocab-parallel: this rank's logits, gathered to all ranks
// Norms are replicated (dim values each). The residual stream x is
// replicated: after each all-reduce every rank holds the same x.
//
// A rank's shard is described by the model's config with its own head and
// ffn counts (local_config), so the attention kernels, the KV pool and the
// engine run on a shard exactly as on a whole model.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "reference/model/model_config.h"

namespace servelab {

struct TensorParallelShard {
    int rank = 0;
    int num_ranks = 1;
    int64_t q_head_begin = 0;  // this rank's query heads: [q_head_begin, + local num_heads)
    int64_t kv_head_begin = 0;
    int64_t ffn_begin = 0;  // this rank's MLP features [ffn_begin, ffn_end)
    int64_t ffn_end = 0;
    int64_t vocab_begin = 0;  // this rank's rows of the embedding and the head
    int64_t vocab_end = 0;
    // Every rank's vocabulary piece, in rank order (the head's all-gather).
    std::vector<int64_t> vocab_counts;

    int64_t vocab_rows() const { return vocab_end - vocab_begin; }
    bool is_whole_model() const { return num_ranks == 1; }
};

// The split sizes N a model allows: num_heads divisible by N, and either
// num_kv_heads divisible by N or N a multiple of num_kv_heads. MLA models
// allow only 1 (their latent is shared by all heads).
std::vector<int> valid_tensor_parallel_sizes(const ModelConfig& config);

// Rank `rank` of `num_ranks`. Throws servelab::Error naming the valid sizes
// when the model cannot be split num_ranks ways.
TensorParallelShard plan_shard(const ModelConfig& config, int num_ranks, int rank);

// The config a shard runs with: local head counts and ffn width; dim,
// head_dim, layers, vocabulary and context are the whole model's.
ModelConfig local_config(const ModelConfig& config, const TensorParallelShard& shard);

// All-reduced bytes one forward pass moves per rank for `num_tokens` tokens
// (fp32): two all-reduces per layer (after wo, after down) plus one for the
// embedding, each of num_tokens × dim floats.
int64_t all_reduce_bytes_per_step(const ModelConfig& config, int64_t num_tokens);
// Gathered bytes of the head for `num_logit_rows` rows: rows × vocab floats.
int64_t head_gather_bytes_per_step(const ModelConfig& config, int64_t num_logit_rows);

}  // namespace servelab
