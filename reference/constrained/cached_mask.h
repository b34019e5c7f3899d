// cached_mask.h — a step's token mask from the compiled grammar's cache.
//
// Lab 12 support (chapter 11.6, constrained decoding); not an exercise.
// The mask is the OR of the accepted sets of the entries of the stacks'
// tops (compiled_grammar.h), plus each dependent token whose bytes past its
// exit are taken by the real stack under the entry's context. That check is
// exact, so the cached mask equals the walked one (mask_walk.h;
// tests/unit/token_mask_test.cpp compares them, and both with accept_token).
#pragma once

#include "reference/constrained/compiled_grammar.h"
#include "reference/constrained/grammar_stacks.h"
#include "reference/constrained/mask_walk.h"

namespace servelab {

// mask = the tokens whose bytes some stack of `stacks` takes, from the cache
// (mask cleared first; the end tokens, which have no bytes, are the caller's).
void fill_mask_from_cache(const CompiledGrammar& compiled, const StackSet& stacks,
                          TokenBitmask& mask, MaskScratch& scratch);

}  // namespace servelab
