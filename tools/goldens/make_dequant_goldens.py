#!/usr/bin/env python3
"""make_dequant_goldens.py — golden vectors for kernels/cpu/dequantize.cpp and quantize_row.

Part of the model loader (all labs). The official `gguf` Python package is the
oracle: for each type it decodes random blocks (dequant_<type>.bin) and, for
the types servelab's writer quantizes, encodes random floats
(quantize_<type>.bin). tests/unit/dequantize_test.cpp requires servelab to
reproduce both bit for bit.

Blocks are random bytes, except that fp16 scale fields are overwritten with
finite values in [-2, 2]: a random NaN/inf scale says nothing about the
decoder. F16/BF16 "blocks" are single values, drawn as random finite bit
patterns (subnormals and signed zeros included).

File format (all little-endian), one file per case:
    magic    4 bytes  b"SLDQ"
    type     u32      ggml type number
    count    u32      number of float values
    nbytes   u32      number of encoded bytes
    encoded  nbytes   the blocks
    values   count × f32
Run from the repo root:  .venv/bin/python tools/goldens/make_dequant_goldens.py
"""
import pathlib
import struct

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize, quantize

ROOT = pathlib.Path(__file__).resolve().parents[2]
OUT = ROOT / "data" / "golden" / "dequant"
SEED = 20240601

# type -> (values per block, bytes per block, byte offsets of fp16 scale fields)
LAYOUTS = {
    T.F16: (1, 2, []),
    T.BF16: (1, 2, []),
    T.Q8_0: (32, 34, [0]),
    T.Q4_0: (32, 18, [0]),
    T.Q4_1: (32, 20, [0, 2]),
    T.Q4_K: (256, 144, [0, 2]),
    T.Q6_K: (256, 210, [208]),
}
DEQUANT_BLOCKS = {T.F16: 512, T.BF16: 512, T.Q8_0: 8, T.Q4_0: 8, T.Q4_1: 8, T.Q4_K: 4, T.Q6_K: 4}
QUANTIZE_TYPES = [T.F16, T.BF16, T.Q8_0, T.Q4_0, T.Q4_1]
QUANTIZE_VALUES = 512


def random_finite_halves(rng: np.random.Generator, n: int) -> np.ndarray:
    """Random fp16 bit patterns whose exponent is not all ones (no inf/NaN)."""
    bits = rng.integers(0, 1 << 16, size=n, dtype=np.uint16)
    bad = (bits & 0x7C00) == 0x7C00
    bits[bad] &= np.uint16(0xBFFF)  # clear the top exponent bit
    return bits


def random_finite_bf16(rng: np.random.Generator, n: int) -> np.ndarray:
    bits = rng.integers(0, 1 << 16, size=n, dtype=np.uint16)
    bad = (bits & 0x7F80) == 0x7F80
    bits[bad] &= np.uint16(0xBFFF)
    return bits


def random_blocks(rng: np.random.Generator, qtype: T, n_blocks: int) -> np.ndarray:
    _, block_bytes, scale_offsets = LAYOUTS[qtype]
    if qtype == T.F16:
        return random_finite_halves(rng, n_blocks).view(np.uint8)
    if qtype == T.BF16:
        return random_finite_bf16(rng, n_blocks).view(np.uint8)
    blocks = rng.integers(0, 256, size=(n_blocks, block_bytes), dtype=np.uint8)
    for offset in scale_offsets:
        scales = rng.uniform(-2.0, 2.0, size=n_blocks).astype(np.float16)
        blocks[:, offset:offset + 2] = scales.view(np.uint8).reshape(n_blocks, 2)
    return blocks.reshape(-1)


def write_case(path: pathlib.Path, qtype: T, encoded: np.ndarray, values: np.ndarray) -> None:
    encoded = np.ascontiguousarray(encoded, dtype=np.uint8).reshape(-1)
    values = np.ascontiguousarray(values, dtype="<f4").reshape(-1)
    header = b"SLDQ" + struct.pack("<III", int(qtype), values.size, encoded.size)
    path.write_bytes(header + encoded.tobytes() + values.tobytes())


def main() -> None:
    rng = np.random.default_rng(SEED)
    OUT.mkdir(parents=True, exist_ok=True)
    for qtype, n_blocks in DEQUANT_BLOCKS.items():
        raw = random_blocks(rng, qtype, n_blocks)
        values = dequantize(raw, qtype).astype(np.float32, copy=False)
        write_case(OUT / f"dequant_{qtype.name.lower()}.bin", qtype, raw, values)
    for qtype in QUANTIZE_TYPES:
        # Mixed magnitudes per block so scales differ; never all zeros.
        scales = np.repeat(rng.uniform(0.01, 4.0, size=QUANTIZE_VALUES // 32), 32)
        floats = (rng.standard_normal(QUANTIZE_VALUES) * scales).astype(np.float32)
        encoded = quantize(floats, qtype)
        write_case(OUT / f"quantize_{qtype.name.lower()}.bin", qtype,
                   np.asarray(encoded).view(np.uint8), floats)
    total = sum(p.stat().st_size for p in OUT.glob("*.bin"))
    print(f"wrote {len(list(OUT.glob('*.bin')))} files, {total} bytes, to {OUT}")


if __name__ == "__main__":
    main()
