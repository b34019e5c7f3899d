#!/usr/bin/env python3
"""test_router.py — `servelab route` in front of `servelab serve` replicas (chapter 11.7).

Two checks, each its own ctest entry (--check):
  killed_backend  three replicas of a generated tiny model behind a round-robin
                  router; 60 requests (whole and streamed, completions and chat)
                  from 6 clients while one replica is killed with SIGKILL. Every
                  request succeeds, except streams that had already received a
                  chunk from the killed replica, and those end with the router's
                  error event, not a hang; every request sent after the kill
                  succeeds; the router's /health and /metrics show the replica
                  out; every answer equals the one a replica gives directly
                  (greedy). Also: a client that leaves a stream cancels it on the
                  replica, the OpenAI-style 400 / 404 / 413 / 503 bodies, /tokenize,
                  /detokenize and /v1/models/{id} forwarded, the CLI's one-line
                  refusals, and SIGTERM exiting 0.
  cache_aware     three SmolLM2 replicas with small KV pools (each holds about 2 of
                  the trace's 6 system prompts), the same shared-system-prompt
                  trace through a round-robin router and then, on fresh replicas,
                  a cache-aware one: the cache-aware router's prefix hit rate is
                  higher by a clear margin and its median TTFT lower (a ratio
                  measured in the same run). Skipped (exit 77) without the model.
The trace and the measuring are shared with test_router_nginx.py.
Usage: test_router.py --servelab build/release/servelab [--check killed_backend|cache_aware]
"""
import argparse
import concurrent.futures
import json
import math
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

import openai

from serve_helpers import Server, free_port

SMOLLM2 = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "data", "models",
                       "SmolLM2-135M-Instruct.Q4_1.gguf")

# A metric line: name, an optional {label set}, value. Label sets are summed over.
METRIC_LINE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})?\s+(\S+)$")


def metrics_of(url, timeout=5):
    """{name: {label set ("" when none): value}} from a Prometheus text page."""
    text = urllib.request.urlopen(url + "/metrics", timeout=timeout).read().decode()
    values = {}
    for line in text.splitlines():
        match = METRIC_LINE.match(line)
        if match and not line.startswith("#"):
            values.setdefault(match.group(1), {})[match.group(2) or ""] = float(match.group(3))
    return values


def metric_sum(url, name):
    return sum(metrics_of(url).get(name, {}).values())


