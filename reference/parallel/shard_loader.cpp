// shard_loader.cpp — see shard_loader.h.
#include "reference/parallel/shard_loader.h"

#include <fmt/format.h>

#include <algorithm>

#include "kernels/common/error.h"
#include "kernels/cpu/dequantize.h"
#include "reference/model/weight_loading.h"

namespace servelab {
namespace {

// A 1-D tensor (a norm's weights), whole: every rank holds it.
std::vector<float> load_all(const GgufFile& file, const std::string& name, int64_t length) {
    const GgufTensorInfo& info = file.require_tensor(name, std::vector<int64_t>{length});
    std::vector<float> values(static_cast<size_t>(length));
    dequantize_row(info.type, info.data, values.data(), length);
    return values;
}

}  // namespace

ModelWeights load_weight_shard(const GgufFile& file, const ModelConfig& config,
                               const TensorParallelShard& shard) {
    if (shard.is_whole_model()) return ModelWeights::load(file, config);  // MLA included
    if (config.is_mla()) throw Error("tensor parallel: MLA models cannot be split");
    const ModelConfig local = local_config(config, shard);
    const int64_t dim = config.dim;
    const int64_t head_dim = config.head_dim;
    // Output features of wq (and input features of wo) this rank owns.
    const int64_t q_begin = shard.q_head_begin * head_dim;
    const int64_t q_end = q_begin + local.q_dim();
    const int64_t kv_begin = shard.kv_head_begin * head_dim;
    const int64_t kv_end = kv_begin + local.kv_dim();
    const int64_t o_begin = shard.q_head_begin * config.v_head_dim;
    const int64_t o_end = o_begin + local.attn_out_dim();

    ModelWeights weights;
    weights.token_embedding = load_matrix_rows(file, "token_embd.weight", dim, config.vocab_size,
                                               shard.vocab_begin, shard.vocab_end);
    weights.layers.resize(size_t(config.num_layers));
    for (int64_t layer = 0; layer < config.num_layers; ++layer) {
        const std::string prefix = fmt::format("blk.{}.", layer);
        LayerWeights& w = weights.layers[size_t(layer)];
        w.attn_norm = load_all(file, prefix + "attn_norm.weight", dim);
        w.wq =
            load_matrix_rows(file, prefix + "attn_q.weight", dim, config.q_dim(), q_begin, q_end);
        w.wk = load_matrix_rows(file, prefix + "attn_k.weight", dim, config.kv_dim(), kv_begin,
                                kv_end);
        w.wv = load_matrix_rows(file, prefix + "attn_v.weight", dim, config.kv_dim(), kv_begin,
                                kv_end);
        w.wo = load_matrix_columns(file, prefix + "attn_output.weight", config.attn_out_dim(), dim,
                                   o_begin, o_end);
        w.ffn_norm = load_all(file, prefix + "ffn_norm.weight", dim);
        w.w_gate = load_matrix_rows(file, prefix + "ffn_gate.weight", dim, config.ffn_dim,
                                    shard.ffn_begin, shard.ffn_end);
        w.w_up = load_matrix_rows(file, prefix + "ffn_up.weight", dim, config.ffn_dim,
                                  shard.ffn_begin, shard.ffn_end);
        w.w_down = load_matrix_columns(file, prefix + "ffn_down.weight", config.ffn_dim, dim,
                                       shard.ffn_begin, shard.ffn_end);
    }
    weights.output_norm = load_all(file, "output_norm.weight", dim);
    if (!config.tied_embeddings) {
        weights.output = load_matrix_rows(file, "output.weight", dim, config.vocab_size,
                                          shard.vocab_begin, shard.vocab_end);
    }
    return weights;
}

ModelShard model_shard_from_gguf(GgufFile file, int num_ranks, int rank) {
    ModelConfig config = ModelConfig::from_gguf(file);
    TensorParallelShard shard = plan_shard(config, num_ranks, rank);
    Tokenizer tokenizer = Tokenizer::from_gguf(file);
    if (tokenizer.vocab_size() != config.vocab_size) {
        throw Error(fmt::format("tokenizer has {} tokens but token_embd has {} rows",
                                tokenizer.vocab_size(), config.vocab_size));
    }
    ModelWeights weights = load_weight_shard(file, config, shard);
    ModelConfig local = local_config(config, shard);
    return ModelShard{
        Model{std::move(file), std::move(local), std::move(weights), std::move(tokenizer)},
        std::move(shard)};
}

ModelShard load_model_shard(const std::string& path, int num_ranks, int rank) {
    GgufFile file = GgufFile::open(path);
    try {
        return model_shard_from_gguf(std::move(file), num_ranks, rank);
    } catch (const Error& e) {
        throw Error(path + ": " + e.what());
    }
}

}  // namespace servelab
