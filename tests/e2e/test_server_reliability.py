#!/usr/bin/env python3
"""test_server_reliability.py — `servelab serve` against hostile and careless clients.

Each check reproduces one way a client could hold the server down, bounded
in time, and asserts the server holds (docs/serving.md, "Reliability"):
  slow_headers    200 connections drip their headers: /health and a 1-token
                  completion are still answered; the dripping ones are closed
  chunked_body    a chunked body over --max-body-bytes gets 413, and memory
                  stays bounded by the limit, not by the body
  disconnect      a non-streaming client that times out has its request
                  cancelled and its KV blocks freed
  fair_prefill    a short request is not stuck behind a long prompt's prefill
  port_taken      a second server on a busy port fails at start
  pipelined       pipelined requests are all answered, in order
  drain           SIGTERM with more clients than connections: every client gets
                  an answer or a 503, none a connection error; --drain-timeout
                  cancels and answers what is still running; a second SIGTERM
                  stops at once
  caps            --kv-memory over physical memory, n over --max-waiting, and the
                  request/choice counters
  gauges          the running gauge is right during a long step
  many_streams    200 concurrent official-client streams, a third disconnecting:
                  success + cancelled + rejected = sent, zero connection errors
With --soak-seconds S, many_streams repeats for S seconds (the `slow` soak run).
Usage: test_server_reliability.py --servelab build/release/servelab [--only NAME ...]
"""
import argparse
import asyncio
import concurrent.futures
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

import openai

from serve_helpers import (Server, padded_body, post_head, read_http_response, send_chunked,
                           ttft_s)


def timed_get(url, timeout):
    start = time.perf_counter()
    with urllib.request.urlopen(url, timeout=timeout) as response:
        response.read()
    return time.perf_counter() - start


def wait_until(predicate, seconds, step=0.05):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return predicate()


def check_slow_headers(servelab, model, num_slow=200, header_timeout_s=2):
    server = Server(servelab, model, ["--header-timeout", str(header_timeout_s)])
    try:
        baseline = statistics.median(timed_get(server.url + "/health", 5) for _ in range(5))
        slow = [socket.create_connection(("127.0.0.1", server.port), timeout=5)
                for _ in range(num_slow)]
        line = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        closed_after = {}
        stop = threading.Event()
        started = time.monotonic()

        def drip():
            # One header byte per connection every 0.25 s: each read succeeds, so
            # only a deadline for the whole head can end these connections.
            for i in range(len(line) * 100):
                if stop.is_set():
                    return
                for k, s in enumerate(slow):
                    if k in closed_after:
                        continue
                    try:
                        s.send(line[i % len(line):i % len(line) + 1])
                    except OSError:
                        closed_after[k] = time.monotonic() - started
                time.sleep(0.25)

        dripper = threading.Thread(target=drip, daemon=True)
        dripper.start()
        time.sleep(0.5)
        latencies = []
        for _ in range(10):
            try:
                latencies.append(timed_get(server.url + "/health", 5))
            except OSError as error:
                sys.exit(f"FAIL slow_headers: /health did not answer with {num_slow} slow-header "
                         f"connections open ({error}): the pool is held by connections that "
                         f"never finish their headers")
            time.sleep(0.05)
        start = time.perf_counter()
        try:
            server.client(timeout=10).completions.create(model="tiny", prompt="abc", max_tokens=1)
        except openai.APIError as error:
            sys.exit(f"FAIL slow_headers: a 1-token completion failed under the attack: {error}")
        completion_s = time.perf_counter() - start
        # Every dripping connection must be closed by the server once its header deadline passed.
        for k, s in enumerate(slow):
            if k in closed_after:
                continue
            s.settimeout(max(0.1, header_timeout_s + 4 - (time.monotonic() - started)))
            try:
                data = s.recv(4096)
                if data == b"" or data.startswith(b"HTTP/1.1 408"):
                    closed_after[k] = time.monotonic() - started
            except OSError:
                pass
        stop.set()
        dripper.join()
        for s in slow:
            s.close()
        if len(closed_after) < num_slow:
            sys.exit(f"FAIL slow_headers: {num_slow - len(closed_after)} of {num_slow} connections "
                     f"that never finished their headers were still open after "
                     f"{header_timeout_s + 4} s (--header-timeout {header_timeout_s})")
        print(f"  slow headers: {num_slow} dripping connections; /health median "
              f"{statistics.median(latencies) * 1e3:.1f} ms, max {max(latencies) * 1e3:.1f} ms "
              f"(idle {baseline * 1e3:.1f} ms); 1-token completion {completion_s * 1e3:.0f} ms; all "
              f"closed by {max(closed_after.values()):.1f} s: ok")
    finally:
        server.stop()