def get(url, timeout=5):
    """(status, parsed JSON body) of a GET, whatever the status."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def post(url, body, timeout=30):
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def assert_openai_error(status, body, want_status):
    assert status == want_status, (status, body)
    assert set(body["error"]) >= {"message", "type", "param", "code"}, body


class Router:
    """`servelab route` on a free port, its log in a file (a pipe nobody reads could fill)."""

    def __init__(self, servelab, backends, policy, extra=(), log_folder=None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tempfile.NamedTemporaryFile("w+", suffix=".log", dir=log_folder, delete=False)
        command = [servelab, "route", "--port", str(self.port), "--policy", policy, *extra]
        for backend in backends:
            command += ["--backend", backend]
        self.process = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT)
        for _ in range(400):
            try:
                urllib.request.urlopen(self.url + "/health", timeout=1)
                return
            except urllib.error.HTTPError:
                return  # 503: up, with no healthy backend
            except OSError:
                if self.process.poll() is not None:
                    sys.exit("router exited: " + self.log_text())
                time.sleep(0.05)
        sys.exit("router did not start: " + self.log_text())

    def log_text(self):
        self.log.flush()
        with open(self.log.name) as log:
            return log.read()[-3000:]

    def client(self, timeout=60.0):
        return openai.OpenAI(base_url=self.url + "/v1", api_key="none", max_retries=0,
                             timeout=timeout)

    def stop(self, timeout=60):
        self.process.send_signal(signal.SIGTERM)
        rc = self.process.wait(timeout=timeout)
        assert rc == 0, ("router exit status after SIGTERM", rc, self.log_text())
        os.unlink(self.log.name)


def wait_until(predicate, seconds, what):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    sys.exit(f"timed out ({seconds} s) waiting for {what}")


# ---- killed_backend -------------------------------------------------------------------------

PROMPTS = [f"the {word} of request {i}:" for i, word in
           enumerate(["river", "stone", "cloud", "lamp", "field", "glass", "tower", "road"])]
MAX_TOKENS = 8


def ask(client, prompt, chat, stream, record):
    """One greedy request; fills record with sent time, chunks received, text or error."""
    record.update(sent=time.monotonic(), chunks=0, text=None, error=None)
    text = ""
    try:
        if chat:
            reply = client.chat.completions.create(
                model="tiny", messages=[{"role": "user", "content": prompt}],
                max_tokens=MAX_TOKENS, temperature=0, stream=stream)
        else:
            reply = client.completions.create(model="tiny", prompt=prompt, max_tokens=MAX_TOKENS,
                                              temperature=0, stream=stream)
        if not stream:
            text = reply.choices[0].message.content if chat else reply.choices[0].text
        else:
            for chunk in reply:
                record["chunks"] += 1
                if chunk.choices:
                    choice = chunk.choices[0]
                    text += (choice.delta.content or "") if chat else choice.text
        record["text"] = text
    except openai.APIError as error:
        record["error"] = error


def direct_answers(replica):
    client = replica.client()
    answers = {}
    for prompt in PROMPTS:
        for chat in (False, True):
            record = {}
            ask(client, prompt, chat, False, record)
            assert record["error"] is None, record
            answers[(prompt, chat)] = record["text"]
    return answers


def start_long_stream(client, results, key):
    """A stream of 60,000 tokens (tens of seconds); returns once its first chunk has arrived."""
    started = threading.Event()

    def run():
        chunks = 0
        try:
            stream = client.completions.create(model="tiny", prompt=f"long {key}",
                                               max_tokens=60000, temperature=0, stream=True,
                                               extra_body={"ignore_eos": True})
            for _ in stream:
                chunks += 1
                started.set()
                if results.get(("close", key)):
                    stream.close()  # the client leaves: the replica must cancel
                    results[key] = ("closed", chunks)
                    return
            results[key] = ("finished", chunks)
        except openai.APIError as error:
            results[key] = (error, chunks)
        finally:
            started.set()

    thread = threading.Thread(target=run)
    thread.start()
    assert started.wait(30), "a long stream did not start"
    return thread


def check_killed_backend(servelab, folder):
    model = os.path.join(folder, "tiny.gguf")
    # A long context, so that the long streams below outlast the workload by far.
    subprocess.run([servelab, "-q", "make-tiny-model", "-o", model, "--seed", "3",
                    "--context", "65536"], check=True)
    replicas = [Server(servelab, model) for _ in range(3)]
    router = None
    try:
        expected = direct_answers(replicas[0])
        router = Router(servelab, [r.url for r in replicas], "round-robin",
                        ["--health-interval", "0.2"], folder)
        client = router.client(timeout=60)
        check_front_errors(router)
        check_forwarded_routes(router, replicas[0])

        # Three long streams, one per replica (round robin, nothing else in flight).
        long_results = {}
        long_threads = [start_long_stream(client, long_results, k) for k in range(3)]
        victim = replicas[1]

        records = [{} for _ in range(60)]
        jobs = [(PROMPTS[i % len(PROMPTS)], i % 4 >= 2, i % 2 == 1) for i in range(60)]
        kill_time = None
        with concurrent.futures.ThreadPoolExecutor(6) as pool:
            futures = [pool.submit(ask, client, p, chat, stream, records[i])
                       for i, (p, chat, stream) in enumerate(jobs)]
            done = 0
            for _ in concurrent.futures.as_completed(futures):
                done += 1
                if done == 20:
                    victim.process.kill()
                    victim.process.wait()
                    kill_time = time.monotonic()

        # The outcomes.
        failed_started = 0
        for record, (prompt, chat, stream) in zip(records, jobs):
            want = expected[(prompt, chat)]
            if record["error"] is None:
                assert record["text"] == want, ("not the replica's answer", record, want)
                continue
            assert stream and record["chunks"] > 0, ("a request that had not started failed",
                                                     prompt, chat, stream, record)
            body = getattr(record["error"], "body", None)
            assert isinstance(body, dict) and body.get("code") == "backend_failed", \
                ("a started stream failed without the router's error event", record)
            assert record["sent"] < kill_time, ("a request sent after the kill failed", record)
            failed_started += 1
        after_kill = sum(1 for r in records if r["sent"] > kill_time)

        # The long stream on the killed replica ended with the error event; the two others
        # still flow, and when their clients leave, their replicas cancel them.
        wait_until(lambda: any(isinstance(long_results.get(k, (None,))[0], openai.APIError)
                               for k in range(3)), 30,
                   "the long stream on the killed replica to end")
        broken = [k for k in range(3) if k in long_results]
        assert len(broken) == 1, ("the long streams should outlast the workload", long_results)
        error, chunks = long_results[broken[0]]
        assert isinstance(error, openai.APIError) and error.body.get("code") == "backend_failed", \
            (error, chunks)
        survivors = [r for r in replicas if r is not victim]
        cancelled_before = sum(metric_sum(r.url, "servelab_request_cancelled_total")
                               for r in survivors)
        for k in range(3):
            long_results[("close", k)] = True
        for thread in long_threads:
            thread.join(30)
            assert not thread.is_alive(), "a long stream hung"
        assert all(long_results[k][0] == "closed" for k in range(3) if k != broken[0]), long_results
        wait_until(lambda: sum(metric_sum(r.url, "servelab_request_cancelled_total")
                               for r in survivors) >= cancelled_before + 2, 20,
                   "the replicas to cancel the streams their clients left")

        # The router shows the replica out; /health still 200 (two are healthy).
        status, health = get(router.url + "/health")
        assert status == 200 and health["healthy_backends"] == 2, health
        healthy = metrics_of(router.url)["servelab_router_backend_healthy"]
        assert healthy[f'{{backend="{victim.url}"}}'] == 0, healthy
        assert sum(healthy.values()) == 2, healthy
        retries = metric_sum(router.url, "servelab_router_retries_total")
        print(f"  killed replica: 60 requests, {sum(r['error'] is None for r in records)} ok, "
              f"{failed_started} started streams ended by the error event, {after_kill} sent "
              f"after the kill (all ok), {int(retries)} retries; answers equal the replica's; "
              f"the long stream on it got the error event, the others were cancelled on "
              f"their replicas when their clients left: ok")

        # Requests sent now succeed, and the union of models is the one model.
        for prompt in PROMPTS[:3]:
            record = {}
            ask(client, prompt, True, True, record)
            assert record["error"] is None and record["text"] == expected[(prompt, True)], record
        assert [m.id for m in client.models.list().data] == ["tiny"]
        check_api_key(servelab, survivors, folder)

        # No healthy replica: 503 with an OpenAI-style body, and /health says so.
        for replica in survivors:
            replica.stop()
        status, body = post(router.url + "/v1/completions",
                            json.dumps({"model": "tiny", "prompt": "x"}).encode())
        assert_openai_error(status, body, 503)
        wait_until(lambda: get(router.url + "/health")[0] == 503, 10, "/health to say 503")
        print("  no healthy replica: 503 with an OpenAI-style body, /health 503: ok")
        router.stop()
        router = None
        print("  SIGTERM: the router exited 0: ok")
    finally:
        for replica in replicas:
            if replica.process.poll() is None:
                replica.process.kill()
        if router is not None:
            router.process.kill()
    check_cli_refusals(servelab)


def check_front_errors(router):
    status, body = post(router.url + "/v1/completions", b"{not json")
    assert_openai_error(status, body, 400)
    status, body = post(router.url + "/v1/completions", b"[1, 2]")
    assert_openai_error(status, body, 400)
    status, body = get(router.url + "/v1/nothing")
    assert_openai_error(status, body, 404)
    status, body = post(router.url + "/v1/completions",
                        json.dumps({"model": "tiny", "prompt": "a" * (2 << 20)}).encode())
    assert_openai_error(status, body, 413)
    # The replica's own refusals are relayed as they are.
    status, body = post(router.url + "/v1/completions",
                        json.dumps({"model": "gpt-4", "prompt": "a"}).encode())
    assert_openai_error(status, body, 404)
    print("  router errors: bad JSON 400, unknown route 404, 2 MiB body 413, the replica's "
          "404 relayed: ok")


def check_forwarded_routes(router, replica):
    """/tokenize, /detokenize and /v1/models/{id} through the router answer as a replica does
    (and its 404 for an unknown model is relayed)."""
    bodies = [("/tokenize", {"model": "tiny", "prompt": "the river"}),
              ("/tokenize", {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}),
              ("/detokenize", {"model": "tiny", "tokens": [1, 80, 90, 100]}),
              ("/tokenize", {"model": "gpt-4", "prompt": "a"})]
    for path, body in bodies:
        encoded = json.dumps(body).encode()
        direct = post(replica.url + path, encoded)
        routed = post(router.url + path, encoded)
        assert routed == direct, (path, body, routed, direct)
    assert direct[0] == 404 and direct[1]["error"]["code"] == "model_not_found", direct
    model = router.client().models.retrieve("tiny")
    assert model.id == "tiny" and model.object == "model", model
    try:
        router.client().models.retrieve("gpt-4")
        sys.exit("the router found /v1/models/gpt-4")
    except openai.NotFoundError as error:
        assert error.body["code"] == "model_not_found", error.body
    print("  router: /tokenize, /detokenize and /v1/models/{id} answer as the replica does "
          "(its 404 relayed): ok")


def check_api_key(servelab, replicas, folder):
    keyed = Router(servelab, [r.url for r in replicas], "cache-aware", ["--api-key", "secret"],
                   folder)
    try:
        try:
            keyed.client().models.list()
            sys.exit("the router took a request without its API key")
        except openai.AuthenticationError as error:
            assert error.body and "message" in error.body, error.body
        keyed_client = openai.OpenAI(base_url=keyed.url + "/v1", api_key="secret", max_retries=0)
        assert [m.id for m in keyed_client.models.list().data] == ["tiny"]
        status, body = post(keyed.url + "/tokenize",
                            json.dumps({"model": "tiny", "prompt": "a"}).encode())
        assert_openai_error(status, body, 401)
    finally:
        keyed.stop()
    print("  --api-key: 401 without it, served with it: ok")


def check_cli_refusals(servelab):
    for args in (["--backend", "https://127.0.0.1:1"], ["--backend", "http://127.0.0.1"],
                 ["--backend", "http://127.0.0.1:8000/v1"],
                 ["--backend", "http://127.0.0.1:1", "--backend", "http://127.0.0.1:1"],
                 ["--backend", "http://127.0.0.1:1", "--policy", "random"], []):
        done = subprocess.run([servelab, "route", "--port", "0", *args], capture_output=True,
                              text=True, timeout=30)
        lines = done.stderr.strip().splitlines()
        assert done.returncode != 0 and len(lines) == 1 and "error" in lines[0], (args, done)
    print("  CLI: bad URLs, a repeated backend, an unknown policy, no backend: one line, "
          "non-zero exit: ok")


# ---- cache_aware (and, from test_router_nginx.py, nginx) ------------------------------------

# Common words, each about one SmolLM2 token: a system prompt of 360 of them is ~400 tokens.
WORDS = ("time year people way day man thing woman life child world school state family "
         "student group country problem hand part place case week company system program "
         "question work government number night point home water room mother area money "
         "story fact month lot right study book eye job word business issue side kind head "
         "house service friend father power hour game line end member law car city name "
         "team minute idea kid body information back parent face others level office door "
         "health person art war history party result change morning reason research girl "
         "guy moment air teacher force education").split()


def system_prompts(count, words=270, seed=11):
    rng = random.Random(seed)
    return [f"You are assistant number {i}. " + " ".join(rng.choice(WORDS) for _ in range(words))
            for i in range(count)]


def shared_prompt_trace(num_prompts, num_requests, seed=5):
    """[(system prompt index, user question)]: each prompt once in a shuffled first round
    (the warm-up: every policy must miss on it), then prompts in a seeded random order,
    never cycling, so that round robin cannot be affine by accident."""
    rng = random.Random(seed)
    first_round = list(range(num_prompts))
    rng.shuffle(first_round)
    order = first_round + [rng.randrange(num_prompts) for _ in range(num_requests - num_prompts)]
    return [(p, f"Question {i}: name one {rng.choice(WORDS)}.") for i, p in enumerate(order)]


def run_trace(base_url, prompts, trace, max_tokens=4):
    """Streams the trace one request at a time; returns [(ttft s, text)]."""
    client = openai.OpenAI(base_url=base_url + "/v1", api_key="none", max_retries=0, timeout=120)
    results = []
    for prompt_index, question in trace:
        start = time.perf_counter()
        ttft = None
        text = ""
        stream = client.chat.completions.create(
            model="tiny", max_tokens=max_tokens, temperature=0, stream=True,
            messages=[{"role": "system", "content": prompts[prompt_index]},
                      {"role": "user", "content": question}])
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                if ttft is None:
                    ttft = time.perf_counter() - start
                text += chunk.choices[0].delta.content
        assert ttft is not None, "a stream without content"
        results.append((ttft, text))
    return results


def cache_counters(replicas):
    """Per replica: (prefix-cache hit tokens, prompt tokens, requests answered)."""
    return [(metric_sum(r.url, "servelab_prefix_cache_hit_tokens_total"),
             metric_sum(r.url, "servelab_prompt_tokens_total"),
             metric_sum(r.url, "servelab_request_success_total")) for r in replicas]


def percentile(values, q):
    """The nearest-rank percentile: the smallest value with at least q of them at or below."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def measure(name, base_url, replicas, prompts, trace, warmup):
    """Runs the trace through base_url; returns a row for the table: the prefix hit rate
    (hit tokens / prompt tokens, summed over the replicas), TTFT p50 / p90 over the
    requests after the warm-up, the requests each replica took, and the answers."""
    before = cache_counters(replicas)
    results = run_trace(base_url, prompts, trace)
    # A replica counts a request once its stream is written out, which the client may see
    # first: wait for the last one's counters.
    answered = sum(b[2] for b in before) + len(trace)
    wait_until(lambda: sum(a[2] for a in cache_counters(replicas)) >= answered, 10,
               "the replicas to count the trace's requests")
    after = cache_counters(replicas)
    hits = sum(a[0] - b[0] for a, b in zip(after, before))
    prompt_tokens = sum(a[1] - b[1] for a, b in zip(after, before))
    ttfts = [ttft for ttft, _ in results[warmup:]]
    return {"name": name, "hit_rate": hits / max(1.0, prompt_tokens),
            "prompt_tokens": prompt_tokens / len(trace),
            "per_replica": [int(a[2] - b[2]) for a, b in zip(after, before)],
            "ttft_p50_ms": 1000 * statistics.median(ttfts),
            "ttft_p90_ms": 1000 * percentile(ttfts, 0.9), "texts": [t for _, t in results]}


