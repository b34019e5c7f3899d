#!/usr/bin/env python3
"""numpy_oracle.py — an independent float64 reference forward pass for llama GGUF models.

Why this file exists
--------------------
servelab's C++ engine has its own GGUF reader, its own dequantizers and its own
kernels. To check it end to end we need a second implementation that shares
none of that code. This one reads the file with the official `gguf` Python
package (`gguf.GGUFReader` + `gguf.quants.dequantize`) and does the whole
transformer in plain numpy, in float64, written straight from the math:

    x = embed[token]
    for each layer:
        h  = rmsnorm(x) * attn_norm
        q, k, v = Wq h, Wk h, Wv h            (then RoPE on q and k)
        x += Wo · causal_softmax(q k^T / sqrt(head_dim)) v      (grouped-query)
        h  = rmsnorm(x) * ffn_norm
        x += Wdown · (silu(Wgate h) * (Wup h))
    logits = Woutput · (rmsnorm(x) * output_norm)

Because everything is float64 and all positions are processed at once (a
prompt is one [n_tokens, dim] matrix), the result is the "true" output of the
quantized weights, up to rounding far below what the engine's float32 math
produces. The engine's test (tests/e2e/test_numpy_oracle.py) compares against it.

Layout conventions (the part that is easy to get wrong)
-------------------------------------------------------
* A GGUF tensor lists its dims innermost-first: attn_q with dims [576, 576]
  or attn_k with dims [576, 192] means 192 rows of 576 numbers each.
  `GGUFReader` already reverses that (numpy order), and `dequantize` returns an
  array shaped (rows, row_length); we reshape to the reversed GGUF dims anyway,
  so the convention is explicit. A matrix W of shape (rows, row_length) maps
  x to W @ x; for a batch X of shape [n_tokens, row_length] that is X @ W.T.
* RoPE uses the GGUF "normal" layout: adjacent pairs (2i, 2i+1) of each head
  vector are rotated by angle pos * base^(-2i / rope_dim), for i < rope_dim/2.
  Dimensions at or past rope_dim (if rope_dim < head_dim) are left alone.
* GQA: query head h reads key/value head h // (n_heads / n_kv_heads).
* output.weight absent means the output matrix is tied to token_embd.

Use it
------
    python tools/numpy_oracle.py --model M.gguf --tokens 1,2,3 --out logits.npy
    python tools/numpy_oracle.py --model M.gguf --tokens 1,2,3 --out logits.f32 --raw

or from Python:

    from numpy_oracle import OracleModel
    logits = OracleModel.load("M.gguf").forward([1, 2, 3])   # [3, vocab] float64
"""
from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass

# The matrices here are small (at most 49152 x 576) and prompts are short, so
# multi-threaded BLAS mostly spins; on a busy machine one thread is ~10x faster.
# Only takes effect if numpy is not imported yet; an explicit setting wins.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import gguf  # noqa: E402
from gguf import quants  # noqa: E402


# ----------------------------------------------------------------- hyperparameters
@dataclass
class Config:
    n_layers: int
    dim: int
    ffn_dim: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    rope_dim: int
    rope_base: float
    norm_eps: float
    context_length: int
    vocab_size: int


def field_value(reader: gguf.GGUFReader, key: str, default=None):
    """Return the scalar value of metadata `key`, or `default` when it is absent."""
    field = reader.fields.get(key)
    if field is None:
        if default is None:
            raise KeyError(f"GGUF metadata key '{key}' is missing")
        return default
    return field.contents()


def read_config(reader: gguf.GGUFReader, embed_rows: int) -> Config:
    """Read the llama-style hyperparameters from the GGUF metadata."""
    arch = field_value(reader, "general.architecture")
    key = lambda name: f"{arch}.{name}"  # noqa: E731
    dim = int(field_value(reader, key("embedding_length")))
    n_heads = int(field_value(reader, key("attention.head_count")))
    head_dim = dim // n_heads
    return Config(
        n_layers=int(field_value(reader, key("block_count"))),
        dim=dim,
        ffn_dim=int(field_value(reader, key("feed_forward_length"))),
        n_heads=n_heads,
        n_kv_heads=int(field_value(reader, key("attention.head_count_kv"), n_heads)),
        head_dim=head_dim,
        rope_dim=int(field_value(reader, key("rope.dimension_count"), head_dim)),
        rope_base=float(field_value(reader, key("rope.freq_base"), 10000.0)),
        norm_eps=float(field_value(reader, key("attention.layer_norm_rms_epsilon"))),
        context_length=int(field_value(reader, key("context_length"))),
        vocab_size=int(field_value(reader, key("vocab_size"), embed_rows)),
    )


