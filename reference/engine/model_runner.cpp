// model_runner.cpp — see model_runner.h.
#include "reference/engine/model_runner.h"

#include <fmt/format.h>

#include <memory>

#include "kernels/common/error.h"
#include "reference/common/exercise_files.h"
#include "reference/speculative/verify_drafts.h"

namespace servelab {

ModelRunner::ModelRunner(const ModelConfig& config, const ModelWeights& weights,
                         const RunnerOptions& options)
    : config_(config),
      options_(options),
      shard_(plan_shard(config, 1, 0)),
      comm_(solo_),
      layers_(config, weights, shard_, comm_, plan_fusions(options.fused_kernels),
              options.mla_mode) {}

ModelRunner::ModelRunner(const ModelConfig& config, const ModelWeights& weights,
                         const TensorParallelShard& shard, Communicator& comm,
                         const RunnerOptions& options)
    : config_(config),
      options_(options),
      shard_(shard),
      comm_(comm),
      layers_(config, weights, shard_, comm_, plan_fusions(options.fused_kernels),
              options.mla_mode) {
    if (comm.size() != shard.num_ranks || comm.rank() != shard.rank) {
        throw Error(
            fmt::format("tensor parallel: the shard is rank {} of {}, the communicator {} of {}",
                        shard.rank, shard.num_ranks, comm.rank(), comm.size()));
    }
    if (config.is_mla() && shard.num_ranks > 1) {
        throw Error("tensor parallel: MLA models cannot be split");
    }
}

std::unique_ptr<BatchForward> make_cpu_batch_forward(const ModelConfig& config,
                                                     const ModelWeights& weights,
                                                     const RunnerOptions& options) {
    return std::make_unique<ModelRunner>(config, weights, options);
}

void ModelRunner::set_fusions(const FusionPlan& wanted) {
    const FusionPlan allowed = plan_fusions(true);
    layers_.set_fusions(
        {.rmsnorm_quantize = wanted.rmsnorm_quantize && allowed.rmsnorm_quantize,
         .add_rmsnorm = wanted.add_rmsnorm && allowed.add_rmsnorm,
         .rope_in_qkv = wanted.rope_in_qkv && allowed.rope_in_qkv,
         .swiglu_in_gate_up = wanted.swiglu_in_gate_up && allowed.swiglu_in_gate_up});
}

// ---------------------------------------------------------------- logits

void ModelRunner::check_step(const StepInput& step) const {
    if (step.tokens.empty()) throw Error("forward: a step needs at least one token");
    const int64_t end_position = step.start_position + int64_t(step.tokens.size());
    if (step.start_position < 0 || end_position > config_.context_length) {
        throw Error(fmt::format("forward: positions [{}, {}) exceed the context length {}",
                                step.start_position, end_position, config_.context_length));
    }
    for (TokenId id : step.tokens) {
        if (id < 0 || id >= config_.vocab_size) {
            throw Error(fmt::format("forward: token id {} is outside the vocabulary [0, {})", id,
                                    config_.vocab_size));
        }
    }
}

void ModelRunner::check_cache(const StepInput& step, const KvCache* cache) const {
    // Without a KV cache there are no earlier keys to attend to, so a step
    // must hold the whole sequence from position 0; with one, it continues
    // exactly where the cache ends.
    if (cache == nullptr && step.start_position != 0) {
        throw Error("forward: without a KV cache a step must start at position 0");
    }
    if (cache != nullptr && step.start_position != cache->num_tokens()) {
        throw Error(
            fmt::format("forward: step starts at position {} but the KV cache holds {} "
                        "tokens",
                        step.start_position, cache->num_tokens()));
    }
    const int64_t step_end = step.start_position + int64_t(step.tokens.size());
    if (cache != nullptr && step_end > cache->max_tokens()) {
        throw Error(fmt::format("forward: step ends at position {}, past the KV cache's {} tokens",
                                step_end, cache->max_tokens()));
    }
}

std::vector<float> ModelRunner::forward(const StepInput& step, KvCache* cache) {
    check_step(step);
    check_cache(step, cache);
    const SequenceChunk chunk{step, nullptr};
    const std::span<const float> logits = layers_.run(std::span(&chunk, 1), {.contiguous = cache});
    return {logits.begin(), logits.end()};
}

std::vector<float> ModelRunner::forward(const StepInput& step, PagedKvCache& cache,
                                        const BlockTable& table) {
    const SequenceChunk chunk{step, &table};
    return forward_batch(std::span(&chunk, 1), cache);
}

std::vector<float> ModelRunner::forward_batch(std::span<const SequenceChunk> chunks,
                                              PagedKvCache& cache) {
    const std::span<const float> logits = run_batch(chunks, cache);
    return {logits.begin(), logits.end()};
}

std::span<const float> ModelRunner::run_batch(std::span<const SequenceChunk> chunks,
                                              PagedKvCache& cache) {
    if (chunks.empty()) throw Error("forward: a batch needs at least one sequence");
    if (config_.is_mla()) throw Error("forward: MLA models do not run on a paged cache yet");
    for (const SequenceChunk& chunk : chunks) {
        check_step(chunk.step);
        const int64_t step_end = chunk.step.start_position + int64_t(chunk.step.tokens.size());
        if (chunk.table == nullptr || step_end != chunk.table->num_tokens()) {
            throw Error(
                fmt::format("forward: step ends at position {} but the block table has {} "
                            "slots reserved",
                            step_end, chunk.table == nullptr ? 0 : chunk.table->num_tokens()));
        }
    }
    return layers_.run(chunks, {.paged = &cache});
}

// ---------------------------------------------------------------- the step

StepResult ModelRunner::run_step(const StepBatch& batch, PagedKvCache& cache) {
    const std::span<const float> logits = run_batch(batch.chunks, cache);
    find_row_ends(batch.chunks);
    StepResult result;
    for (const SampleRequest& sample : batch.samples) draw_sample(sample, batch, logits, result);
    for (const VerifyRequest& request : batch.verifications) {
        result.verified.push_back(verify(request, batch, logits));
    }
    share_rank0_tokens(result);
    return result;
}

namespace {

void check_row(int64_t row, const StepBatch& batch, const char* what) {
    if (row < 0 || size_t(row) >= batch.chunks.size()) {
        throw Error(fmt::format("run_step: {} of row {} in a batch of {} chunks", what, row,
                                batch.chunks.size()));
    }
}

}  // namespace

// One row per chunk, or one per token for chunks that asked for all
// (verification).
void ModelRunner::find_row_ends(std::span<const SequenceChunk> chunks) {
    row_ends_.clear();
    size_t num_rows = 0;
    for (const SequenceChunk& chunk : chunks) {
        num_rows += chunk.step.logits_for == LogitsFor::kLastToken ? 1 : chunk.step.tokens.size();
        row_ends_.push_back(num_rows);
    }
}

void ModelRunner::draw_sample(const SampleRequest& sample, const StepBatch& batch,
                              std::span<const float> logits, StepResult& result) {
    check_row(sample.row, batch, "sample");
    const size_t vocab_size = size_t(config_.vocab_size);
    const auto first =
        logits.begin() + std::ptrdiff_t((row_ends_[size_t(sample.row)] - 1) * vocab_size);
    // A copy: the sampler edits it, and siblings share the row.
    sample_row_.assign(first, first + std::ptrdiff_t(vocab_size));
    if (sample.sampler->params().logprobs < 0) {
        result.sampled.push_back(
            sample.sampler->sample(sample_row_, sample.history, nullptr, sample.allowed));
        return;
    }
    result.logprobs.resize(batch.samples.size());
    SampledLogprobs& logprobs = result.logprobs[result.sampled.size()].emplace();
    result.sampled.push_back(
        sample.sampler->sample(sample_row_, sample.history, &logprobs, sample.allowed));
}

// The chunk's last K + 1 rows are the target's distributions at the K
// drafts' positions and one past them.
Verification ModelRunner::verify(const VerifyRequest& request, const StepBatch& batch,
                                 std::span<const float> logits) const {
    check_row(request.row, batch, "verification");
    const size_t rows = request.drafts.size() + 1;
    const SequenceChunk& chunk = batch.chunks[size_t(request.row)];
    if (chunk.step.logits_for != LogitsFor::kAllTokens || chunk.step.tokens.size() < rows) {
        throw Error("run_step: a verification's chunk must carry logits for its drafts");
    }
    const size_t vocab_size = size_t(config_.vocab_size);
    const size_t first_row = row_ends_[size_t(request.row)] - rows;
    return verify_drafts(*request.sampler, request.history, request.drafts, request.draft_probs,
                         logits.subspan(first_row * vocab_size, rows * vocab_size),
                         config_.vocab_size, request.allowed);
}

// Every rank computed the same logits and drew with the same seeds, so the
// tokens already agree; taking rank 0's anyway makes that a guarantee, not
// an assumption about floating point, for the scheduler decisions that
// depend on them on every rank.
void ModelRunner::share_rank0_tokens(StepResult& result) {
    if (comm_.size() == 1) return;
    broadcast_vector(comm_, result.sampled, 0);
    broadcast_vector(comm_, result.verified, 0);
    // Logprobs travel flat: per sample a count (-1: none asked), then the
    // chosen token and the top ones.
    std::vector<int32_t> counts;
    std::vector<TokenLogprob> flat;
    for (const std::optional<SampledLogprobs>& logprobs : result.logprobs) {
        counts.push_back(logprobs ? int32_t(logprobs->top.size()) : -1);
        if (!logprobs) continue;
        flat.push_back(logprobs->chosen);
        flat.insert(flat.end(), logprobs->top.begin(), logprobs->top.end());
    }
    broadcast_vector(comm_, counts, 0);
    broadcast_vector(comm_, flat, 0);
    result.logprobs.assign(counts.size(), std::nullopt);
    size_t next = 0;
    for (size_t i = 0; i < counts.size(); ++i) {
        if (counts[i] < 0) continue;
        SampledLogprobs& logprobs = result.logprobs[i].emplace();
        logprobs.chosen = flat.at(next++);
        for (int32_t j = 0; j < counts[i]; ++j) logprobs.top.push_back(flat.at(next++));
    }
}

}  // namespace servelab
