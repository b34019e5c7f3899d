// memory_release.cpp — see memory_release.h.
#include "reference/common/memory_release.h"

#include <cstdlib>  // on glibc, defines __GLIBC__ (through <features.h>)

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace servelab {

void limit_retained_memory() {
#if defined(__GLIBC__)
    mallopt(M_ARENA_MAX, 2);
    // Setting either threshold turns off glibc's dynamic adjustment of both.
    mallopt(M_MMAP_THRESHOLD, 128 * 1024);
    mallopt(M_TRIM_THRESHOLD, 1024 * 1024);
#endif
}

}  // namespace servelab
