// memory_release.h — long-running servers give freed memory back instead of keeping it.
//
// Part of the serving layer (chapter 11.7, docs/serving.md "Reliability").
// glibc's malloc gives each thread that allocates an arena of its own, up
// to 8 per core, and keeps what is freed in an arena for that arena's next
// allocations. A server whose workers once took 32 hostile 1 MiB bodies at
// once then holds a few MiB in each of 14 arenas for good (measured on the
// router: 204 → 236 MiB RSS after the burst, never returned). Two arenas
// make the workers reuse each other's freed memory (204 → 211 MiB); the
// workers parse requests, they do not compute, so sharing an arena's lock
// costs nothing measurable. Blocks of 128 KiB or more (request bodies) are
// mapped on their own and unmapped when freed; the threshold is fixed,
// since by default each such free raises it, up to 32 MiB, and bodies then
// land in the arenas too.
#pragma once

namespace servelab {

// Call once, at the start of `serve` and `route`, before any thread starts.
void limit_retained_memory();

}  // namespace servelab