# ----------------------------------------------------------------- weights
def dequantize_tensor(tensor) -> np.ndarray:
    """Dequantize one GGUF tensor to float64, shaped in numpy order (rows, row_length)."""
    values = quants.dequantize(tensor.data, tensor.tensor_type)
    numpy_shape = tuple(int(d) for d in reversed(tensor.shape.tolist()))
    return np.asarray(values, dtype=np.float64).reshape(numpy_shape)


@dataclass
class Layer:
    attn_norm: np.ndarray  # [dim]
    wq: np.ndarray         # [n_heads*head_dim, dim]
    wk: np.ndarray         # [n_kv_heads*head_dim, dim]
    wv: np.ndarray         # [n_kv_heads*head_dim, dim]
    wo: np.ndarray         # [dim, n_heads*head_dim]
    ffn_norm: np.ndarray   # [dim]
    w_gate: np.ndarray     # [ffn_dim, dim]
    w_up: np.ndarray       # [ffn_dim, dim]
    w_down: np.ndarray     # [dim, ffn_dim]


# ----------------------------------------------------------------- math pieces
def rmsnorm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """x / sqrt(mean(x^2) + eps) * weight, row by row. x: [n, dim]."""
    mean_square = np.mean(x * x, axis=-1, keepdims=True)
    return x / np.sqrt(mean_square + eps) * weight


def silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


def rope_tables(positions: np.ndarray, rope_dim: int, base: float):
    """cos and sin of pos * base^(-2i/rope_dim) for i < rope_dim/2. Shapes [n, rope_dim/2]."""
    i = np.arange(rope_dim // 2, dtype=np.float64)
    inv_freq = base ** (-2.0 * i / rope_dim)
    angles = positions.astype(np.float64)[:, None] * inv_freq[None, :]
    return np.cos(angles), np.sin(angles)


def apply_rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, rope_dim: int) -> np.ndarray:
    """Rotate adjacent pairs (2i, 2i+1) of every head. x: [n, heads, head_dim]."""
    out = x.copy()
    even = x[:, :, 0:rope_dim:2]
    odd = x[:, :, 1:rope_dim:2]
    c = cos[:, None, :]
    s = sin[:, None, :]
    out[:, :, 0:rope_dim:2] = even * c - odd * s
    out[:, :, 1:rope_dim:2] = even * s + odd * c
    return out


