// static_padding.cpp — see static_padding.h. Lab 5 (chapter 11.5): the static-batching baseline.
#include "reference/scheduler/static_padding.h"

#include <utility>

namespace servelab {

void StaticPadding::keep(std::unique_ptr<Request> row) {
    row->padding = true;
    const int64_t id = row->id;
    rows_[id] = std::move(row);
}

void StaticPadding::advance(Request& row) {
    kv_.commit(row.kv, row.tokens);
    // Any token will do (it is discarded); the last one again keeps the row
    // as costly as a real decode token at its position.
    if (int64_t(row.tokens.size()) < context_length_) {
        row.tokens.push_back(row.tokens.back());
        return;
    }
    scheduler_.finish(row);  // no position left: the row leaves early
    rows_.erase(row.id);
}

void StaticPadding::end_step() {
    if (rows_.empty()) return;  // continuous batching, or no row has finished yet
    // Rows the scheduler dropped to free blocks are gone already.
    std::erase_if(
        rows_, [](const auto& entry) { return entry.second->status == RequestStatus::kFinished; });
    if (scheduler_.num_running() > int64_t(rows_.size())) return;  // the batch goes on
    for (auto& [id, row] : rows_) scheduler_.finish(*row);
    rows_.clear();
}

}  // namespace servelab
