#!/usr/bin/env python3
"""test_multi_model.py — one `servelab serve` serving two models, driven by the official client.

Starts `serve --model SmolLM2 --model tiny.gguf` (a generated tiny model) and checks:
  * /v1/models lists both; an unknown model gets 404 naming both;
  * the two models, asked at the same time from two client threads, each
    answer exactly what `servelab generate` answers offline for that model
    (greedy), chat and completions;
  * /metrics carries a model label on every model's sample, and each model's
    request counter counts its own requests;
  * one saturated model does not stall the other beyond the stated bound:
    the engine loops take turns, so while the small model's request runs
    the saturated model steps at most once per step of the small one
    (counted with servelab_engine_steps_total, not timed; the latencies are
    printed for reference);
  * the KV budget split is printed at start.
Exits 77 (skipped) when the SmolLM2 file is missing.
Usage: test_multi_model.py --servelab build/release/servelab
"""
import argparse
import concurrent.futures
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

import openai

from serve_helpers import Server

SMOL = os.path.join(os.path.dirname(__file__), "..", "..", "data", "models",
                    "SmolLM2-135M-Instruct.Q4_1.gguf")
PROMPTS = ["The capital of France is", "Once upon a time", "def fibonacci(n):",
           "The three primary colours are"]


def offline(servelab, model, prompt, max_tokens):
    done = subprocess.run(
        [servelab, "-q", "generate", "--model", model, "--prompt", prompt, "--temperature", "0",
         "--max-tokens", str(max_tokens), "--json"],
        capture_output=True, text=True, check=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    return json.loads(done.stdout)["text"]


def check_models_listed(server):
    client = server.client()
    assert [m.id for m in client.models.list().data] == ["smol", "tiny"]
    try:
        client.completions.create(model="gpt-4", prompt="a", max_tokens=1)
        sys.exit("an unknown model was accepted")
    except openai.NotFoundError as e:
        assert "'smol', 'tiny'" in str(e), e
    print("  /v1/models lists both; an unknown model gets 404 naming them: ok")


def check_each_answers_as_alone(server, servelab, tiny):
    files = {"smol": SMOL, "tiny": tiny}
    expected = {(name, p): offline(servelab, path, p, 16)
                for name, path in files.items() for p in PROMPTS}
    client = server.client()

    def ask_all(name):
        return {(name, p): client.completions.create(model=name, prompt=p, max_tokens=16,
                                                     temperature=0).choices[0].text
                for p in PROMPTS}

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        answers = {}
        for part in pool.map(ask_all, files):
            answers.update(part)
    for key, text in expected.items():
        assert answers[key] == text, (key, answers[key], text)
    chat = client.chat.completions.create(
        model="smol", messages=[{"role": "user", "content": "Say hello."}], max_tokens=8,
        temperature=0)
    assert chat.choices[0].message.content, chat
    print(f"  {len(expected)} greedy answers, both models at once, equal the offline ones: ok")


def check_labelled_metrics(server):
    metrics = server.metrics()
    smol = metrics['servelab_request_success_total{model="smol"}']
    tiny = metrics['servelab_request_success_total{model="tiny"}']
    assert smol == len(PROMPTS) + 1 and tiny == len(PROMPTS), (smol, tiny)
    assert 'servelab_kv_cache_blocks{model="smol"}' in metrics
    assert metrics["servelab_request_success_total"] == smol + tiny
    print("  /metrics: every model's samples labelled, requests counted per model: ok")


def check_saturation_bound(server, servelab, tiny):
    client = server.client(timeout=300)
    num_saturating = 12
    done = []

    def saturate(i):
        stream = client.completions.create(model="smol", prompt=f"Story number {i}:",
                                           max_tokens=64, temperature=0.8, seed=i, stream=True)
        done.append(sum(1 for _ in stream))

    threads = [threading.Thread(target=saturate, args=(i,)) for i in range(num_saturating)]
    for t in threads:
        t.start()
    deadline = time.time() + 60
    while server.metrics()['servelab_num_requests_running{model="smol"}'] < num_saturating // 2:
        assert time.time() < deadline, "the saturating requests never ran"
        time.sleep(0.05)

    prompt = "The quick brown fox"
    before = server.metrics()
    start = time.perf_counter()
    answer = client.completions.create(model="tiny", prompt=prompt, max_tokens=32,
                                       temperature=0)
    loaded_s = time.perf_counter() - start
    after = server.metrics()
    still_running = after['servelab_num_requests_running{model="smol"}']

    def steps(name):
        key = f'servelab_engine_steps_total{{model="{name}"}}'
        return int(after[key] - before[key])

    smol_steps, tiny_steps = steps("smol"), steps("tiny")
    for t in threads:
        t.join()
    assert len(done) == num_saturating
    assert answer.choices[0].text == offline(servelab, tiny, prompt, 32), answer
    start = time.perf_counter()
    client.completions.create(model="tiny", prompt=prompt, max_tokens=32, temperature=0)
    alone_s = time.perf_counter() - start
    print(f"  tiny's request ({answer.usage.completion_tokens} tokens) while smol ran "
          f"{still_running:.0f}+ requests: {tiny_steps} tiny steps, {smol_steps} smol steps; "
          f"{loaded_s:.2f} s against {alone_s:.2f} s alone")
    assert still_running > 0, "smol was no longer saturated: the check proves nothing"
    # (A step's tokens reach the client just before the step is counted.)
    assert tiny_steps >= answer.usage.completion_tokens - 1, (tiny_steps, answer.usage)
    # The bound: one step of smol per step of tiny, plus the step under way
    # when the request came, one before its first step, and two while the
    # client reads the counters.
    assert smol_steps <= tiny_steps + 4, (
        f"smol took {smol_steps} steps while tiny took {tiny_steps}: the engine loops must "
        "take turns (one step of each model with work per round)")
    print("  a saturated model steps at most once per step of the other: ok")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--servelab", required=True)
    args = parser.parse_args()
    if not os.path.exists(SMOL):
        print(f"skipped: {SMOL} is missing (make model)")
        sys.exit(77)
    with tempfile.TemporaryDirectory() as folder:
        tiny = os.path.join(folder, "tiny.gguf")
        subprocess.run([args.servelab, "-q", "make-tiny-model", "-o", tiny, "--seed", "3",
                        "--context", "4096"], check=True)
        # 256 MiB split for the same number of tokens holds about 5,000 tokens of each: the
        # longest request is capped below that (a pool must hold one).
        server = Server(args.servelab, models=[(SMOL, "smol"), (tiny, "tiny")],
                        extra=["--max-model-len", "4096"], kv_memory="256MiB")
        try:
            check_models_listed(server)
            check_each_answers_as_alone(server, args.servelab, tiny)
            check_labelled_metrics(server)
            check_saturation_bound(server, args.servelab, tiny)
        finally:
            log = server.stop()
        assert "split for the same number of tokens per model" in log, log[-3000:]
        assert "'smol': weights" in log and "'tiny': weights" in log, log[-3000:]
        print("  the KV budget split is shown at start: ok")
    print("multi-model serving: all checks passed")


if __name__ == "__main__":
    main()
