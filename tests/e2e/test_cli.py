#!/usr/bin/env python3
"""test_cli.py — the `servelab` program as a user meets it.

Checks that every subcommand runs on a generated tiny model, that --json
output has the documented fields, and that bad input (flags, files, values)
gives ONE line on stderr starting with "servelab: error:" and a non-zero exit:
2 for bad flags, 1 for bad input found at run time. With --smollm2 it also
asks the real model the README's question and checks the answer.

Usage: test_cli.py --servelab PATH [--smollm2 MODEL]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

FAILURES = []
TRACES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "data", "traces")


def run(servelab, *args, stdin="", timeout=300):
    result = subprocess.run([servelab, "-q", *args], input=stdin, capture_output=True,
                            text=True, timeout=timeout)
    return result.returncode, result.stdout, result.stderr


def check(name, condition, detail=""):
    print(f"{'ok  ' if condition else 'FAIL'} {name}" + (f": {detail}" if detail and not condition else ""))
    if not condition:
        FAILURES.append(name)


def expect_error(servelab, name, args, exit_code, needle, stdin="", timeout=300):
    try:
        code, out, err = run(servelab, *args, stdin=stdin, timeout=timeout)
    except subprocess.TimeoutExpired:
        check(f"{name}: exits within {timeout} s", False, "it hung")
        return
    lines = [line for line in err.splitlines() if line.strip()]
    check(f"{name}: exit {exit_code}", code == exit_code, f"got {code}, stderr {err!r}")
    check(f"{name}: one line on stderr", len(lines) == 1, repr(err))
    check(f"{name}: message names the problem", bool(lines) and lines[0].startswith("servelab: error:")
          and needle in lines[0], repr(err))


def test_tiny(servelab, workdir):
    tiny = os.path.join(workdir, "tiny.gguf")
    code, _, err = run(servelab, "make-tiny-model", "-o", tiny, "--seed", "7", "--weight-type", "q8_0")
    check("make-tiny-model", code == 0 and os.path.getsize(tiny) > 0, err)

    code, out, err = run(servelab, "generate", "-m", tiny, "-p", "hello there", "--max-tokens", "5",
                         "--ignore-eos", "--json")
    check("generate --json exits 0", code == 0, err)
    result = json.loads(out) if code == 0 else {}
    for field in ("text", "prompt_tokens", "tokens", "finish_reason", "timings"):
        check(f"generate --json has '{field}'", field in result)
    check("generate --json: 5 tokens, finish length",
          len(result.get("tokens", [])) == 5 and result.get("finish_reason") == "length", out)
    check("generate --json: per-step latencies",
          len(result.get("timings", {}).get("step_latency_ms", [])) == 5, out)

    code, out, err = run(servelab, "generate", "-m", tiny, "--tokens", "5,6,7", "--max-tokens", "3",
                         "--temperature", "0.8", "--seed", "3", "--ignore-eos")
    code2, out2, _ = run(servelab, "generate", "-m", tiny, "--tokens", "5,6,7", "--max-tokens", "3",
                         "--temperature", "0.8", "--seed", "3", "--ignore-eos")
    check("generate streams text and is reproducible with a seed", code == 0 and out == out2, err)

    code, out, err = run(servelab, "info", "-m", tiny)
    check("info", code == 0 and "KV cache:" in out and "blk.0.attn_q.weight" in out, err)
    check("info: a model without a chat template falls back to ChatML",
          "chat template: ChatML fallback: the model has no chat template" in out, out[-400:])
    code, out, err = run(servelab, "info", "-m", tiny, "--json")
    info = json.loads(out) if code == 0 else {}
    check("info --json: the chat template's state",
          info.get("chat_template", {}).get("renders") is False, out[-300:])
    # A template inside the subset is shown and rendered; one outside it is
    # shown with the reason chat falls back to ChatML.
    for name, source, expect in (
            ("supported", "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n"
                          "{% endfor %}{% if add_generation_prompt %}[assistant] {% endif %}",
             "[user] Hello!"),
            ("unsupported", "{% macro turn(m) %}{{ m }}{% endmacro %}{{ turn(messages) }}",
             "ChatML fallback: the model's chat template cannot be rendered")):
        template_path = os.path.join(workdir, f"{name}.jinja")
        with open(template_path, "w") as f:
            f.write(source)
        templated = os.path.join(workdir, f"tiny_{name}.gguf")
        code, _, err = run(servelab, "-q", "make-tiny-model", "-o", templated, "--chat-template",
                           template_path)
        check(f"make-tiny-model --chat-template ({name})", code == 0, err)
        code, out, err = run(servelab, "info", "-m", templated)
        check(f"info shows a {name} chat template and its source",
              code == 0 and expect in out and "template source:" in out
              and source.split("%}")[0] in out, out[-600:])
    check("info --json", info.get("parameters", 0) > 0 and len(info.get("tensors", [])) == 20, out[:200])

    code, out, err = run(servelab, "chat", "-m", tiny, "--max-tokens", "4", stdin="hi\nhow are you\n")
    check("chat reads turns from stdin", code == 0, err)

    code, out, err = run(servelab, "bench", "-m", tiny, "--prompt-tokens", "8", "--gen-tokens", "4",
                         "--repeats", "1", "--json")
    report = json.loads(out) if code == 0 else {}
    check("bench prints JSON", all(k in report for k in
                                    ("prefill_tokens_per_s", "decode_tokens_per_s",
                                     "latency_by_position")), out[:200])

    logits_path = os.path.join(workdir, "logits.f32")
    code, _, err = run(servelab, "logits", "-m", tiny, "--tokens", "1,2,3", "-o", logits_path)
    check("logits writes 3 x vocab floats", code == 0 and
          os.path.getsize(logits_path) == 3 * info.get("metadata", {}).get("llama.vocab_size", 0) * 4, err)

    code, out, err = run(servelab, "devices")
    check("devices", code == 0 and out.startswith("cpu:"), err)

    # Bad input.
    garbage = os.path.join(workdir, "garbage.gguf")
    with open(garbage, "wb") as f:
        f.write(b"not a gguf file at all")
    truncated = os.path.join(workdir, "truncated.gguf")
    with open(tiny, "rb") as f, open(truncated, "wb") as g:
        g.write(f.read()[:1000])
    expect_error(servelab, "unknown flag", ["generate", "--bogus"], 2, "--bogus")
    expect_error(servelab, "no subcommand", [], 2, "subcommand")
    expect_error(servelab, "missing model file", ["generate", "-m", os.path.join(workdir, "none.gguf"),
                                                  "-p", "x"], 1, "cannot open model file")
    expect_error(servelab, "not a GGUF file", ["generate", "-m", garbage, "-p", "x"], 1, "bad magic")
    # A FIFO would block the open until a writer came; it must be refused at once.
    fifo = os.path.join(workdir, "model.fifo")
    os.mkfifo(fifo)
    expect_error(servelab, "a FIFO as the model", ["generate", "-m", fifo, "-p", "x"], 1,
                 "not a regular file", timeout=20)
    expect_error(servelab, "absurd --threads", ["generate", "-m", tiny, "-p", "x", "--threads",
                                                "10000"], 1, "--threads")
    expect_error(servelab, "truncated GGUF file", ["info", "-m", truncated], 1, "truncated")
    expect_error(servelab, "negative temperature", ["generate", "-m", tiny, "-p", "x",
                                                    "--temperature", "-1"], 1, "temperature must be >= 0")
    expect_error(servelab, "bad top_p", ["generate", "-m", tiny, "-p", "x", "--top-p", "0"], 1, "top_p")
    expect_error(servelab, "no prompt", ["generate", "-m", tiny], 1, "give --prompt or --tokens")
    expect_error(servelab, "bad token list", ["generate", "-m", tiny, "--tokens", "1,x"], 1,
                 "'x' is not a token id")
    expect_error(servelab, "token id out of range", ["generate", "-m", tiny, "--tokens", "99999"], 1,
                 "outside the vocabulary")
    expect_error(servelab, "non-numeric flag value", ["generate", "-m", tiny, "-p", "x",
                                                      "--max-tokens", "many"], 2, "max-tokens")
    expect_error(servelab, "bad weight type", ["make-tiny-model", "-o", os.path.join(workdir, "t.gguf"),
                                               "--weight-type", "q9"], 1, "unknown weight type 'q9'")
    expect_error(servelab, "unwritable output", ["make-tiny-model", "-o", "/nonexistent/dir/t.gguf"], 1,
                 "/nonexistent/dir/t.gguf")


def test_kv_compression(servelab, workdir, tiny):
    """Lab 3: --kv-dtype, info --kv, kv-compare, MLA models."""
    code, out, err = run(servelab, "generate", "-m", tiny, "-p", "hello", "--max-tokens", "6",
                         "--ignore-eos", "--kv-dtype", "int8", "--json")
    check("generate --kv-dtype int8", code == 0 and len(json.loads(out).get("tokens", [])) == 6, err)
    code, out, err = run(servelab, "bench", "-m", tiny, "--prompt-tokens", "8", "--gen-tokens", "4",
                         "--repeats", "1", "--kv-dtype", "fp8", "--json")
    check("bench --kv-dtype fp8 reports it", code == 0 and json.loads(out).get("kv_dtype") == "fp8", err)

    code, out, err = run(servelab, "info", "-m", tiny, "--kv", "--kv-budget", "1GiB", "--json")
    report = json.loads(out) if code == 0 else {}
    names = [c.get("name") for c in report.get("configs", [])]
    check("info --kv --json lists the loaded model and the named configs",
          report.get("budget_bytes") == 1 << 30 and names[:1] == ["(loaded model)"] and
          {"SmolLM2-135M", "Llama-2-7B", "Llama-3-8B", "DeepSeek-V2"} <= set(names), out[:300])
    llama2 = next((c for c in report.get("configs", []) if c.get("name") == "Llama-2-7B"), {})
    fp16 = next((f for f in llama2.get("footprints", []) if f.get("dtype") == "f16"), {})
    check("info --kv: Llama-2-7B fp16 is 512 KiB per token, 2 GiB at 4k",
          fp16.get("bytes_per_token") == 512 * 1024 and fp16.get("bytes_at_4k") == 2 << 30, str(fp16))
    code, out, err = run(servelab, "info", "-m", tiny, "--kv")
    check("info --kv prints a table", code == 0 and "DeepSeek-V2" in out and "MLA d_c=512" in out, err)

    code, out, err = run(servelab, "kv-compare", "-m", tiny, "--kv-dtype", "int8", "-p", "hello",
                         "-p", "the cat", "--gen-tokens", "4", "--json")
    total = json.loads(out).get("total", {}) if code == 0 else {}
    check("kv-compare --json: 2 prompts x 4 steps", total.get("compared_steps") == 8, out[:300] + err)

    mla = os.path.join(workdir, "mla.gguf")
    code, _, err = run(servelab, "make-tiny-model", "--mla", "--q-lora-rank", "16", "-o", mla)
    check("make-tiny-model --mla", code == 0, err)
    code, out, err = run(servelab, "info", "-m", mla)
    check("info on an MLA model", code == 0 and "deepseek2" in out and "MLA d_c=32" in out, err)
    texts = []
    for mode in ("absorbed", "naive"):
        code, out, err = run(servelab, "generate", "-m", mla, "-p", "hello", "--max-tokens", "8",
                             "--ignore-eos", "--mla-attention", mode, "--json")
        texts.append(json.loads(out).get("tokens") if code == 0 else err)
    check("MLA: absorbed and naive attention generate the same tokens", texts[0] == texts[1], str(texts))

    expect_error(servelab, "unknown KV dtype", ["generate", "-m", tiny, "-p", "x", "--kv-dtype", "int9"],
                 2, "--kv-dtype")
    expect_error(servelab, "bad KV budget", ["info", "-m", tiny, "--kv", "--kv-budget", "lots"], 1,
                 "'lots' is not a memory size")
    expect_error(servelab, "kv-compare without prompts", ["kv-compare", "-m", tiny], 1,
                 "give -p/--prompt or --prompts-file")


def test_paged(servelab, workdir, tiny):
    """Lab 4: the paged cache in generate/chat, -n, kv-sim, replay, and their errors."""
    tokens = {}
    for layout in ("paged", "contiguous"):
        code, out, err = run(servelab, "generate", "-m", tiny, "-p", "hello there", "--max-tokens", "12",
                             "--ignore-eos", "--kv-layout", layout, "--block-size", "4", "--json")
        tokens[layout] = json.loads(out).get("tokens") if code == 0 else err
    check("generate: paged and contiguous caches give the same tokens",
          tokens["paged"] == tokens["contiguous"] and len(tokens["paged"]) == 12, str(tokens))

    code, out, err = run(servelab, "generate", "-m", tiny, "-p", "hello there", "--max-tokens", "8",
                         "--ignore-eos", "--temperature", "0.9", "--seed", "5", "-n", "3", "--json")
    choices = json.loads(out).get("choices", []) if code == 0 else []
    check("generate -n 3 --json: three completions of 8 tokens",
          len(choices) == 3 and all(len(c["tokens"]) == 8 for c in choices), out[:300] + err)
    check("generate -n 3: completions differ (seeds 5, 6, 7)",
          len({tuple(c["tokens"]) for c in choices}) > 1, str(choices)[:300])
    code, out, err = run(servelab, "generate", "-m", tiny, "-p", "hello there", "--max-tokens", "8",
                         "--ignore-eos", "--temperature", "0.9", "--seed", "6", "--json")
    check("generate -n 3: completion 1 equals a single run with seed + 1",
          code == 0 and len(choices) == 3 and json.loads(out)["tokens"] == choices[1]["tokens"], err)

    code, out, err = run(servelab, "chat", "-m", tiny, "--max-tokens", "4", "--kv-memory", "2MiB",
                         stdin="hello\nand again\n")
    check("chat on the paged cache answers two turns", code == 0 and out.strip() != "", err)

    code, out, err = run(servelab, "kv-sim", "--json", "--kv-memory", "512MiB",
                         "--trace", os.path.join(TRACES, "sharegpt_like.jsonl"))
    report = json.loads(out) if code == 0 else {}
    waste = {p["policy"]: p["waste_fraction"] for p in report.get("policies", [])}
    check("kv-sim --json: static-max wastes > 60%, paged < 4%",
          waste.get("static-max", 0) > 0.6 and waste.get("paged", 1) < 0.04, out[:300] + err)

    long_tiny = os.path.join(workdir, "tiny1024.gguf")
    run(servelab, "make-tiny-model", "-o", long_tiny, "--seed", "3", "--context", "1024")
    results = {}
    for flag in ([], ["--no-prefix-caching"]):
        code, out, err = run(servelab, "replay", "-m", long_tiny, "--limit", "8", "--max-output", "2",
                             "--trace", os.path.join(TRACES, "shared_system_prompt.jsonl"), "--json", *flag)
        results[bool(flag)] = json.loads(out) if code == 0 else {"error": err}
    on, off = results[False], results[True]
    check("replay: the prefix cache serves part of the prompts", on.get("prefix_hit_rate", 0) > 0.2, str(on)[:300])
    check("replay --no-prefix-caching: no hits, more tokens computed",
          off.get("prefix_hit_rate") == 0 and off.get("tokens_computed", 0) > on.get("tokens_computed", 1 << 60),
          str(off)[:300])

    expect_error(servelab, "KV pool too small for the prompt",
                 ["generate", "-m", tiny, "-p", "hello there, this is a longer prompt", "--kv-memory", "1KiB",
                  "--block-size", "2"], 1, "raise --kv-memory")
    expect_error(servelab, "bad --kv-memory", ["generate", "-m", tiny, "-p", "x", "--kv-memory", "lots"], 1,
                 "'lots' is not a memory size")
    expect_error(servelab, "--kv-memory fraction above 1", ["generate", "-m", tiny, "-p", "x", "--kv-memory", "1.5"],
                 1, "a fraction must be in (0, 1]")
    expect_error(servelab, "paged with int8", ["generate", "-m", tiny, "-p", "x", "--kv-layout", "paged",
                                               "--kv-dtype", "int8"], 1, "--kv-layout paged")
    expect_error(servelab, "-n 0", ["generate", "-m", tiny, "-p", "x", "-n", "0"], 2, "-n")
    expect_error(servelab, "kv-sim: unknown config", ["kv-sim", "--config", "GPT-9"], 1, "no model config 'GPT-9'")
    expect_error(servelab, "kv-sim: missing trace", ["kv-sim", "--trace", "/nonexistent.jsonl"], 1,
                 "cannot open trace")
    code, out, err = run(servelab, "bench", "prefix-cache", "--trace",
                         os.path.join(TRACES, "branching.jsonl"), "--kv-blocks", "128",
                         "--prefix-cache", "radix", "--tree-after", "3")
    check("bench prefix-cache --tree-after prints the radix tree without --json",
          code == 0 and out.count("node ") >= 3 and "lock_ref" in out, out[-300:] + err)
    expect_error(servelab, "bench prefix-cache --tree-after with the hash cache",
                 ["bench", "prefix-cache", "--trace", os.path.join(TRACES, "branching.jsonl"),
                  "--prefix-cache", "hash", "--tree-after", "3"], 1, "--prefix-cache radix")
    expect_error(servelab, "replay needs the paged cache",
                 ["replay", "-m", long_tiny, "--kv-layout", "contiguous", "--trace",
                  os.path.join(TRACES, "shared_system_prompt.jsonl")], 1, "paged KV cache")


def test_batching(servelab, workdir):
    """Lab 5: `bench throughput`, continuous and static, its reports and its errors."""
    tiny = os.path.join(workdir, "tiny1024.gguf")  # made by test_paged
    sharegpt = os.path.join(TRACES, "sharegpt_like.jsonl")
    common = ["bench", "throughput", "-m", tiny, "--trace", sharegpt, "--limit", "12", "--max-prompt", "48",
              "--max-output", "8", "--max-concurrency", "5", "--kv-memory", "8MiB"]
    reports = {}
    for batching in ("continuous", "static"):
        path = os.path.join(workdir, f"{batching}.json")
        code, out, err = run(servelab, *common, "--batching", batching, "--json", "--output", path)
        reports[batching] = json.loads(out) if code == 0 else {"error": err}
        check(f"bench throughput --batching {batching}: progress bar ends at 12/12 on stderr",
              "12/12 requests" in err, err[-300:])
        summary = reports[batching].get("summary", {})
        for field in ("output_tokens_per_s", "total_tokens_per_s", "ttft_ms", "tpot_ms", "itl_ms",
                      "e2e_ms", "queue_ms", "kv_utilization_mean", "preemptions", "prefix_hit_rate"):
            check(f"bench throughput --json ({batching}) has '{field}'", field in summary, str(summary)[:200])
        check(f"bench throughput ({batching}): every request gives its 8 tokens",
              summary.get("requests") == 12 and summary.get("output_tokens") == 96, str(summary)[:300])
        full = json.load(open(path)) if os.path.exists(path) else {}
        requests = full.get("requests", [])
        check(f"--output ({batching}): one record per request, in time order within each",
              len(requests) == 12 and all(r["arrival_s"] <= r["start_s"] <= r["first_token_s"] <= r["finish_s"]
                                          for r in requests), str(requests[:2]))
        check(f"--output ({batching}): one record per step",
              len(full.get("steps", [])) == summary.get("steps"), str(full.get("steps", [])[:2]))
    # Static batching holds a batch's rows until its slowest request ends: never fewer steps.
    steps = {b: r.get("summary", {}).get("steps", 0) for b, r in reports.items()}
    check("static batching takes at least as many steps", steps["static"] >= steps["continuous"] > 0, str(steps))

    code, out, err = run(servelab, *common, "--request-rate", "40", "--seed", "3", "--no-progress")
    check("bench throughput: Poisson arrivals, a table on stdout, nothing on stderr",
          code == 0 and "time to first token" in out and "output tokens/s" in out and err.strip() == "",
          out[:300] + err)

    expect_error(servelab, "bench throughput: missing trace",
                 ["bench", "throughput", "-m", tiny, "--trace", "/nonexistent.jsonl"], 1, "cannot open trace")
    expect_error(servelab, "bench throughput: unknown batching",
                 ["bench", "throughput", "-m", tiny, "--batching", "sometimes"], 2, "--batching")
    expect_error(servelab, "bench throughput: a prompt longer than the context",
                 ["bench", "throughput", "-m", os.path.join(workdir, "tiny.gguf"), "--trace", sharegpt,
                  "--limit", "40", "--no-progress"], 1, "does not fit the context length")
    # Without chunked prefill a step must hold a whole prompt: one longer than the
    # token budget is refused at once (it could never be scheduled), naming the flag.
    expect_error(servelab, "bench throughput: a prompt over the budget without chunked prefill",
                 ["bench", "throughput", "-m", tiny, "--trace", sharegpt, "--limit", "1",
                  "--max-num-batched-tokens", "16", "--no-chunked-prefill", "--no-progress"], 1,
                 "--max-num-batched-tokens")
    expect_error(servelab, "bench throughput needs the paged cache",
                 ["bench", "throughput", "-m", tiny, "--trace", sharegpt, "--kv-layout", "contiguous"], 1,
                 "paged KV cache")


def test_smollm2(servelab, model):
    # The question `make run` asks. Greedy, so the answer is fixed.
    code, out, err = run(servelab, "chat", "-m", model, "--message",
                         "What is the capital of France? Answer in one sentence.", "--max-tokens", "24")
    print(out.strip())
    check("SmolLM2 chat answers the fixed question", code == 0 and "Paris" in out, err + out)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--servelab", required=True)
    parser.add_argument("--smollm2", help="run the real-model chat check with this GGUF")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as workdir:
        if args.smollm2:
            if not os.path.exists(args.smollm2):
                print(f"skipped: {args.smollm2} not downloaded (run make setup)")
                return 77
            test_smollm2(args.servelab, args.smollm2)
        else:
            test_tiny(args.servelab, workdir)
            test_kv_compression(args.servelab, workdir, os.path.join(workdir, "tiny.gguf"))
            test_paged(args.servelab, workdir, os.path.join(workdir, "tiny.gguf"))
            test_batching(args.servelab, workdir)
    print(f"{'FAILED' if FAILURES else 'PASSED'}: {len(FAILURES)} check(s) failed")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
