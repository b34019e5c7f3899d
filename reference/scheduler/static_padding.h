// static_padding.h — static batching's padding rows: finished requests kept until their batch ends.
//
// Lab 5 (chapter 11.5, continuous batching): the baseline it is measured
// against (SchedulerConfig::static_batching). A fixed-shape batch keeps its
// shape: a request that finishes early has its result reported at once, but
// its row stays in the batch (Request::padding), a discarded token computed
// for it every step, until the batch's last real request finishes. Then
// every row leaves, and the scheduler admits the next batch whole.
//
// The scheduler's companion: it runs the rows like any request (and drops
// them first when it needs blocks, Scheduler::make_room); this class owns
// them, feeds them their next token, and ends the batch.
#pragma once

#include <cstdint>
#include <map>
#include <memory>

#include "reference/scheduler/request.h"
#include "reference/scheduler/scheduler.h"

namespace servelab {

class StaticPadding {
  public:
    // `scheduler` and `kv` (the scheduler's block manager) must outlive
    // this. `enabled`: SchedulerConfig::static_batching; without it no row
    // is ever kept and every call below does nothing.
    StaticPadding(Scheduler& scheduler, KvBlockManager& kv, int64_t context_length, bool enabled)
        : scheduler_(scheduler), kv_(kv), context_length_(context_length), enabled_(enabled) {}

    // Whether `request`, finishing now, stays in the batch as a padding row:
    // under static batching, while it still runs, unless it was cancelled
    // (a cancelled request leaves at once).
    bool keeps(const Request& request, bool cancelled) const {
        return enabled_ && !cancelled && request.status == RequestStatus::kRunning;
    }
    // Takes `row` (for which keeps() said true) as a padding row, from now
    // on owned here; it stays in the scheduler's running set.
    void keep(std::unique_ptr<Request> row);
    // A padding row's chunk was computed this step: commit it and give the
    // row its next (discarded) token, or, with no position left in the
    // context, take it out of the batch early (the row is then destroyed).
    void advance(Request& row);
    // After each step: forgets the rows the scheduler dropped to free
    // blocks, and once no real request of the batch runs, ends the batch —
    // every padding row leaves, so the scheduler can admit the next one.
    void end_step();

  private:
    Scheduler& scheduler_;
    KvBlockManager& kv_;
    int64_t context_length_;
    bool enabled_;
    std::map<int64_t, std::unique_ptr<Request>> rows_;  // by request id
};

}  // namespace servelab
