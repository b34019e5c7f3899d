// heap_counter.h — how many bytes of the heap are live, and their high-water mark, for the
// benchmarks' memory figures.
//
// Part of the benchmarks (chapter 11.7: FlashAttention's memory is O(tile² + T·d), plain
// attention's grows with the context). servelab_bench replaces the global operator new and
// delete (heap_counter.cpp) to count the bytes every allocation holds, so a benchmark can
// report the most its kernel had allocated at once. Kernels keep their scratch for the next
// call (thread_local, grown only), so a figure is the kernel's own only for the first case a
// process runs: run one case per process (notebooks/lab09_flash_attention.ipynb does).
#pragma once

#include <cstdint>

namespace servelab::bench {

int64_t heap_live_bytes();  // allocated through operator new and not yet freed
int64_t heap_peak_bytes();  // the most live at once since the last reset
void heap_reset_peak();     // peak := live now

}  // namespace servelab::bench
