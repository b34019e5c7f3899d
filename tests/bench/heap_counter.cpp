// heap_counter.cpp — see heap_counter.h. The replacement operator new and delete.
#include "tests/bench/heap_counter.h"

#include <malloc.h>

#include <atomic>
#include <cstdlib>
#include <new>

namespace servelab::bench {
namespace {

std::atomic<int64_t> live_bytes{0};
std::atomic<int64_t> peak_bytes{0};

void* counted_allocation(size_t bytes) {
    void* p = std::malloc(bytes == 0 ? 1 : bytes);
    if (p == nullptr) throw std::bad_alloc();
    // What malloc really reserved, the same figure the delete below takes back.
    const int64_t now = live_bytes += int64_t(malloc_usable_size(p));
    int64_t peak = peak_bytes.load(std::memory_order_relaxed);
    while (now > peak && !peak_bytes.compare_exchange_weak(peak, now)) {
    }
    return p;
}

void counted_free(void* p) {
    if (p == nullptr) return;
    live_bytes -= int64_t(malloc_usable_size(p));
    std::free(p);
}

}  // namespace

int64_t heap_live_bytes() {
    return live_bytes.load();
}
int64_t heap_peak_bytes() {
    return peak_bytes.load();
}
void heap_reset_peak() {
    peak_bytes.store(live_bytes.load());
}

}  // namespace servelab::bench

// Aligned forms are left to the library: the kernels' scratch is plain std::vector.
void* operator new(size_t bytes) {
    return servelab::bench::counted_allocation(bytes);
}
void* operator new[](size_t bytes) {
    return servelab::bench::counted_allocation(bytes);
}
void operator delete(void* p) noexcept {
    servelab::bench::counted_free(p);
}
void operator delete[](void* p) noexcept {
    servelab::bench::counted_free(p);
}
void operator delete(void* p, size_t) noexcept {
    servelab::bench::counted_free(p);
}
void operator delete[](void* p, size_t) noexcept {
    servelab::bench::counted_free(p);
}
