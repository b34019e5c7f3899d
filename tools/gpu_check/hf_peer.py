#!/usr/bin/env python3
"""hf_peer.py — the peer for tools/gpu_check.sh: SmolLM2-135M's shapes through transformers' generate.

CUDA backend (issue 7). Run on the GPU machine only where PyTorch and
transformers are already installed (it downloads nothing): a LlamaForCausalLM
with SmolLM2-135M's configuration (30 layers, hidden 576, 9 query / 3 KV
heads, FFN 1536, vocabulary 49152, tied head, rope theta 100000), randomly
initialized, in bf16 on the GPU. The same workload as e2e_bench's decode
rows: batch B of 32-token random prompts, 128 new tokens each (greedy, EOS
ignored through min_new_tokens), timed after one warm-up; decode tokens/s is
B * 128 over the generate time minus a 1-token generate's time (the prefill).
Prints one line per batch size and one JSON line per figure (lines with '#').
"""
import json
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

PROMPT_TOKENS = 32
NEW_TOKENS = 128


def timed_generate(model, prompts, new_tokens):
    torch.cuda.synchronize()
    start = time.perf_counter()
    model.generate(prompts, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                   do_sample=False, pad_token_id=0)
    torch.cuda.synchronize()
    return time.perf_counter() - start


def main():
    config = LlamaConfig(hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                         num_attention_heads=9, num_key_value_heads=3, vocab_size=49152,
                         max_position_embeddings=8192, rope_theta=100000.0,
                         tie_word_embeddings=True, rms_norm_eps=1e-5)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).to(device="cuda", dtype=torch.bfloat16).eval()
    with torch.inference_mode():
        for batch in (1, 64):
            prompts = torch.randint(0, config.vocab_size, (batch, PROMPT_TOKENS), device="cuda")
            timed_generate(model, prompts, 8)  # warm-up
            prefill_s = timed_generate(model, prompts, 1)
            total_s = timed_generate(model, prompts, NEW_TOKENS)
            tokens_per_s = batch * (NEW_TOKENS - 1) / max(total_s - prefill_s, 1e-9)
            print(f"transformers {__import__('transformers').__version__} generate, "
                  f"batch {batch}: {tokens_per_s:.0f} decode tokens/s")
            print("# " + json.dumps({"case": "hf_decode", "batch": batch,
                                     "tokens_per_s": round(tokens_per_s, 1)}))


if __name__ == "__main__":
    main()
