// head_mapping.cpp — see head_mapping.h. Lab 3's exercise: the query-to-KV head mapping.
#include "kernels/cpu/head_mapping.h"

namespace servelab {

int64_t kv_head_for_query_head(int64_t query_head, int64_t num_heads, int64_t num_kv_heads) {
    // BEGIN SOLUTION lab03
    // HINT: consecutive groups of num_heads / num_kv_heads query heads share one KV head
    const int64_t group_size = num_heads / num_kv_heads;
    return query_head / group_size;
    // END SOLUTION
}

}  // namespace servelab
