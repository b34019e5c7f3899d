#!/usr/bin/env python3
"""numpy_oracle.py — an independent float64 reference forward pass for llama and deepseek2 GGUFs.

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

The "deepseek2" architecture (DeepSeek-V2 multi-head latent attention, MLA) is
supported too, with dense MLPs only (no mixture-of-experts layers, no YaRN
RoPE scaling). Only the attention block differs; per layer, with N = qk_nope
dims, R = qk_rope dims (one RoPE key shared by all heads), V = value dims and
C = kv_lora_rank (the latent width the engine caches):

        h      = rmsnorm(x) * attn_norm
        q      = Wq h   or   Wq_b (rmsnorm(Wq_a h) * q_a_norm)      -> H x (N + R)
        kv_a   = Wkv_a h                                            -> C + R
        c_kv   = rmsnorm(kv_a[:C]) * kv_a_norm;   k_pe = kv_a[C:]   (one head)
        q_pe, k_pe get RoPE (over all R dims);  q_nope = q[:, :N]
        k_nope, v = split(Wkv_b c_kv)                               -> H x (N + V)
        k      = [k_nope, k_pe] for every head;  q = [q_nope, q_pe]
        x     += Wo · causal_softmax(q k^T / sqrt(N + R)) v

This is the naive ("expand the latent") form; the engine may instead absorb
Wkv_b into the query and output, which is algebraically the same.

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
* deepseek2: attn_kv_a_mqa rows are [C latent rows, then R rope-key rows];
  attn_kv_b rows are per head [N nope-key rows, then V value rows]; attn_q
  (or attn_q_b) rows are per head [N nope rows, then R rope rows].

Use it
------
    python tools/goldens/numpy_oracle.py --model M.gguf --tokens 1,2,3 --out logits.npy
    python tools/goldens/numpy_oracle.py --model M.gguf --tokens 1,2,3 --out logits.f32 --raw

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
    # deepseek2 (MLA) only; for llama arch stays "llama" and the rest are 0.
    # For MLA, head_dim is the query/key width N + R and rope_dim is R.
    arch: str = "llama"
    kv_lora_rank: int = 0   # C: width of the latent c_kv
    q_lora_rank: int = 0    # Q: query bottleneck width, 0 = plain attn_q
    qk_nope_dim: int = 0    # N: per-head query/key dims without RoPE
    v_head_dim: int = 0     # V: per-head value width


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
    if arch == "deepseek2":
        return read_mla_config(reader, embed_rows)
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


def read_mla_config(reader: gguf.GGUFReader, embed_rows: int) -> Config:
    """Read deepseek2 (MLA) hyperparameters; refuse what this oracle does not model."""
    key = lambda name: f"deepseek2.{name}"  # noqa: E731
    n_layers = int(field_value(reader, key("block_count")))
    # DeepSeek-V2's first layers are dense and the rest mixture-of-experts;
    # this oracle only has the dense MLP, so every layer must be a leading dense one.
    dense_lead = int(field_value(reader, key("leading_dense_block_count"), 0))
    if dense_lead < n_layers:
        raise ValueError(f"deepseek2: only {dense_lead} of {n_layers} layers are dense; "
                         "mixture-of-experts layers are not supported by the oracle")
    # Real DeepSeek-V2 checkpoints use YaRN, which changes both the RoPE angles
    # and the softmax scale; silently ignoring it would give a wrong "truth".
    scaling = field_value(reader, key("rope.scaling.type"), "none")
    if scaling != "none":
        raise ValueError(f"deepseek2: rope scaling '{scaling}' is not supported by the oracle")
    n_heads = int(field_value(reader, key("attention.head_count")))
    rope_dim = int(field_value(reader, key("rope.dimension_count")))
    key_length = int(field_value(reader, key("attention.key_length")))
    return Config(
        n_layers=n_layers,
        dim=int(field_value(reader, key("embedding_length"))),
        ffn_dim=int(field_value(reader, key("feed_forward_length"))),
        n_heads=n_heads,
        # Every query head has its own (decompressed) key and value, so no grouping.
        n_kv_heads=n_heads,
        head_dim=key_length,
        rope_dim=rope_dim,
        rope_base=float(field_value(reader, key("rope.freq_base"), 10000.0)),
        norm_eps=float(field_value(reader, key("attention.layer_norm_rms_epsilon"))),
        context_length=int(field_value(reader, key("context_length"))),
        vocab_size=int(field_value(reader, key("vocab_size"), embed_rows)),
        arch="deepseek2",
        kv_lora_rank=int(field_value(reader, key("attention.kv_lora_rank"))),
        q_lora_rank=int(field_value(reader, key("attention.q_lora_rank"), 0)),
        qk_nope_dim=key_length - rope_dim,
        v_head_dim=int(field_value(reader, key("attention.value_length"))),
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


@dataclass
class MlaLayer:
    """One deepseek2 layer. H heads, N nope dims, R rope dims, V value dims, C latent."""
    attn_norm: np.ndarray         # [dim]
    wq: np.ndarray | None         # [H*(N+R), dim]   (None when q_lora_rank > 0)
    wq_a: np.ndarray | None       # [Q, dim]         (None when q_lora_rank == 0)
    q_a_norm: np.ndarray | None   # [Q]
    wq_b: np.ndarray | None       # [H*(N+R), Q]
    wkv_a: np.ndarray             # [C+R, dim]
    kv_a_norm: np.ndarray         # [C]
    wkv_b: np.ndarray             # [H*(N+V), C]
    wo: np.ndarray                # [dim, H*V]
    ffn_norm: np.ndarray          # [dim]
    w_gate: np.ndarray            # [ffn_dim, dim]
    w_up: np.ndarray              # [ffn_dim, dim]
    w_down: np.ndarray            # [dim, ffn_dim]


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
    """Grouped-query causal attention, scaled by 1/sqrt(q/k head width).

    q, k: [n, heads, head_dim] (k may have fewer heads); v: [n, kv heads, v_dim]
    (MLA: v_dim != head_dim). Returns [n, n_heads*v_dim].
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
    return out.reshape(n, n_heads * v.shape[-1])


