// kl_summary.h — what the per-token KL divergences of a text add up to: mean, median, p99, max,
// top-1 agreement.
//
// Part of Lab 10, weight quantization (chapter 11.7 GPTQ and AWQ; 11.8 what
// quantization costs). `servelab perplexity --kl-against M0` adds one value
// per scored prediction (next_token_kl.h); the mean alone hides the tail,
// and the tail is where a quantized model goes wrong: a mean KL of 0.01
// nats can be a little everywhere or a lot on one token in a hundred, so the
// median and the 99th percentile are reported beside it. Top-1 agreement is
// the share of predictions where both models' most likely token is the same
// — how often greedy decoding would pick alike, step by step.
//
// Percentiles interpolate linearly between the sorted values (numpy's
// default; llama-perplexity's --kl-divergence report does the same), so
// figures compare with llama.cpp's.
#pragma once

#include <cstdint>
#include <vector>

namespace servelab {

class KlSummary {
  public:
    // One prediction: its KL(P0 || P) in nats and whether the two argmaxes agree.
    void add(double kl_nats, bool same_top1);

    int64_t count() const { return int64_t(kl_nats_.size()); }
    // All of these are 0 with no predictions added.
    double mean_nats() const;
    double median_nats() const { return quantile_nats(0.5); }
    double p99_nats() const { return quantile_nats(0.99); }
    double max_nats() const { return quantile_nats(1.0); }
    // The q-quantile (0 ≤ q ≤ 1) of the values added so far.
    double quantile_nats(double q) const;
    // Share of predictions, 0..1, whose argmax was the same in both models.
    double top1_agreement() const;

  private:
    std::vector<double> kl_nats_;  // one per prediction, in the order added
    int64_t num_same_top1_ = 0;
};

}  // namespace servelab
