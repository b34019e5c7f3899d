// kv_memory_sim.cpp — see kv_memory_sim.h.
#include "reference/experiments/kv_memory_sim.h"

#include <fmt/format.h>

#include <algorithm>
#include <deque>
#include <optional>

#include "kernels/common/error.h"
#include "reference/kv/block_table.h"

namespace servelab {
namespace {

// `slots` rounded up to a whole number of blocks of `block_size` slots.
int64_t rounded_up_to_blocks(int64_t slots, int64_t block_size) {
    return (slots + block_size - 1) / block_size * block_size;
}

struct Running {
    const TraceRequest* request = nullptr;
    int64_t length = 0;               // tokens so far: prompt + generated
    int64_t reserved_slots = 0;       // static policies
    std::optional<BlockTable> table;  // paged policy

    int64_t final_length() const { return request->prompt_tokens + request->output_tokens; }
    int64_t generated() const { return length - request->prompt_tokens; }
    int64_t slots(int64_t block_size) const {
        return table ? int64_t(table->blocks().size()) * block_size : reserved_slots;
    }
};

class Simulator {
  public:
    Simulator(const std::vector<TraceRequest>& trace, ReservationPolicy policy,
              const MemorySimOptions& options)
        : policy_(policy), options_(options), allocator_(num_pool_blocks(options)) {
        for (const TraceRequest& r : trace) {
            check_fits(r);
            waiting_.push_back(&r);
        }
    }

    MemorySimResult run() {
        MemorySimResult result;
        result.policy = policy_name(policy_);
        double used_sum = 0, reserved_sum = 0, future_sum = 0, never_sum = 0, running_sum = 0;
        while (!waiting_.empty() || !running_.empty()) {
            admit();
            grow_by_one_token(result.preemptions);
            for (const Running& s : running_) {
                const int64_t slots = s.slots(options_.block_size);
                used_sum += double(s.length);
                reserved_sum += double(slots);
                future_sum += double(std::min(slots, s.final_length()) - s.length);
                never_sum += double(std::max<int64_t>(0, slots - s.final_length()));
            }
            running_sum += double(running_.size());
            result.peak_running = std::max(result.peak_running, int64_t(running_.size()));
            finish_done();
            if (++result.steps > kMaxSteps) throw Error("kv-sim: the simulation does not finish");
        }
        const double steps = double(result.steps);
        result.mean_running = running_sum / steps;
        result.mean_used_tokens = used_sum / steps;
        result.mean_reserved_tokens = reserved_sum / steps;
        result.waste_fraction = 1.0 - used_sum / reserved_sum;
        result.waste_future_fraction = future_sum / reserved_sum;
        result.waste_never_fraction = never_sum / reserved_sum;
        result.pool_used_fraction = used_sum / (steps * double(options_.capacity_tokens));
        return result;
    }

  private:
    static constexpr int64_t kMaxSteps = 100'000'000;

    static int64_t num_pool_blocks(const MemorySimOptions& o) {
        if (o.capacity_tokens < 1 || o.block_size < 1 || o.max_seq_len < 1 || o.max_running < 1) {
            throw Error(
                "kv-sim: capacity, block size, max sequence length and batch size "
                "must be >= 1");
        }
        return std::max<int64_t>(1, o.capacity_tokens / o.block_size);
    }

    int64_t reservation(const TraceRequest& r) const {
        if (policy_ == ReservationPolicy::kStaticMax) return options_.max_seq_len;
        if (policy_ == ReservationPolicy::kStaticExact) return r.prompt_tokens + r.output_tokens;
        return rounded_up_to_blocks(r.prompt_tokens + 1, options_.block_size);
    }

    void check_fits(const TraceRequest& r) const {
        const int64_t final_length = r.prompt_tokens + r.output_tokens;
        if (policy_ == ReservationPolicy::kStaticMax && final_length > options_.max_seq_len) {
            throw Error(
                fmt::format("kv-sim: request {} needs {} tokens, more than --max-seq-len {}", r.id,
                            final_length, options_.max_seq_len));
        }
        const int64_t pool_slots = policy_ == ReservationPolicy::kPaged
                                       ? allocator_.num_blocks() * options_.block_size
                                       : options_.capacity_tokens;
        int64_t needed = final_length;  // static-exact
        if (policy_ == ReservationPolicy::kStaticMax) needed = options_.max_seq_len;
        if (policy_ == ReservationPolicy::kPaged) {
            needed = rounded_up_to_blocks(final_length, options_.block_size);
        }
        if (needed > pool_slots) {
            throw Error(fmt::format("kv-sim: request {} needs {} KV slots, more than the pool's {}",
                                    r.id, needed, pool_slots));
        }
    }

    // First come, first served: stop at the first request that does not fit.
    void admit() {
        while (!waiting_.empty() && int64_t(running_.size()) < options_.max_running) {
            const TraceRequest& r = *waiting_.front();
            Running s{&r, r.prompt_tokens, 0, std::nullopt};
            if (policy_ == ReservationPolicy::kPaged) {
                if (allocator_.num_free() * options_.block_size < reservation(r)) return;
                s.table.emplace(options_.block_size);
                for (int64_t t = 0; t < r.prompt_tokens; ++t) s.table->append_slot(allocator_);
            } else {
                if (static_reserved_ + reservation(r) > options_.capacity_tokens) return;
                s.reserved_slots = reservation(r);
                static_reserved_ += s.reserved_slots;
            }
            running_.push_back(std::move(s));
            waiting_.pop_front();
        }
    }

    // Every running sequence produces one token (the prefill step produces
    // the first); a paged sequence may need a block for it.
    void grow_by_one_token(int64_t& preemptions) {
        for (size_t i = 0; i < running_.size(); ++i) {
            Running& s = running_[i];
            if (s.table) {
                while (s.table->num_tokens() <= s.length && !try_append(s)) {
                    preempt_newest();
                    ++preemptions;
                    if (i >= running_.size()) return;  // s itself was the newest
                }
            }
            ++s.length;
        }
    }

    bool try_append(Running& s) {
        if (s.table->num_tokens() % options_.block_size == 0 && allocator_.num_free() == 0) {
            return false;
        }
        s.table->append_slot(allocator_);
        return true;
    }

    void preempt_newest() {
        Running& victim = running_.back();
        victim.table->free(allocator_);
        waiting_.push_front(victim.request);
        running_.pop_back();
    }

    void finish_done() {
        for (size_t i = 0; i < running_.size();) {
            Running& s = running_[i];
            if (s.generated() < s.request->output_tokens) {
                ++i;
                continue;
            }
            if (s.table) s.table->free(allocator_);
            static_reserved_ -= s.reserved_slots;
            running_.erase(running_.begin() + int64_t(i));
        }
    }

    ReservationPolicy policy_;
    MemorySimOptions options_;
    BlockAllocator allocator_;
    std::deque<const TraceRequest*> waiting_;
    std::vector<Running> running_;  // in admission order
    int64_t static_reserved_ = 0;
};

}  // namespace

const char* policy_name(ReservationPolicy policy) {
    switch (policy) {
        case ReservationPolicy::kStaticMax:
            return "static-max";
        case ReservationPolicy::kStaticExact:
            return "static-exact";
        case ReservationPolicy::kPaged:
            return "paged";
    }
    return "?";
}

MemorySimResult simulate_kv_memory(const std::vector<TraceRequest>& trace, ReservationPolicy policy,
                                   const MemorySimOptions& options) {
    return Simulator(trace, policy, options).run();
}

}  // namespace servelab
