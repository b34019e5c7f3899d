// memory_release.h — long-running servers give freed memory back instead of keeping it.
//
// Part of the serving layer (chapter 11.7, docs/serving.md "Reliability").
// glibc's malloc gives each thread that allocates an arena of its own, up
// to 8 per core, and keeps what is freed in an arena for that arena's next
// allocations. A server whose workers once took 32 hostile 1 MiB bodies at
// once then held a few MiB in each of 14 arenas for good. With two arenas
// the workers reuse each other's freed memory: the router's RSS is back
// within 2 % of its baseline after that burst (`json_memory` in
// tests/e2e/test_hostile_clients.py prints it). The workers parse
// requests, they do not compute, so sharing an arena's lock costs nothing
// measurable. Blocks of 128 KiB or more (request bodies) are
// mapped on their own and unmapped when freed; the threshold is fixed,
// since by default each such free raises it, up to 32 MiB, and bodies then
// land in the arenas too.
#pragma once

namespace servelab {

// Call once, at the start of `serve` and `route`, before any thread starts.
void limit_retained_memory();

}  // namespace servelab
