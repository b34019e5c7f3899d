// fused_gate_up_swiglu.h — silu(gate)·up written by the gate/up matmul itself.
//
// CPU kernel (chapter 11.7, kernel fusion; docs/kernel_fusion.md). Unfused,
// the MLP's gate and up projections each write a (T, ffn_dim) fp32 buffer,
// and swiglu reads both back to write h = silu(gate) · up. Fused, the two
// matrices are walked together, one 16-feature group at a time: the group's
// gate and up outputs for every token go into two small per-thread tiles
// (T × 16 floats each, in L1/L2), and only h leaves the kernel. The gate and
// up buffers (2 × T × ffn_dim × 4 bytes, written and read back) disappear.
//
// Bit for bit the numbers of multiply_same_input then swiglu: the same
// group kernel (kernels/cpu/quant_matmul_repacked.h) and the same
// g / (1 + exp(−g)) · u in float. Fast mode with repacked weights only
// (AVX-512 VNNI); the engine runs it only where kernels/cpu/swiglu.cpp is
// the reference version (reference/engine/fusion_plan.h).
#pragma once

#include <cstdint>

#include "kernels/cpu/quant_matmul_fast.h"
#include "kernels/cpu/quant_matmul_repacked.h"

namespace servelab {

// h (T, w_gate.rows) = silu(x · W_gateᵀ) * (x · W_upᵀ), T = x.num_tokens.
// w_gate and w_up: the same shape.
void gate_up_matmul_swiglu(const QuantizedActivations& x, const RepackedMatrix& w_gate,
                           const RepackedMatrix& w_up, float* h);

}  // namespace servelab