def print_table(rows, title):
    print(f"  {title}")
    print(f"  {'front':<28} {'prefix hit rate':>15} {'TTFT p50 ms':>12} {'TTFT p90 ms':>12}"
          f"  requests per replica")
    for row in rows:
        print(f"  {row['name']:<28} {row['hit_rate']:>15.1%} {row['ttft_p50_ms']:>12.0f} "
              f"{row['ttft_p90_ms']:>12.0f}  {row['per_replica']}")


# Each replica's KV pool: 48 blocks of 16 tokens (SmolLM2's f32 KV is 45 KiB a token, so a
# block is 720 KiB), room for about 2.5 of the trace's ~300-token system prompts. A pool must
# hold one request of the longest length a replica admits, so that length is capped too.
SMOLLM2_KV_MEMORY = "34MiB"
SMOLLM2_REPLICA_FLAGS = ["--max-model-len", "768"]


def check_cache_aware(servelab, folder, policies, num_requests=18):
    if not os.path.exists(SMOLLM2):
        print(f"SKIP: no {SMOLLM2} (make model)")
        sys.exit(77)
    prompts = system_prompts(6)
    trace = shared_prompt_trace(len(prompts), num_requests)
    rows = []
    for policy in policies:
        # Fresh replicas for each policy: a cache warmed by the previous one would flatter it.
        replicas = [Server(servelab, SMOLLM2, SMOLLM2_REPLICA_FLAGS, kv_memory=SMOLLM2_KV_MEMORY)
                    for _ in range(3)]
        try:
            router = Router(servelab, [r.url for r in replicas], policy, log_folder=folder)
            try:
                rows.append(measure(policy, router.url, replicas, prompts, trace, len(prompts)))
            finally:
                router.stop()
        finally:
            for replica in replicas:
                replica.stop()
    print_table(rows, f"{len(trace)} chat requests (~{rows[0]['prompt_tokens']:.0f} prompt tokens "
                      f"each) over {len(prompts)} system prompts, 3 SmolLM2 replicas "
                      f"(--kv-memory {SMOLLM2_KV_MEMORY}), one request at a time; TTFT over the "
                      f"{len(trace) - len(prompts)} after the first round")
    for row in rows[1:]:
        assert row["texts"] == rows[0]["texts"], "the same greedy requests gave other answers"
    by_name = {row["name"]: row for row in rows}
    if "round-robin" in by_name and "cache-aware" in by_name:
        round_robin, cache_aware = by_name["round-robin"], by_name["cache-aware"]
        assert cache_aware["hit_rate"] > round_robin["hit_rate"] + 0.25, rows
        # A miss recomputes ~300 prompt tokens, a hit ~20: the medians differ several-fold.
        assert cache_aware["ttft_p50_ms"] < 0.5 * round_robin["ttft_p50_ms"], rows
        print("  cache-aware: higher prefix hit rate, lower median TTFT than round robin: ok")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--servelab", required=True)
    parser.add_argument("--check", choices=["killed_backend", "cache_aware"], action="append")
    parser.add_argument("--policies", nargs="+", default=["round-robin", "cache-aware"],
                        choices=["round-robin", "least-outstanding", "cache-aware"],
                        help="cache_aware: the routers compared (docs/serving.md adds "
                             "least-outstanding)")
    args = parser.parse_args()
    checks = args.check or ["killed_backend", "cache_aware"]
    with tempfile.TemporaryDirectory() as folder:
        if "killed_backend" in checks:
            check_killed_backend(args.servelab, folder)
        if "cache_aware" in checks:
            check_cache_aware(args.servelab, folder, args.policies)
    print("PASS")


if __name__ == "__main__":
    main()
