#!/usr/bin/env python3
"""make_llamacpp_goldens.py — record llama.cpp's greedy continuations as golden data.

Why
---
The numpy oracle (tools/goldens/numpy_oracle.py) checks servelab's logits against the
same math done in float64. This file adds a different, external reference:
what llama.cpp itself generates from the same GGUF. It writes
data/golden/llamacpp_greedy.json, which is committed; tests compare servelab's
greedy output with it.

How
---
llama.cpp is driven through its Python binding (PyPI `llama-cpp-python`) on the
low-level path, so each step is exactly an argmax of llama.cpp's logits with
no sampler in between:

    llm.reset(); llm.eval(prompt_ids)
    repeat up to 48 times:
        logits = llm.scores[llm.n_tokens - 1]
        token  = argmax(logits)            (record it, its logit, the top-2 gap)
        stop if token is end-of-sequence, else llm.eval([token])

Prompts are tokenized by llama.cpp itself (no BOS: the model's
add_bos_token is false); chat prompts use the ChatML template with special
tokens parsed. The token ids are recorded, so a consumer never needs a tokenizer.

Why exact agreement is not expected everywhere
----------------------------------------------
llama.cpp's CPU backend quantizes activations before quantized matmuls
(Q8_1 for Q4_1 weights, Q8_0 for the Q8_0 embedding/output matrix) and stores
the KV cache in F16. On this 30-layer model that moves logits by a few percent
of their range compared with exact float math, so wherever the top-2 gap is
small (see top2_gaps) an exact engine may pick the other token, and from there
on the continuations differ. With --oracle, the float64 numpy oracle is run on
each recorded sequence and the first step where its argmax differs from
llama.cpp's is stored (oracle_first_divergence): up to there, an engine that
matches the oracle should reproduce the golden tokens exactly.

    .venv/bin/python tools/goldens/make_llamacpp_goldens.py    # writes the JSON
    .venv/bin/python tools/goldens/make_llamacpp_goldens.py --no-oracle
"""
from __future__ import annotations

import argparse
import datetime
import json
import pathlib
import sys

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools" / "setup"))
from fetch_model import sha256_of  # noqa: E402  (the one file hash every golden and download uses)
DEFAULT_MODEL = ROOT / "data" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_OUT = ROOT / "data" / "golden" / "llamacpp_greedy.json"

N_THREADS = 2
N_CTX = 512
MAX_NEW_TOKENS = 48
SYSTEM_PROMPT = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"

PLAIN_PROMPTS = {
    "capital_france": "The capital of France is",
    "once_upon": "Once upon a time, in a small village nestled between rolling hills, there lived",
    "photosynthesis": "Photosynthesis is the process by which",
    "python_fib": "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "counting": "1, 2, 3, 4, 5,",
    "recipe": "To make a simple pancake batter, you will need",
    "history": "The first person to walk on the Moon was",
    "list_planets": "The planets of the solar system, in order from the Sun, are",
    "weather": "It was a cold and rainy morning when",
    "definition_ml": "Machine learning is a field of computer science that",
    "letter": "Dear Sir or Madam,\n\nI am writing to",
    "json_start": "{\"name\": \"Alice\", \"age\":",
    "french": "Bonjour, je m'appelle",
}

CHAT_QUESTIONS = {
    "chat_math": "What is 2+2?",
    "chat_capital": "What is the capital of Japan?",
    "chat_haiku": "Write a haiku about the sea.",
    "chat_gravity": "Explain gravity to a five-year-old.",
    "chat_python": "How do I reverse a list in Python?",
    "chat_greeting": "Hi! Who are you?",
    "chat_colors": "Name three primary colors.",
    "chat_tips": "Give me two tips for sleeping better.",
    "chat_translate": "Translate 'good morning' into Spanish.",
    "chat_sky": "Why is the sky blue?",
    "chat_one_word": "Answer with one word: what color is grass?",
    "chat_story": "Tell me a very short story about a robot.",
    "chat_sum": "What is the sum of 15 and 27?",
}


def chatml(question: str) -> str:
    return (f"<|im_start|>system\n{SYSTEM_PROMPT}<|im_end|>\n"
            f"<|im_start|>user\n{question}<|im_end|>\n"
            f"<|im_start|>assistant\n")


def top2(logits: np.ndarray) -> tuple[int, float, float]:
    """(argmax, top-1 logit, top-1 minus top-2 logit). Ties go to the lowest id."""
    best = int(np.argmax(logits))
    second = np.max(np.delete(logits, best))
    return best, float(logits[best]), float(logits[best] - second)


