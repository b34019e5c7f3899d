// paged_attention.h — causal attention reading K and V through a block table.
//
// Lab 4 (chapter 11.4, PagedAttention). The cache is a pool of physical
// blocks, each holding block_size tokens' rows; a sequence's token j lives
// in row block_table[j / block_size] · block_size + j % block_size of the
// pool. Everything else is attention_over_kv (attention_kv.h): the same
// scores, mask, softmax and loop order, so the output equals attention over
// a contiguous cache holding the same rows — only where a row is read from
// changes.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/cpu/attention.h"

namespace servelab {

// pool_row[j] = the pool row of token j, for j < num_keys: the gather through
// the block table (paged_flash_attention.h uses it too).
void map_pool_rows(const int32_t* block_table, int64_t block_size, int64_t num_keys,
                   std::vector<int64_t>& pool_row);

// q, out:           (num_queries, num_heads, head_dim)
// key_pool, value_pool: (num_blocks · block_size, num_kv_heads, head_dim)
// block_table:      ceil(num_keys / block_size) physical block ids
void paged_attention(const float* q, const float* key_pool, const float* value_pool,
                     const int32_t* block_table, int64_t block_size, float* out,
                     const AttentionShape& shape);

}  // namespace servelab
