// model_drafter.cpp — see model_drafter.h.
#include "reference/speculative/model_drafter.h"

#include <fmt/format.h>

#include "kernels/common/error.h"
#include "reference/speculative/rejection_sampler.h"

namespace servelab {
namespace {

ModelConfig checked(const ModelConfig& config) {
    if (config.is_mla()) throw Error("drafter: MLA models do not run on a paged cache yet");
    return config;
}

bool same_vocabulary(const Tokenizer& a, const Tokenizer& b) {
    if (a.vocab_size() != b.vocab_size()) return false;
    for (TokenId id = 0; id < a.vocab_size(); ++id) {
        if (a.token_text(id) != b.token_text(id)) return false;
    }
    return true;
}

}  // namespace

std::unique_ptr<ModelDrafter> ModelDrafter::draft_model(const Model& draft, const Model& target,
                                                        int64_t num_kv_blocks, int64_t block_size,
                                                        const RunnerOptions& runner) {
    if (draft.config.vocab_size != target.config.vocab_size ||
        !same_vocabulary(draft.tokenizer, target.tokenizer)) {
        throw Error(fmt::format(
            "draft model: its vocabulary ({} tokens) is not the target's ({} tokens); a draft "
            "model must share the target's tokenizer token for token",
            draft.config.vocab_size, target.config.vocab_size));
    }
    return std::make_unique<ModelDrafter>(draft.config, draft.weights, num_kv_blocks, block_size,
                                          runner);
}

std::unique_ptr<ModelDrafter> ModelDrafter::early_exit(const Model& target, int64_t num_layers,
                                                       int64_t num_kv_blocks, int64_t block_size,
                                                       const RunnerOptions& runner) {
    if (num_layers < 1 || num_layers >= target.config.num_layers) {
        throw Error(fmt::format("early exit: {} layers; the target has {}, so choose 1 to {}",
                                num_layers, target.config.num_layers,
                                target.config.num_layers - 1));
    }
    ModelConfig config = target.config;
    config.num_layers = num_layers;  // the runner stops here, then norm and head as usual
    return std::make_unique<ModelDrafter>(config, target.weights, num_kv_blocks, block_size,
                                          runner);
}

ModelDrafter::ModelDrafter(const ModelConfig& config, const ModelWeights& weights,
                           int64_t num_kv_blocks, int64_t block_size, const RunnerOptions& runner)
    : config_(checked(config)),
      runner_(make_cpu_batch_forward(config_, weights, runner)),
      pool_(config_, num_kv_blocks, block_size),
      kv_(pool_, /*enable_prefix_caching=*/false) {}

std::vector<Draft> ModelDrafter::propose(std::span<const DraftRequest> requests) {
    std::vector<Draft> drafts(requests.size());
    // Per request: its tokens and drafts so far (what the draft cache must
    // hold before each pass), and whether it still drafts.
    std::vector<std::vector<TokenId>> sequences(requests.size());
    std::vector<size_t> active;
    for (size_t i = 0; i < requests.size(); ++i) {
        sequences[i].assign(requests[i].tokens.begin(), requests[i].tokens.end());
        if (requests[i].max_drafts > 0) active.push_back(i);
    }
    std::vector<float> row(size_t(config_.vocab_size));
    std::vector<float> q;
    while (!active.empty()) {
        // One pass: every token each active request's cache lacks (the
        // catch-up on the first pass, one draft on later ones).
        std::vector<SequenceChunk> chunks;
        std::vector<size_t> batched;
        for (size_t i : active) {
            const int64_t id = requests[i].request_id;
            PagedSequence& seq = sequences_.try_emplace(id, pool_.block_size()).first->second;
            const int64_t length = int64_t(sequences[i].size());
            // The last token always goes through: its logits give the draft.
            if (seq.num_computed_tokens >= length) kv_.rollback(seq, length - 1);
            const int64_t computed = seq.num_computed_tokens;
            // A full pool or the draft's context ends this request's drafts.
            if (length >= config_.context_length || !kv_.reserve(seq, length - computed)) continue;
            const auto tokens = std::span(sequences[i]).subspan(size_t(computed));
            chunks.push_back({StepInput{tokens, computed}, &seq.table});
            batched.push_back(i);
        }
        if (chunks.empty()) break;
        const std::vector<float> logits = runner_->forward_batch(chunks, pool_);
        active.clear();
        for (size_t b = 0; b < batched.size(); ++b) {
            const size_t i = batched[b];
            const DraftRequest& request = requests[i];
            kv_.commit(sequences_.at(request.request_id), sequences[i]);
            const auto first = logits.begin() + std::ptrdiff_t(b * row.size());
            row.assign(first, first + std::ptrdiff_t(row.size()));
            // q: the request's own filters applied to the draft's logits.
            request.sampler->distribution(row, sequences[i], q);
            Draft& draft = drafts[i];
            TokenId token = 0;
            if (request.sampler->params().temperature == 0.0f) {
                token = argmax(q);  // one-hot: q stays implicit (a point mass)
            } else {
                token = draw_from(q, request.sampler->next_uniform());
                draft.probs.insert(draft.probs.end(), q.begin(), q.end());
            }
            draft.tokens.push_back(token);
            sequences[i].push_back(token);
            if (int64_t(draft.tokens.size()) < request.max_drafts) active.push_back(i);
        }
    }
    return drafts;
}

void ModelDrafter::rollback(int64_t request_id, int64_t num_tokens) {
    const auto found = sequences_.find(request_id);
    if (found == sequences_.end()) return;
    PagedSequence& seq = found->second;
    kv_.rollback(seq, std::min(num_tokens, seq.table.num_tokens()));
}

int64_t ModelDrafter::num_cached_tokens(int64_t request_id) const {
    const auto found = sequences_.find(request_id);
    return found == sequences_.end() ? 0 : found->second.num_computed_tokens;
}

void ModelDrafter::release(int64_t request_id) {
    const auto found = sequences_.find(request_id);
    if (found == sequences_.end()) return;
    kv_.finish(found->second);
    sequences_.erase(found);
}

}  // namespace servelab