# ----------------------------------------------------------------- the model
def load_llama_layer(weight, n: int) -> Layer:
    """Read one llama layer's weights; `weight(name)` dequantizes a tensor."""
    p = f"blk.{n}."
    return Layer(
        attn_norm=weight(p + "attn_norm.weight"),
        wq=weight(p + "attn_q.weight"),
        wk=weight(p + "attn_k.weight"),
        wv=weight(p + "attn_v.weight"),
        wo=weight(p + "attn_output.weight"),
        ffn_norm=weight(p + "ffn_norm.weight"),
        w_gate=weight(p + "ffn_gate.weight"),
        w_up=weight(p + "ffn_up.weight"),
        w_down=weight(p + "ffn_down.weight"),
    )


def load_mla_layer(weight, tensors: dict, config: Config, n: int) -> MlaLayer:
    """Read one deepseek2 layer's weights (dense MLP only)."""
    p = f"blk.{n}."
    if p + "ffn_gate_inp.weight" in tensors:
        raise ValueError(f"{p}: mixture-of-experts layer, not supported by the oracle")
    if p + "attn_kv_b.weight" not in tensors and p + "attn_k_b.weight" in tensors:
        # Newer llama.cpp conversions split attn_kv_b into attn_k_b / attn_v_b.
        raise ValueError(f"{p}: split attn_k_b/attn_v_b tensors are not supported by the oracle")
    has_q_lora = config.q_lora_rank > 0
    return MlaLayer(
        attn_norm=weight(p + "attn_norm.weight"),
        wq=None if has_q_lora else weight(p + "attn_q.weight"),
        wq_a=weight(p + "attn_q_a.weight") if has_q_lora else None,
        q_a_norm=weight(p + "attn_q_a_norm.weight") if has_q_lora else None,
        wq_b=weight(p + "attn_q_b.weight") if has_q_lora else None,
        wkv_a=weight(p + "attn_kv_a_mqa.weight"),
        kv_a_norm=weight(p + "attn_kv_a_norm.weight"),
        wkv_b=weight(p + "attn_kv_b.weight"),
        wo=weight(p + "attn_output.weight"),
        ffn_norm=weight(p + "ffn_norm.weight"),
        w_gate=weight(p + "ffn_gate.weight"),
        w_up=weight(p + "ffn_up.weight"),
        w_down=weight(p + "ffn_down.weight"),
    )


