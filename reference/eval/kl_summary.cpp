// kl_summary.cpp — see kl_summary.h.
#include "reference/eval/kl_summary.h"

#include <algorithm>
#include <cmath>

namespace servelab {

void KlSummary::add(double kl_nats, bool same_top1) {
    kl_nats_.push_back(kl_nats);
    num_same_top1_ += same_top1 ? 1 : 0;
}

double KlSummary::mean_nats() const {
    if (kl_nats_.empty()) return 0.0;
    double sum = 0.0;
    for (const double kl : kl_nats_) sum += kl;
    return sum / double(kl_nats_.size());
}

double KlSummary::quantile_nats(double q) const {
    if (kl_nats_.empty()) return 0.0;
    // Sorting a copy keeps add() O(1); a summary is asked for a few times at the end.
    std::vector<double> sorted = kl_nats_;
    std::sort(sorted.begin(), sorted.end());
    // Position q·(n − 1) in the sorted values, between ranks `below` and below + 1.
    const double position = std::clamp(q, 0.0, 1.0) * double(sorted.size() - 1);
    const size_t below = size_t(std::floor(position));
    const size_t above = std::min(below + 1, sorted.size() - 1);
    const double fraction = position - double(below);
    return (1.0 - fraction) * sorted[below] + fraction * sorted[above];
}

double KlSummary::top1_agreement() const {
    return kl_nats_.empty() ? 0.0 : double(num_same_top1_) / double(kl_nats_.size());
}

}  // namespace servelab