def check_chunked_body(servelab, model):
    server = Server(servelab, model, ["--max-body-bytes", "4096"])
    try:
        for size, expected in [(3000, 200), (4096, 200), (4097, 413), (16384, 413)]:
            status, body = send_chunked(server.port, padded_body(size), chunk_bytes=1000)
            if status != expected:
                sys.exit(f"FAIL chunked_body: a chunked body of {size} bytes with --max-body-bytes "
                         f"4096 got {status}, expected {expected}")
            if status == 413:
                assert "4096" in json.loads(body)["error"]["message"], body
        server.client().completions.create(model="tiny", prompt="abc", max_tokens=1)
    finally:
        server.stop()
    # At the default limit (1 MiB), a 96 MiB chunked body must not be held in memory.
    server = Server(servelab, model)
    try:
        before = server.peak_rss_bytes()
        body_bytes = 96 << 20
        status, _ = send_chunked(server.port, padded_body(body_bytes))
        grown = server.peak_rss_bytes() - before
        if status != 413 or grown > 32 << 20:
            sys.exit(f"FAIL chunked_body: a {body_bytes >> 20} MiB chunked body at the default "
                     f"1 MiB limit got {status} and peak RSS grew {grown >> 20} MiB (expected "
                     f"413 and growth bounded by the limit)")
        print(f"  chunked bodies: over --max-body-bytes get 413; a {body_bytes >> 20} MiB one "
              f"grew peak RSS {grown / 2**20:.1f} MiB: ok")
    finally:
        server.stop()


def check_disconnect(servelab, long_model):
    server = Server(servelab, long_model)
    try:
        before = server.metrics()
        client = server.client(timeout=1.0)
        try:
            client.completions.create(model="tiny", prompt="abc", max_tokens=12000,
                                      extra_body={"min_tokens": 12000})
            sys.exit("FAIL disconnect: a 12,000-token request finished within 1 s; the test "
                     "needs a request that outlives its client")
        except openai.APITimeoutError:
            pass
        left = time.monotonic()

        def cancelled_and_freed():
            now = server.metrics()
            return (now["servelab_choices_cancelled_total"] >
                    before["servelab_choices_cancelled_total"] and
                    now["servelab_num_requests_running"] == 0 and
                    now["servelab_kv_cache_usage_ratio"] == 0)

        if not wait_until(cancelled_and_freed, 3.0):
            sys.exit("FAIL disconnect: a non-streaming request whose client left was still "
                     "running (or holding KV blocks) 3 s later: the handler never noticed the "
                     "closed connection")
        after = server.metrics()
        assert after["servelab_request_success_total"] == before["servelab_request_success_total"]
        assert (after["servelab_request_cancelled_total"] ==
                before["servelab_request_cancelled_total"] + 1), after
        print(f"  non-streaming disconnect: cancelled and freed "
              f"{time.monotonic() - left:.2f} s after the client left: ok")
    finally:
        server.stop()


def check_fair_prefill(servelab, long_model):
    # A small budget makes the long prompt's prefill span many steps, so the
    # short request's wait is easy to see against it; the cap is a quarter
    # of it, as the default 128 is of the default 512.
    server = Server(servelab, long_model, ["--max-num-batched-tokens", "64",
                                           "--long-prefill-tokens", "16"])
    try:
        client = server.client()
        long_prompt = [random.Random(5).randrange(1, 250) for _ in range(6000)]
        alone = {}
        ttft_s(client, [7, 8, 9, 10], alone, "short")
        results = {}
        long_thread = threading.Thread(target=ttft_s, args=(client, long_prompt, results, "long"))
        long_thread.start()
        wait_until(lambda: server.metrics()["servelab_num_requests_running"] >= 1, 5, 0.01)
        ttft_s(client, [7, 8, 9, 10], results, "short")
        long_thread.join()
        if results["short"] > 0.5 * results["long"]:
            sys.exit(f"FAIL fair_prefill: a 4-token request waited {results['short']:.2f} s "
                     f"behind a 6,000-token prompt whose own TTFT was {results['long']:.2f} s: "
                     f"the long prefill takes the whole token budget every step")
        print(f"  fair prefill: 4-token TTFT {results['short'] * 1e3:.0f} ms behind a 6,000-token "
              f"prompt (alone {alone['short'] * 1e3:.0f} ms; the long prompt's TTFT "
              f"{results['long']:.2f} s): ok")
    finally:
        server.stop()