def causal_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Grouped-query causal attention.

    q: [n, n_heads, head_dim]; k, v: [n, n_kv_heads, head_dim]. Returns [n, n_heads*head_dim].
    """
    n, n_heads, head_dim = q.shape
    group = n_heads // k.shape[1]
    # Expand kv heads so query head h sees kv head h // group.
    k = np.repeat(k, group, axis=1)
    v = np.repeat(v, group, axis=1)
    scores = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(head_dim)
    future = np.triu(np.ones((n, n), dtype=bool), k=1)
    scores[:, future] = -np.inf
    scores -= scores.max(axis=-1, keepdims=True)
    weights = np.exp(scores)
    weights /= weights.sum(axis=-1, keepdims=True)
    out = np.einsum("hqk,khd->qhd", weights, v)
    return out.reshape(n, n_heads * head_dim)


# ----------------------------------------------------------------- the model
class OracleModel:
    """All weights of one GGUF, dequantized once to float64."""

    def __init__(self, config: Config, embed: np.ndarray, layers: list[Layer],
                 output_norm: np.ndarray, output: np.ndarray):
        self.config = config
        self.embed = embed
        self.layers = layers
        self.output_norm = output_norm
        self.output = output

    @classmethod
    def load(cls, path: str) -> "OracleModel":
        reader = gguf.GGUFReader(path)
        tensors = {t.name: t for t in reader.tensors}

        def weight(name: str) -> np.ndarray:
            if name not in tensors:
                raise KeyError(f"tensor '{name}' is missing from {path}")
            return dequantize_tensor(tensors[name])

        embed = weight("token_embd.weight")
        config = read_config(reader, embed.shape[0])
        layers = []
        for n in range(config.n_layers):
            p = f"blk.{n}."
            layers.append(Layer(
                attn_norm=weight(p + "attn_norm.weight"),
                wq=weight(p + "attn_q.weight"),
                wk=weight(p + "attn_k.weight"),
                wv=weight(p + "attn_v.weight"),
                wo=weight(p + "attn_output.weight"),
                ffn_norm=weight(p + "ffn_norm.weight"),
                w_gate=weight(p + "ffn_gate.weight"),
                w_up=weight(p + "ffn_up.weight"),
                w_down=weight(p + "ffn_down.weight"),
            ))
        output = weight("output.weight") if "output.weight" in tensors else embed
        model = cls(config, embed, layers, weight("output_norm.weight"), output)
        model.check_shapes()
        return model

    def check_shapes(self) -> None:
        c = self.config
        q_rows, kv_rows = c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim
        expected = {"wq": (q_rows, c.dim), "wk": (kv_rows, c.dim), "wv": (kv_rows, c.dim),
                    "wo": (c.dim, q_rows), "w_gate": (c.ffn_dim, c.dim),
                    "w_up": (c.ffn_dim, c.dim), "w_down": (c.dim, c.ffn_dim)}
        for i, layer in enumerate(self.layers):
            for name, shape in expected.items():
                got = getattr(layer, name).shape
                if got != shape:
                    raise ValueError(f"blk.{i} {name}: shape {got}, expected {shape}")
        if self.output.shape != (c.vocab_size, c.dim):
            raise ValueError(f"output: shape {self.output.shape}, expected {(c.vocab_size, c.dim)}")
        if c.n_heads % c.n_kv_heads or c.rope_dim % 2 or c.rope_dim > c.head_dim:
            raise ValueError(f"unsupported head layout: {c}")

    def attention_block(self, layer: Layer, x: np.ndarray, cos, sin) -> np.ndarray:
        c = self.config
        n = x.shape[0]
        h = rmsnorm(x, layer.attn_norm, c.norm_eps)
        q = (h @ layer.wq.T).reshape(n, c.n_heads, c.head_dim)
        k = (h @ layer.wk.T).reshape(n, c.n_kv_heads, c.head_dim)
        v = (h @ layer.wv.T).reshape(n, c.n_kv_heads, c.head_dim)
        q = apply_rope(q, cos, sin, c.rope_dim)
        k = apply_rope(k, cos, sin, c.rope_dim)
        return causal_attention(q, k, v) @ layer.wo.T

    def ffn_block(self, layer: Layer, x: np.ndarray) -> np.ndarray:
        h = rmsnorm(x, layer.ffn_norm, self.config.norm_eps)
        gate = h @ layer.w_gate.T
        up = h @ layer.w_up.T
        return (silu(gate) * up) @ layer.w_down.T

    def forward(self, tokens) -> np.ndarray:
        """Logits for every position of `tokens` (positions 0..n-1). Returns [n, vocab] float64."""
        c = self.config
        tokens = np.asarray(tokens, dtype=np.int64)
        if tokens.ndim != 1 or tokens.size == 0:
            raise ValueError("tokens must be a non-empty 1-D list of ids")
        if tokens.min() < 0 or tokens.max() >= self.embed.shape[0]:
            raise ValueError(f"token id out of range [0, {self.embed.shape[0]})")
        if tokens.size > c.context_length:
            raise ValueError(f"{tokens.size} tokens exceed context_length {c.context_length}")
        cos, sin = rope_tables(np.arange(tokens.size), c.rope_dim, c.rope_base)
        x = self.embed[tokens]
        for layer in self.layers:
            x = x + self.attention_block(layer, x, cos, sin)
            x = x + self.ffn_block(layer, x)
        x = rmsnorm(x, self.output_norm, c.norm_eps)
        return x @ self.output.T


def oracle_logits(model_path: str, tokens) -> np.ndarray:
    """One-shot convenience: load `model_path` and return float64 logits [n_tokens, vocab]."""
    return OracleModel.load(model_path).forward(tokens)


# ----------------------------------------------------------------- CLI
def parse_tokens(text: str) -> list[int]:
    return [int(t) for t in text.replace(" ", "").split(",") if t]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="path to a llama-architecture GGUF")
    parser.add_argument("--tokens", required=True, help="comma-separated token ids, e.g. 1,2,3")
    parser.add_argument("--out", required=True, help="output file (.npy, or raw with --raw)")
    parser.add_argument("--raw", action="store_true",
                        help="write raw little-endian float32 [n_tokens x vocab] instead of .npy")
    args = parser.parse_args(argv)

    logits = oracle_logits(args.model, parse_tokens(args.tokens)).astype("<f4")
    if args.raw:
        logits.tofile(args.out)
    else:
        np.save(args.out, logits)
    print(f"wrote logits {logits.shape[0]} x {logits.shape[1]} to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