class OracleModel:
    """All weights of one GGUF, dequantized once to float64."""

    def __init__(self, config: Config, embed: np.ndarray, layers: list[Layer | MlaLayer],
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
        if config.arch == "deepseek2":
            layers = [load_mla_layer(weight, tensors, config, n) for n in range(config.n_layers)]
        else:
            layers = [load_llama_layer(weight, n) for n in range(config.n_layers)]
        output = weight("output.weight") if "output.weight" in tensors else embed
        model = cls(config, embed, layers, weight("output_norm.weight"), output)
        model.check_shapes()
        return model

    def check_shapes(self) -> None:
        c = self.config
        if c.arch == "deepseek2":
            self.check_mla_shapes()
            return
        q_rows, kv_rows = c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim
        expected = {"wq": (q_rows, c.dim), "wk": (kv_rows, c.dim), "wv": (kv_rows, c.dim),
                    "wo": (c.dim, q_rows), "w_gate": (c.ffn_dim, c.dim),
                    "w_up": (c.ffn_dim, c.dim), "w_down": (c.dim, c.ffn_dim)}
        self.check_layer_shapes(expected)
        if self.output.shape != (c.vocab_size, c.dim):
            raise ValueError(f"output: shape {self.output.shape}, expected {(c.vocab_size, c.dim)}")
        if c.n_heads % c.n_kv_heads or c.rope_dim % 2 or c.rope_dim > c.head_dim:
            raise ValueError(f"unsupported head layout: {c}")

    def check_mla_shapes(self) -> None:
        c = self.config
        H, N, R, V, C, Q = (c.n_heads, c.qk_nope_dim, c.rope_dim, c.v_head_dim,
                            c.kv_lora_rank, c.q_lora_rank)
        expected = {"wkv_a": (C + R, c.dim), "kv_a_norm": (C,), "wkv_b": (H * (N + V), C),
                    "wo": (c.dim, H * V), "w_gate": (c.ffn_dim, c.dim),
                    "w_up": (c.ffn_dim, c.dim), "w_down": (c.dim, c.ffn_dim)}
        if Q:
            expected.update({"wq_a": (Q, c.dim), "q_a_norm": (Q,), "wq_b": (H * (N + R), Q)})
        else:
            expected["wq"] = (H * (N + R), c.dim)
        self.check_layer_shapes(expected)
        if self.output.shape != (c.vocab_size, c.dim):
            raise ValueError(f"output: shape {self.output.shape}, expected {(c.vocab_size, c.dim)}")
        if R % 2 or N < 0 or C <= 0 or V <= 0:
            raise ValueError(f"unsupported MLA layout: {c}")

    def check_layer_shapes(self, expected: dict) -> None:
        for i, layer in enumerate(self.layers):
            for name, shape in expected.items():
                got = getattr(layer, name).shape
                if got != shape:
                    raise ValueError(f"blk.{i} {name}: shape {got}, expected {shape}")

    def attention_block(self, layer: Layer | MlaLayer, x: np.ndarray, cos, sin) -> np.ndarray:
        if self.config.arch == "deepseek2":
            return self.mla_attention_block(layer, x, cos, sin)
        c = self.config
        n = x.shape[0]
        h = rmsnorm(x, layer.attn_norm, c.norm_eps)
        q = (h @ layer.wq.T).reshape(n, c.n_heads, c.head_dim)
        k = (h @ layer.wk.T).reshape(n, c.n_kv_heads, c.head_dim)
        v = (h @ layer.wv.T).reshape(n, c.n_kv_heads, c.head_dim)
        q = apply_rope(q, cos, sin, c.rope_dim)
        k = apply_rope(k, cos, sin, c.rope_dim)
        return causal_attention(q, k, v) @ layer.wo.T

    def mla_attention_block(self, layer: MlaLayer, x: np.ndarray, cos, sin) -> np.ndarray:
        """Multi-head latent attention in its naive form: decompress the latent to
        full per-head keys and values, then ordinary causal attention."""
        c = self.config
        n = x.shape[0]
        H, N, R, V, C = c.n_heads, c.qk_nope_dim, c.rope_dim, c.v_head_dim, c.kv_lora_rank
        h = rmsnorm(x, layer.attn_norm, c.norm_eps)

        # Queries, optionally through the low-rank bottleneck (normalized in between).
        if c.q_lora_rank:
            q = rmsnorm(h @ layer.wq_a.T, layer.q_a_norm, c.norm_eps) @ layer.wq_b.T
        else:
            q = h @ layer.wq.T
        q = q.reshape(n, H, N + R)
        q_nope, q_pe = q[:, :, :N], q[:, :, N:]

        # One projection makes both the latent (what an MLA cache stores) and the
        # single RoPE key head; only the latent part is normalized.
        kv_a = h @ layer.wkv_a.T
        c_kv = rmsnorm(kv_a[:, :C], layer.kv_a_norm, c.norm_eps)
        k_pe = kv_a[:, None, C:]                      # [n, 1, R], shared by all heads

        # RoPE covers the whole R-wide rope part; the nope part carries no position.
        q_pe = apply_rope(q_pe, cos, sin, R)
        k_pe = apply_rope(k_pe, cos, sin, R)

        kv = (c_kv @ layer.wkv_b.T).reshape(n, H, N + V)
        k_nope, v = kv[:, :, :N], kv[:, :, N:]

        q = np.concatenate([q_nope, q_pe], axis=-1)
        k = np.concatenate([k_nope, np.broadcast_to(k_pe, (n, H, R))], axis=-1)
        # causal_attention scales by 1/sqrt(q width) = 1/sqrt(N + R).
        return causal_attention(q, k, v) @ layer.wo.T

    def ffn_block(self, layer: Layer | MlaLayer, x: np.ndarray) -> np.ndarray:
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
    parser.add_argument("--model", required=True,
                        help="path to a llama or deepseek2 (dense MLP) GGUF")
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