def check_port_taken(servelab, model):
    """A second server on a port in use fails at start, with one line, instead of sharing it
    (SO_REUSEPORT would let the kernel split the connections between the two)."""
    server = Server(servelab, model)
    try:
        second = subprocess.Popen([servelab, "serve", "--model", model, "--port",
                                   str(server.port), "--kv-memory", "64MiB"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                  env=dict(os.environ, OMP_NUM_THREADS="1"))
        try:
            _, stderr = second.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            second.kill()
            second.communicate()
            sys.exit("FAIL port_taken: a second server bound a port in use and kept running")
        assert second.returncode != 0, ("a second server bound a port in use", stderr[-500:])
        assert "cannot listen" in stderr, stderr[-500:]
        urllib.request.urlopen(server.url + "/health", timeout=5)
        print("  port in use: the second server refused at start: ok")
    finally:
        server.stop()


def check_pipelined(servelab, model):
    server = Server(servelab, model)
    try:
        requests = b""
        for n in (1, 2, 3):
            body = json.dumps({"model": "tiny", "prompt": "abc", "max_tokens": n,
                               "min_tokens": n}).encode()
            requests += post_head("/v1/completions", len(body)) + body
        with socket.create_connection(("127.0.0.1", server.port), timeout=20) as s:
            s.sendall(requests)
            rest = b""
            for n in (1, 2, 3):
                try:
                    status, _, body, rest = read_http_response(s, rest)
                except (ConnectionError, socket.timeout) as error:
                    sys.exit(f"FAIL pipelined: 3 pipelined POSTs in one write; response {n} "
                             f"never came ({error})")
                tokens = json.loads(body)["usage"]["completion_tokens"]
                assert status == 200 and tokens == n, ("out of order", n, status, body)
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
            s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n" * 2)
            rest = b""
            for n in (1, 2):
                try:
                    status, _, _, rest = read_http_response(s, rest)
                except (ConnectionError, socket.timeout) as error:
                    sys.exit(f"FAIL pipelined: 2 pipelined GET /health; response {n} never came "
                             f"({error})")
                assert status == 200
        print("  pipelined: 3 POSTs and 2 GETs in one write, all answered in order: ok")
    finally:
        server.stop()


def stream_outcome(client, max_tokens):
    """Runs one streaming completion to its end: 'success', 'cancelled' (the server cut it
    short), 'rejected' (503) or 'connection error'."""
    try:
        reason = None
        for chunk in client.completions.create(model="tiny", prompt="abc", max_tokens=max_tokens,
                                               stream=True, extra_body={"min_tokens": max_tokens}):
            if chunk.choices and chunk.choices[0].finish_reason:
                reason = chunk.choices[0].finish_reason
        return "success" if reason == "length" else "cancelled"
    except openai.APIStatusError as error:
        return "rejected" if error.status_code == 503 else f"status {error.status_code}"
    except openai.APIConnectionError:
        return "connection error"


def check_drain(servelab, long_model):
    # More streaming clients than --max-connections, then SIGTERM and one new
    # request: each gets its stream, a 503, or (after --drain-timeout) its
    # stream ended as cancelled; none a connection error.
    server = Server(servelab, long_model, ["--max-connections", "16", "--drain-timeout", "3"])
    client = server.client(timeout=60)
    with concurrent.futures.ThreadPoolExecutor(32) as pool:
        futures = [pool.submit(stream_outcome, client, 12000) for _ in range(24)]
        wait_until(lambda: server.metrics()["servelab_num_requests_running"] >= 8, 10, 0.05)
        signalled = time.monotonic()
        server.process.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        late = pool.submit(stream_outcome, client, 4)
        outcomes = [f.result() for f in futures]
        late_outcome = late.result()
    rc = server.process.wait(timeout=30)
    drained_s = time.monotonic() - signalled
    counts = {o: outcomes.count(o) for o in set(outcomes)}
    if "connection error" in outcomes or late_outcome != "rejected":
        sys.exit(f"FAIL drain: after SIGTERM with 24 streams over --max-connections 16 the "
                 f"outcomes were {counts} and the new request's {late_outcome!r} (expected no "
                 f"connection errors and a 503)")
    assert rc == 0 and counts.get("cancelled", 0) >= 1, (rc, counts)
    if drained_s > 3 + 5:
        sys.exit(f"FAIL drain: --drain-timeout 3 but the server took {drained_s:.1f} s to exit")
    print(f"  SIGTERM drain: {counts}, the new request rejected; exited 0 after "
          f"{drained_s:.1f} s (--drain-timeout 3): ok")
    # A second SIGTERM stops at once, whatever is running.
    server = Server(servelab, long_model)
    client = server.client(timeout=60)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        running = pool.submit(stream_outcome, client, 12000)
        wait_until(lambda: server.metrics()["servelab_num_requests_running"] >= 1, 10, 0.05)
        server.process.send_signal(signal.SIGTERM)
        time.sleep(0.2)
        signalled = time.monotonic()
        server.process.send_signal(signal.SIGTERM)
        try:
            rc = server.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            server.process.kill()
            sys.exit("FAIL drain: a second SIGTERM did not stop the server within 5 s")
        running.result()
    print(f"  a second SIGTERM: stopped after {time.monotonic() - signalled:.2f} s (status {rc}): ok")


def check_caps(servelab, model):
    done = subprocess.run([servelab, "serve", "--model", model, "--port", "0", "--kv-memory",
                           "1TB"], capture_output=True, text=True, timeout=60)
    if done.returncode == 0 or "--kv-memory" not in done.stderr:
        sys.exit(f"FAIL caps: --kv-memory 1TB was accepted (status {done.returncode}): "
                 f"{done.stderr[-300:]}")
    errors = [line for line in done.stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and errors[0].startswith("servelab: error: --kv-memory"), done.stderr
    server = Server(servelab, model, ["--max-waiting", "4"])
    try:
        client = server.client()
        before = server.metrics()
        try:
            client.completions.create(model="tiny", prompt="abc", max_tokens=2, n=5)
            sys.exit("FAIL caps: n = 5 with --max-waiting 4 was accepted")
        except openai.BadRequestError as error:
            assert "--max-waiting" in str(error), error
        client.completions.create(model="tiny", prompt="abc", max_tokens=2, n=3)
        after = server.metrics()

        def grew(name):
            return after[name] - before[name]

        counted = (grew("servelab_request_success_total"), grew("servelab_choices_finished_total"),
                   grew("servelab_request_rejected_total"),
                   grew("servelab_choices_cancelled_total"))
        if counted != (1, 3, 0, 0):
            sys.exit(f"FAIL caps: one refused n = 5 request and one n = 3 request counted as "
                     f"(requests ok, choices finished, requests rejected, choices cancelled) = "
                     f"{counted}, expected (1, 3, 0, 0)")
        print("  caps: --kv-memory over physical memory refused; n over --max-waiting is 400; "
              "requests and choices counted apart: ok")
    finally:
        server.stop()


def check_gauges(servelab, long_model):
    # One 6,000-token prompt computed in a single step (no chunking): the
    # running gauge must say 1 while that step runs, not the last step's 0.
    server = Server(servelab, long_model, ["--no-chunked-prefill",
                                           "--max-num-batched-tokens", "16384"])
    try:
        client = server.client()
        prompt = [random.Random(9).randrange(1, 250) for _ in range(6000)]
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            running = pool.submit(client.completions.create, model="tiny", prompt=prompt,
                                  max_tokens=1)
            readings = []
            while not running.done():
                readings.append(server.metrics(timeout=2)["servelab_num_requests_running"])
                time.sleep(0.02)
            running.result()
        seen = readings[2:-2]  # leave out the edges: the request may be just arriving or leaving
        if not seen or seen.count(1.0) < 0.8 * len(seen):
            sys.exit(f"FAIL gauges: num_requests_running read {seen} while one long step ran: "
                     f"the gauges are only refreshed when a step ends")
        print(f"  gauges: running = 1 in {seen.count(1.0)} of {len(seen)} readings during one "
              f"long step: ok")
    finally:
        server.stop()


async def one_stream(client, index, disconnect, rng):
    max_tokens = rng.randint(8, 48)
    try:
        stream = await client.completions.create(
            model="tiny", prompt=f"request {index}", max_tokens=max_tokens, stream=True,
            extra_body={"min_tokens": max_tokens})
        received = 0
        async for chunk in stream:
            received += 1
            if disconnect and received == 3:
                await stream.close()
                return "cancelled"
        return "success"
    except openai.APIStatusError as error:
        return "rejected" if error.status_code == 503 else f"status {error.status_code}"
    except openai.APIConnectionError as error:
        return f"connection error: {error!r}"


async def many_streams_round(url, num_clients, seed):
    rng = random.Random(seed)
    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=120)
    try:
        return await asyncio.gather(*[one_stream(client, i, i % 3 == 0, rng)
                                      for i in range(num_clients)])
    finally:
        await client.close()


def check_many_streams(servelab, model, num_clients=200, soak_seconds=0):
    server = Server(servelab, model)
    try:
        before = server.metrics()
        sent = 0
        totals = {}
        slowest_metrics_s = 0.0
        started = time.monotonic()
        rounds = 0
        while True:
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                outcome = pool.submit(asyncio.run, many_streams_round(server.url, num_clients,
                                                                      rounds))
                while not outcome.done():
                    slowest_metrics_s = max(slowest_metrics_s,
                                            timed_get(server.url + "/metrics", 10))
                    time.sleep(0.1)
                outcomes = outcome.result()
            sent += len(outcomes)
            rounds += 1
            for o in outcomes:
                key = "connection error" if o.startswith("connection error") else o
                totals[key] = totals.get(key, 0) + 1
            bad = [o for o in outcomes if o not in ("success", "cancelled", "rejected")]
            if bad:
                sys.exit(f"FAIL many_streams: {len(bad)} of {num_clients} streams failed: "
                         f"{sorted(set(bad))[:3]}")
            if time.monotonic() - started >= soak_seconds:
                break
        # The server's own counts agree with the clients' (a cancelled stream may
        # have finished before the server saw its client leave).
        assert wait_until(lambda: server.metrics()["servelab_num_requests_running"] == 0, 10)
        after = server.metrics()
        counted = {k: after[f"servelab_request_{k}_total"] - before[f"servelab_request_{k}_total"]
                   for k in ("success", "cancelled", "rejected")}
        if sum(counted.values()) != sent or counted["rejected"] != totals.get("rejected", 0):
            sys.exit(f"FAIL many_streams: sent {sent}, clients saw {totals}, the server counted "
                     f"{counted}: success + cancelled + rejected must equal sent")
        assert after["servelab_kv_cache_usage_ratio"] == 0, after
        print(f"  {num_clients} concurrent streams x {rounds} rounds, a third disconnecting: "
              f"clients {totals}, server {counted}; slowest /metrics "
              f"{slowest_metrics_s * 1e3:.0f} ms: ok")
    finally:
        server.stop()


CHECKS = ["port_taken", "pipelined", "chunked_body", "caps", "slow_headers", "disconnect",
          "gauges", "fair_prefill", "drain", "many_streams"]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--servelab", required=True)
    parser.add_argument("--only", nargs="*", choices=CHECKS, default=CHECKS)
    parser.add_argument("--soak-seconds", type=float, default=0,
                        help="repeat many_streams this long (the slow soak run)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        model = os.path.join(folder, "tiny.gguf")
        long_model = os.path.join(folder, "tiny_long.gguf")
        for path, context in [(model, 4096), (long_model, 16384)]:
            subprocess.run([args.servelab, "-q", "make-tiny-model", "-o", path, "--seed", "3",
                            "--context", str(context)], check=True)
        for name in args.only:
            started = time.monotonic()
            if name == "many_streams":
                check_many_streams(args.servelab, model, soak_seconds=args.soak_seconds)
            elif name in ("disconnect", "gauges", "fair_prefill", "drain"):
                globals()[f"check_{name}"](args.servelab, long_model)
            else:
                globals()[f"check_{name}"](args.servelab, model)
            print(f"    ({name}: {time.monotonic() - started:.1f} s)")
    print("PASS")


if __name__ == "__main__":
    main()