def greedy(llm, prompt_ids: list[int], stop_ids: dict[int, str]) -> dict:
    """Greedy-decode MAX_NEW_TOKENS tokens with llama.cpp; the stop token is kept."""
    llm.reset()
    llm.eval(prompt_ids)
    generated, gaps, top1 = [], [], []
    stop_reason = "max_tokens"
    for _ in range(MAX_NEW_TOKENS):
        logits = np.asarray(llm.scores[llm.n_tokens - 1], dtype=np.float64)
        token, value, gap = top2(logits)
        generated.append(token)
        top1.append(round(value, 5))
        gaps.append(round(gap, 5))
        if token in stop_ids:
            stop_reason = stop_ids[token]
            break
        llm.eval([token])
    return {"generated_ids": generated, "top2_gaps": gaps, "top1_logits": top1,
            "stop_reason": stop_reason}


def oracle_first_divergence(oracle, prompt_ids: list[int], generated: list[int]):
    """First generated step where the float64 oracle's argmax differs from llama.cpp's."""
    sequence = prompt_ids + generated[:-1]
    logits = oracle.forward(sequence)[len(prompt_ids) - 1:]
    for step, (row, token) in enumerate(zip(logits, generated)):
        if int(np.argmax(row)) != token:
            return step
    return None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=str(DEFAULT_MODEL))
    parser.add_argument("--out", default=str(DEFAULT_OUT))
    parser.add_argument("--no-oracle", action="store_true",
                        help="skip the float64 oracle divergence check")
    args = parser.parse_args(argv)

    import llama_cpp
    from llama_cpp import Llama

    model_path = pathlib.Path(args.model)
    llm = Llama(model_path=str(model_path), n_ctx=N_CTX, n_threads=N_THREADS,
                logits_all=True, verbose=False, seed=0)
    eos = llm.token_eos()
    im_end = llm.tokenize(b"<|im_end|>", add_bos=False, special=True)
    if len(im_end) != 1:
        raise SystemExit(f"<|im_end|> is not one token: {im_end}")
    im_end = im_end[0]
    stop_ids = {im_end: "im_end", eos: "eos"}  # for SmolLM2 both are id 2; eos wins the name

    oracle = None
    if not args.no_oracle:
        sys.path.insert(0, str(ROOT / "tools" / "goldens"))
        import numpy_oracle
        oracle = numpy_oracle.OracleModel.load(str(model_path))

    prompts = [(name, text, False) for name, text in PLAIN_PROMPTS.items()]
    prompts += [(name, chatml(q), True) for name, q in CHAT_QUESTIONS.items()]
    records = []
    for name, text, special in prompts:
        ids = llm.tokenize(text.encode("utf-8"), add_bos=False, special=special)
        record = {"name": name, "text": text, "special": special, "prompt_ids": ids}
        record.update(greedy(llm, ids, stop_ids))
        if oracle is not None:
            record["oracle_first_divergence"] = oracle_first_divergence(
                oracle, ids, record["generated_ids"])
        continuation = llm.detokenize(record["generated_ids"], special=True)
        record["generated_text"] = continuation.decode("utf-8", errors="replace")
        records.append(record)
        print(f"{name:<16} prompt {len(ids):>3}  generated {len(record['generated_ids']):>2} "
              f"({record['stop_reason']}), min gap {min(record['top2_gaps']):.4f}, "
              f"oracle diverges at {record.get('oracle_first_divergence')}", file=sys.stderr)

    header = {
        "llama_cpp_python": llama_cpp.__version__,
        "model_file": model_path.name,
        "model_sha256": sha256_of(model_path),
        "n_threads": N_THREADS,
        "n_ctx": N_CTX,
        "max_new_tokens": MAX_NEW_TOKENS,
        "date": datetime.date.today().isoformat(),
        "system_info": llama_cpp.llama_print_system_info().decode().strip(),
        "stop_token_ids": {"eos": eos, "im_end": im_end},
        "note": (
            "Greedy (argmax) continuations from llama.cpp via llama-cpp-python's low-level "
            "eval/scores path, logits_all=True, default KV cache type (F16), flash_attn off, "
            "CPU build from source with default flags (native SIMD; see system_info). "
            "Prompts tokenized by llama.cpp without BOS; chat prompts use ChatML with "
            "special=True. generated_ids includes the stop token when one was produced. "
            "top2_gaps[i] / top1_logits[i] describe llama.cpp's logits at generated step i. "
            "llama.cpp quantizes activations to Q8_1/Q8_0 before Q4_1/Q8_0 matmuls and keeps "
            "K/V in F16, so an exact-float engine can pick differently where the gap is "
            "small; oracle_first_divergence is the first step where the float64 numpy oracle "
            "(tools/goldens/numpy_oracle.py) disagrees with llama.cpp (null: never)."),
    }
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"header": header, "prompts": records}, indent=1,
                              ensure_ascii=False) + "\n")
    print(f"wrote {len(records)} prompts to {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
