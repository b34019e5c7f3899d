// shard_loader.h — load one rank's shard of a model straight from the GGUF file.
//
// Part of Lab 7 (chapter 11.7). A rank never holds the whole model: each
// tensor is read through the file's mapping and only this rank's rows
// (column-parallel weights, embedding, head) or columns (row-parallel
// weights) are kept, still quantized where the cut falls on block
// boundaries (weight_loading.h). Norms are small and replicated. The
// result is an ordinary Model whose config is the shard's local_config, so
// the engine, the KV pool and the runner take it as they take a whole model.
#pragma once

#include <string>

#include "reference/model/model.h"
#include "reference/parallel/tensor_parallel.h"

namespace servelab {

// A rank's model and where its shard sits in the whole.
struct ModelShard {
    Model model;  // config: the shard's local_config; weights: the shard's
    TensorParallelShard shard;
};

// Rank `rank` of `num_ranks`. Throws servelab::Error (naming the path) for a
// bad file, or for a model that cannot be split num_ranks ways (naming the
// valid sizes).
ModelShard load_model_shard(const std::string& path, int num_ranks, int rank);
// The same from a parsed file (tests build GGUF images in memory).
ModelShard model_shard_from_gguf(GgufFile file, int num_ranks, int rank);
// The shard's weights alone; `config` is the whole model's.
ModelWeights load_weight_shard(const GgufFile& file, const ModelConfig& config,
                               const TensorParallelShard& shard);

}  // namespace servelab
