#!/usr/bin/env python3
"""test_hostile_clients.py — `servelab route` and `servelab serve` against hostile clients.

Each check reproduces one attack that once worked on the router (and some
on the server too), bounded in time, and asserts that both now hold
(docs/serving.md, "Reliability"; the router serves through the server's own
listener, so the two must answer alike):
  deep_json     a prompt nested 200,000 arrays deep (400 KB) crashed the router
                (its stack overflowed printing it): now a 400 naming the depth
                limit, from the router and the server, and both still answer
  slow_clients  300 connections drip a header byte every 2 s at the router:
                /health answers every probe, median under 100 ms (it once timed
                out for 30 s), and the dripping connections get 408 at
                --header-timeout (5 s)
  chunked_limit the router once forwarded a 300 MiB chunked body whatever
                --max-body-bytes said: now 413, and its peak memory grows by
                less than 32 MiB for a 96 MiB chunked body
  json_memory   32 concurrent 1 MiB bodies of "[" (once about 70 MiB each once
                parsed) and of 350,000 empty arrays: each a 400, both
                processes under 2x their baseline memory throughout, and back
                within 10 % of it afterwards
  framing       two different Content-Lengths, or one with a Transfer-Encoding,
                get 400 from both; so does a body with a NUL and junk after
                the JSON (the server once answered it 200)
  sighup        SIGHUP once killed both at once (exit 129, streams cut): now it
                drains as SIGTERM does, a stream in flight ends with [DONE], and
                the process exits 0
  kv_share      --kv-share inf,1 (once "KV -9223372036854775808 B") is refused
                naming the flag; 1e308,1e308 splits the memory evenly
  pool_size     a KV pool below one request of the longest length served
                (--kv-memory 1 once gave one block of 16 tokens) is refused at
                start naming --kv-memory and --max-model-len; with
                --max-model-len the small pool serves requests up to it
  hung_backend  one of two replicas stopped with SIGSTOP: requests sent just
                after are answered by the other within seconds (one once waited
                20 s with no retry), and a stream in flight on the stopped one
                ends with an error event after --idle-timeout, not a hang
  client_left   a client that leaves a whole (non-stream) request cancels it on
                the replica (it once ran on and counted a success)
  garbage       a fake replica: a stream cut mid-event and one ending without
                [DONE] reach the client as an error event (once a normal end);
                a non-JSON 200 becomes a 502 (once relayed as it was); a 503
                that stalls mid-body ends after --idle-timeout with the
                router's own 503 (it once waited for the body for ever)
  big_answers   a fake replica: one 10 MiB event is relayed in well under a
                second (once 7.7 s: the relay was quadratic); an event over the
                cap is an error event; 16 whole 10 MB answers at once leave the
                router's memory within 10 % of its baseline, and one over
                --max-response-bytes is a 502
Usage: test_hostile_clients.py --servelab build/release/servelab [--only NAME ...]
"""
import argparse
import concurrent.futures
import http.server
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

from serve_helpers import (Server, padded_body, proc_status_bytes, read_http_response,
                           send_chunked)
from test_router import Router


def rss_bytes(pid):
    return proc_status_bytes(pid, "VmRSS")


def peak_rss_bytes(pid):
    return proc_status_bytes(pid, "VmHWM")


def raw_post(port, head_lines, body, timeout=30):
    """Sends a request with exactly these header lines and this body; returns
    (status, parsed JSON body or raw bytes)."""
    head = "POST /v1/completions HTTP/1.1\r\nHost: localhost\r\n" + "".join(
        line + "\r\n" for line in head_lines) + "\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        try:
            s.sendall(head.encode() + body)
        except OSError:
            pass  # refused and closed early: the answer is still there
        status, _, answer, _ = read_http_response(s)
    try:
        return status, json.loads(answer)
    except ValueError:
        return status, answer


def post_body(port, body, timeout=60):
    return raw_post(port, ["Content-Type: application/json", f"Content-Length: {len(body)}"],
                    body, timeout)


def health_ms(url, timeout=5):
    """Milliseconds a GET /health took; infinity when it got no answer in `timeout` s."""
    start = time.perf_counter()
    try:
        with urllib.request.urlopen(url + "/health", timeout=timeout) as response:
            response.read()
    except OSError:
        return float("inf")
    return 1000 * (time.perf_counter() - start)


def fail(check, message):
    sys.exit(f"FAIL {check}: {message}")


class Pair:
    """A tiny-model replica and a router in front of it."""

    def __init__(self, servelab, model, folder, server_extra=(), router_extra=()):
        self.server = Server(servelab, model, list(server_extra))
        try:
            self.router = Router(servelab, [self.server.url], "round-robin",
                                 ["--health-interval", "0.2", *router_extra], folder)
        except BaseException:
            self.server.stop()
            raise

    def both(self):
        return [("router", self.router.port, self.router.process.pid, self.router.url),
                ("server", self.server.port, self.server.process.pid, self.server.url)]

    def stop(self):
        try:
            self.router.stop()
        finally:
            self.server.stop()


def check_deep_json(servelab, model, folder):
    pair = Pair(servelab, model, folder)
    try:
        depth = 200000  # 400 KB; 70,000 was enough where the attack was first made
        body = (b'{"model":"tiny","max_tokens":1,"prompt":' + b"[" * depth + b"]" * depth + b"}")
        for who, port, _, url in pair.both():
            status, answer = post_body(port, body)
            if status != 400 or "deep" not in json.dumps(answer):
                fail("deep_json", f"the {who} answered {status} {str(answer)[:200]} to a prompt "
                     f"nested {depth} deep (expected 400 naming the depth limit)")
            if health_ms(url) > 5000:
                fail("deep_json", f"the {who} is not answering after the deep body")
        completion = pair.router.client().completions.create(model="tiny", prompt="abc",
                                                             max_tokens=2)
        assert completion.choices[0].text is not None
        print(f"  deep_json: a prompt nested {depth} deep gets 400 from router and server; "
              f"both still answer: ok")
    finally:
        pair.stop()


def check_slow_clients(servelab, model, folder, num_slow=300, header_timeout_s=5):
    pair = Pair(servelab, model, folder)  # the default --header-timeout, 5 s
    try:
        router = pair.router
        slow = [socket.create_connection(("127.0.0.1", router.port), timeout=10)
                for _ in range(num_slow)]
        line = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        stop = threading.Event()
        closed = set()  # dripping connections the router has closed
        started = time.monotonic()

        def drip():
            for i in range(len(line)):
                if stop.is_set():
                    return
                for index, s in enumerate(slow):
                    if index in closed:
                        continue
                    try:
                        s.sendall(line[i:i + 1])
                    except OSError:
                        closed.add(index)
                stop.wait(2.0)

        dripper = threading.Thread(target=drip, daemon=True)
        dripper.start()
        time.sleep(0.5)
        latencies = [health_ms(router.url) for _ in range(20)]
        # Every probe answered, and the median under 100 ms: a robust figure,
        # since one probe may lose the CPU to another job on a busy machine.
        if max(latencies) == float("inf") or statistics.median(latencies) > 100:
            stop.set()
            fail("slow_clients", f"/health took {statistics.median(latencies):.0f} ms median, "
                 f"up to {max(latencies):.0f} ms with {num_slow} dripping connections (limit: "
                 f"an answer every time, median 100 ms; inf: no answer in 5 s)")
        completion = router.client(timeout=30).completions.create(model="tiny", prompt="abc",
                                                                  max_tokens=2)
        assert completion.choices[0].text is not None
        # Each dripping connection gets a 408 once --header-timeout passes.
        statuses = []
        deadline = started + header_timeout_s + 10
        for s in slow:
            try:
                s.settimeout(max(0.1, deadline - time.monotonic()))
                status, _, _, _ = read_http_response(s)
                statuses.append(status)
            except (OSError, ConnectionError):
                statuses.append(None)
        stop.set()
        dripper.join()
        for s in slow:
            s.close()
        slowest = max(latencies)
        got_408 = statuses.count(408)
        if got_408 < num_slow * 0.95:
            fail("slow_clients", f"only {got_408} of {num_slow} dripping connections got 408 "
                 f"(others: {sorted(set(statuses) - {408}, key=str)})")
        counted = metric_total(router.url, "servelab_http_4xx_total")
        if counted < got_408:
            fail("slow_clients", f"{got_408} connections got 408; the router's /metrics "
                 f"servelab_http_4xx_total says {counted}")
        print(f"  slow_clients: /health {statistics.median(latencies):.1f} ms median, "
              f"{slowest:.1f} ms max beside {num_slow} dripping connections; {got_408} got "
              f"408: ok")
    finally:
        pair.stop()


def check_chunked_limit(servelab, model, folder):
    pair = Pair(servelab, model, folder, router_extra=["--max-body-bytes", "4096"])
    try:
        for size, expected in [(3000, 200), (4096, 200), (4097, 413), (16384, 413)]:
            status, answer = send_chunked(pair.router.port, padded_body(size), chunk_bytes=1000)
            if status != expected:
                fail("chunked_limit", f"a chunked body of {size} bytes with --max-body-bytes "
                     f"4096 got {status} from the router, expected {expected}")
            if status == 413:
                assert b"4096" in answer, answer
    finally:
        pair.stop()
    pair = Pair(servelab, model, folder)
    try:
        before = peak_rss_bytes(pair.router.process.pid)
        body_bytes = 96 << 20
        status, _ = send_chunked(pair.router.port, padded_body(body_bytes))
        grown = peak_rss_bytes(pair.router.process.pid) - before
        if status != 413 or grown > 32 << 20:
            fail("chunked_limit", f"a {body_bytes >> 20} MiB chunked body at the router's "
                 f"default 1 MiB limit got {status} and its peak RSS grew {grown >> 20} MiB "
                 f"(expected 413 and growth bounded by the limit)")
        print(f"  chunked_limit: over --max-body-bytes gets 413 from the router; a "
              f"{body_bytes >> 20} MiB body grew its peak RSS {grown / 2**20:.1f} MiB: ok")
    finally:
        pair.stop()


def hostile_bodies(size):
    """Bodies of about `size` bytes that once cost far more parsed."""
    prefix = b'{"model":"tiny","max_tokens":1,"prompt":'
    brackets = prefix + b"[" * (size - len(prefix))
    count = (size - len(prefix) - 2) // 3
    empties = prefix + b"[" + b",".join([b"[]"] * count) + b"]}"
    return [brackets, empties]


def check_json_memory(servelab, model, folder, clients=32, size=1 << 20):
    pair = Pair(servelab, model, folder, server_extra=["--max-body-bytes", str(2 << 20)],
                router_extra=["--max-body-bytes", str(2 << 20)])
    try:
        for who, port, pid, _ in pair.both():
            # Warm up first: the baseline is a process that has served requests.
            for _ in range(3):
                post_body(port, b'{"model":"tiny","prompt":"warm","max_tokens":2}')
            baseline = rss_bytes(pid)
            peak = baseline
            for body in hostile_bodies(size):
                watching = threading.Event()

                def watch():
                    nonlocal peak
                    while not watching.is_set():
                        peak = max(peak, rss_bytes(pid))
                        time.sleep(0.005)

                watcher = threading.Thread(target=watch, daemon=True)
                watcher.start()
                with concurrent.futures.ThreadPoolExecutor(clients) as pool:
                    answers = list(pool.map(lambda _: post_body(port, body), range(clients)))
                watching.set()
                watcher.join()
                statuses = sorted({status for status, _ in answers})
                if statuses != [400]:
                    fail("json_memory", f"the {who} answered {statuses} to {clients} hostile "
                         f"1 MiB bodies (expected 400 each)")
            time.sleep(1.0)
            after = rss_bytes(pid)
            if peak > 2 * baseline:
                fail("json_memory", f"the {who}'s RSS went from {baseline >> 20} to "
                     f"{peak >> 20} MiB under {clients} concurrent 1 MiB hostile bodies "
                     f"(limit 2x)")
            if after > 1.1 * baseline:
                fail("json_memory", f"the {who}'s RSS stayed at {after >> 20} MiB after the "
                     f"burst (baseline {baseline >> 20} MiB; limit +10 %)")
            print(f"  json_memory: the {who}: baseline {baseline / 2**20:.0f} MiB, peak "
                  f"{peak / 2**20:.0f} MiB, after {after / 2**20:.0f} MiB: ok")
    finally:
        pair.stop()


def check_framing(servelab, model, folder):
    pair = Pair(servelab, model, folder)
    good = b'{"model":"tiny","prompt":"a","max_tokens":1}'
    cases = [
        ("two different Content-Lengths",
         ["Content-Type: application/json", f"Content-Length: {len(good)}",
          f"Content-Length: {len(good) + 5}"], good),
        ("Content-Length with Transfer-Encoding",
         ["Content-Type: application/json", f"Content-Length: {len(good)}",
          "Transfer-Encoding: chunked"], good),
    ]
    junk = good + b"\x00junk after the JSON"
    cases.append(("a NUL and junk after the JSON",
                  ["Content-Type: application/json", f"Content-Length: {len(junk)}"], junk))
    try:
        for who, port, _, _ in pair.both():
            for name, lines, body in cases:
                status, answer = raw_post(port, lines, body)
                if status != 400 or not isinstance(answer, dict) or "error" not in answer:
                    fail("framing", f"{name}: the {who} answered {status} {str(answer)[:200]} "
                         f"(expected 400 with an OpenAI-style error)")
            status, _ = raw_post(port, ["Content-Type: application/json",
                                        f"Content-Length: {len(good)}",
                                        f"Content-Length: {len(good)}"], good)
            if status != 200:
                fail("framing", f"the {who} refused two equal Content-Lengths ({status})")
            # Two of the 400s are the listener's, before any handler: counted all the same.
            counted = metric_total(f"http://127.0.0.1:{port}", "servelab_http_4xx_total")
            if counted != len(cases):
                fail("framing", f"the {who} answered {len(cases)} 400s; its /metrics "
                     f"servelab_http_4xx_total says {counted}")
        print("  framing: conflicting lengths, a length with a transfer encoding, and a NUL "
              "with junk get 400 from router and server, each counted in /metrics: ok")
    finally:
        pair.stop()


def stream_to_end(url, results, key, max_tokens=200):
    """A stream of max_tokens tokens; results[key] = (events, whether it ended with
    [DONE]), results[("error", key)] = an error event's data, if one came."""
    body = json.dumps({"model": "tiny", "prompt": "sighup", "max_tokens": max_tokens,
                       "stream": True, "ignore_eos": True}).encode()
    request = urllib.request.Request(url + "/v1/completions", data=body,
                                     headers={"Content-Type": "application/json"})
    chunks, done = 0, False
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            for line in response:
                if line.startswith(b"data: "):
                    chunks += 1
                    done = done or line.strip() == b"data: [DONE]"
                    if b'"error"' in line:
                        results[("error", key)] = line.decode()[:300]
                    if chunks == 1:
                        results[("started", key)] = True
    except OSError:
        pass
    results[key] = (chunks, done)


def check_sighup(servelab, model, folder):
    for who in ("router", "server"):
        pair = Pair(servelab, model, folder)
        results = {}
        url = pair.router.url if who == "router" else pair.server.url
        process = pair.router.process if who == "router" else pair.server.process
        try:
            streamer = threading.Thread(target=stream_to_end, args=(url, results, who))
            streamer.start()
            deadline = time.monotonic() + 30
            while ("started", who) not in results and time.monotonic() < deadline:
                time.sleep(0.01)
            process.send_signal(signal.SIGHUP)
            streamer.join(60)
            rc = process.wait(60)
            chunks, done = results.get(who, (0, False))
            if rc != 0 or not done:
                fail("sighup", f"after SIGHUP the {who} exited {rc}; its stream in flight got "
                     f"{chunks} events, {'with' if done else 'without'} [DONE] (expected a "
                     f"drain: exit 0 and [DONE])")
            print(f"  sighup: the {who} drained ({chunks} events, [DONE]) and exited 0: ok")
        finally:
            for p, stopper in ((pair.router.process, pair.router.stop),
                               (pair.server.process, pair.server.stop)):
                if p.poll() is None:
                    stopper()


def refused_at_start(servelab, check, serve_args, must_name):
    """`servelab serve *serve_args` must exit non-zero with one error line naming each of
    `must_name`; returns that line."""
    try:
        done = subprocess.run([servelab, "serve", "--port", "0", *serve_args],
                              capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired as expired:
        fail(check, f"{' '.join(serve_args)} was accepted: the server started and served "
             f"(its log: {str(expired.stderr or expired.stdout)[-300:]!r})")
    errors = [line for line in done.stderr.splitlines() if "error" in line]
    if done.returncode == 0 or len(errors) != 1 or any(n not in errors[0] for n in must_name):
        fail(check, f"{' '.join(serve_args)}: exit {done.returncode}, stderr "
             f"{done.stderr[-400:]!r} (expected one error line naming {', '.join(must_name)})")
    return errors[0]


def check_kv_share(servelab, model, folder):
    for shares in ("inf,1", "nan,1", "1,-2"):
        refused_at_start(servelab, "kv_share",
                         ["--model", model, "--model", model, "--served-model-name", "a",
                          "--served-model-name", "b", "--kv-share", shares], ["--kv-share"])
    server = Server(servelab, extra=["--kv-share", "1e308,1e308"],
                    models=[(model, "a"), (model, "b")])
    try:
        log = server.stop()
        lines = [line for line in log.splitlines() if "'a': weights" in line or
                 "'b': weights" in line]
        if len(lines) != 2 or any("-" in line.split("KV", 1)[1].split("=")[0] for line in lines):
            fail("kv_share", f"--kv-share 1e308,1e308 logged {lines!r}")
        if lines[0].split("KV", 1)[1] != lines[1].split("KV", 1)[1]:
            fail("kv_share", f"--kv-share 1e308,1e308 did not split evenly: {lines!r}")
        print("  kv_share: inf, nan and negative weights refused; 1e308,1e308 splits evenly: ok")
    except BaseException:
        if server.process.poll() is None:
            server.stop()
        raise


def check_pool_size(servelab, model, folder):
    """The tiny model's context is 4,096 tokens: 2 MiB of f32 KV."""
    refused_at_start(servelab, "pool_size", ["--model", model, "--kv-memory", "1"],
                     ["--kv-memory", "0 blocks"])
    line = refused_at_start(servelab, "pool_size", ["--model", model, "--kv-memory", "256KiB"],
                            ["--kv-memory", "--max-model-len", "4096 tokens"])
    if "--max-model-len to 512 or less" not in line:
        fail("pool_size", f"256 KiB holds 512 tokens, and the error should say so: {line!r}")
    refused_at_start(servelab, "pool_size", ["--model", model, "--max-model-len", "5000"],
                     ["--max-model-len", "4096"])
    server = Server(servelab, model, ["--max-model-len", "512"], kv_memory="256KiB")
    try:
        status, answer = post_body(server.port, json.dumps(
            {"model": "tiny", "prompt": [1, 2, 3], "max_tokens": 510}).encode())
        if status != 400 or answer["error"]["param"] != "max_tokens":
            fail("pool_size", f"3 prompt tokens + max_tokens 510 under --max-model-len 512 got "
                 f"{status} {answer!r} (expected a 400 naming max_tokens)")
        status, answer = post_body(server.port, json.dumps(
            {"model": "tiny", "prompt": [1, 2, 3], "max_tokens": 509,
             "ignore_eos": True}).encode())
        if status != 200 or answer["usage"]["completion_tokens"] != 509:
            fail("pool_size", f"a request of exactly 512 tokens got {status} {answer!r}")
    finally:
        server.stop()
    print("  pool_size: pools below one request refused at start naming --kv-memory and "
          "--max-model-len; with --max-model-len 512 a 256 KiB pool serves 512 tokens: ok")


# ---- the router as a proxy ------------------------------------------------------------------


def metric_total(url, name):
    """The sum of a Prometheus family's samples on `url`'s /metrics."""
    text = urllib.request.urlopen(url + "/metrics", timeout=5).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name) and not line.startswith("#"))


def read_stream(url, body, timeout=60):
    """POSTs a streamed request; (events, seconds) with each event's data as text."""
    request = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    started = time.monotonic()
    events = []
    with urllib.request.urlopen(request, timeout=timeout) as response:
        data = response.read().decode()
    for block in data.split("\n\n"):
        if block.startswith("data: "):
            events.append(block[len("data: "):])
    return events, time.monotonic() - started


def is_error_event(data):
    try:
        return "error" in json.loads(data)
    except ValueError:
        return False  # half an event


def check_hung_backend(servelab, model, folder):
    long_model = long_model_in(servelab, folder)
    replicas = [Server(servelab, long_model) for _ in range(2)]
    router = Router(servelab, [r.url for r in replicas], "round-robin",
                    ["--health-interval", "0.2", "--health-timeout", "0.5", "--idle-timeout", "3"],
                    folder)
    stopped = replicas[0].process
    try:
        # A stream on the first replica (round robin starts there), then stop it.
        results = {}
        streamer = threading.Thread(target=stream_to_end, args=(router.url, results, "s"),
                                    kwargs={"max_tokens": 60000})
        streamer.start()
        deadline = time.monotonic() + 30
        while ("started", "s") not in results and time.monotonic() < deadline:
            time.sleep(0.01)
        stopped.send_signal(signal.SIGSTOP)
        client = router.client(timeout=30)
        waits = []
        for i in range(4):
            start = time.monotonic()
            client.completions.create(model="tiny", prompt=f"after the stop {i}", max_tokens=2)
            waits.append(time.monotonic() - start)
        streamer.join(30)
        chunks, done = results.get("s", (0, True))
        error_event = results.get(("error", "s"))
        if max(waits) > 5:
            fail("hung_backend", f"requests sent after SIGSTOP waited {max(waits):.1f} s "
                 f"(all: {[round(w, 1) for w in waits]}; expected a retry within seconds)")
        if streamer.is_alive() or done or not error_event:
            fail("hung_backend", f"the stream on the stopped replica got {chunks} events, "
                 f"{'[DONE]' if done else 'no [DONE]'}, error event {error_event!r} "
                 f"(expected an error event after --idle-timeout 3)")
        print(f"  hung_backend: after SIGSTOP requests waited at most {max(waits):.1f} s; the "
              f"stream in flight ended with an error event: ok")
    finally:
        stopped.send_signal(signal.SIGCONT)
        router.stop()
        for replica in replicas:
            replica.stop()


def long_model_in(servelab, folder):
    """A tiny model with a 65,536-token context (made once): its streams outlast a check."""
    long_model = os.path.join(folder, "tiny_long.gguf")
    if not os.path.exists(long_model):
        subprocess.run([servelab, "-q", "make-tiny-model", "-o", long_model, "--seed", "3",
                        "--context", "65536"], check=True)
    return long_model


def check_client_left(servelab, model, folder):
    pair = Pair(servelab, long_model_in(servelab, folder), folder)
    try:
        body = json.dumps({"model": "tiny", "prompt": "leave", "max_tokens": 60000,
                           "ignore_eos": True}).encode()
        before = metric_total(pair.server.url, "servelab_request_cancelled_total")
        with socket.create_connection(("127.0.0.1", pair.router.port), timeout=10) as s:
            s.sendall(("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                       f"application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body)
            time.sleep(1.0)
        left = time.monotonic()
        while time.monotonic() - left < 10:
            if metric_total(pair.server.url, "servelab_request_cancelled_total") > before:
                break
            time.sleep(0.05)
        else:
            fail("client_left", "10 s after its client left the router, the whole request "
                 "still ran on the replica (not cancelled)")
        print(f"  client_left: the replica cancelled the request {time.monotonic() - left:.2f} s "
              f"after its client left the router: ok")
    finally:
        pair.stop()


class FakeReplica(http.server.ThreadingHTTPServer):
    """A replica that answers /health, and /v1/completions as `behaviour` says."""

    daemon_threads = True

    def handle_error(self, request, client_address):
        pass  # the router cut an answer short on purpose (over a cap)

    def __init__(self, behaviour):
        self.behaviour = behaviour
        super().__init__(("127.0.0.1", 0), FakeHandler)
        threading.Thread(target=self.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server_address[1]}"


class FakeHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        self.answer(200, "application/json", b'{"status":"ok"}')

    def answer(self, status, content_type, body):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        kind, *args = self.server.behaviour
        if kind == "whole":
            self.answer(200, args[1], args[0])
            return
        if kind == "stalled 503":  # a head that promises a body, then silence
            self.send_response(503)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", "100")
            self.end_headers()
            self.wfile.write(b'{"error":')
            self.wfile.flush()
            time.sleep(args[0])
            return
        # A stream: the pieces, then the connection closes (no chunked framing:
        # HTTP/1.0-style, the end of the body is the end of the connection).
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        for piece in args[0]:
            self.wfile.write(piece)
            self.wfile.flush()
        self.close_connection = True


def via_fake(servelab, folder, behaviour, extra=()):
    fake = FakeReplica(behaviour)
    router = Router(servelab, [fake.url], "round-robin", ["--health-interval", "0.2", *extra],
                    folder)
    return fake, router


def check_garbage(servelab, model, folder):
    event = b'data: {"choices":[{"text":"a","index":0}]}\n\n'
    cases = [("a stream cut mid-event", [event, b'data: {"choices":[{"te']),
             ("a stream of whole events without [DONE]", [event, event])]
    for name, pieces in cases:
        fake, router = via_fake(servelab, folder, ("stream", pieces))
        try:
            events, _ = read_stream(router.url, {"model": "tiny", "prompt": "x", "stream": True})
            if not events or not is_error_event(events[-1]):
                fail("garbage", f"{name}: the client's stream ended with {events[-1:]!r} "
                     f"(expected an error event)")
        finally:
            router.stop()
            fake.shutdown()
    fake, router = via_fake(servelab, folder, ("whole", b"<html>not json</html>", "text/html"))
    try:
        status, answer = post_body(router.port, b'{"model":"tiny","prompt":"x"}')
        if status != 502 or not isinstance(answer, dict) or "error" not in answer:
            fail("garbage", f"a non-JSON 200 reached the client as {status} {str(answer)[:100]}")
    finally:
        router.stop()
        fake.shutdown()
    fake, router = via_fake(servelab, folder, ("stalled 503", 20), ["--idle-timeout", "1"])
    try:
        started = time.monotonic()
        status, answer = post_body(router.port, b'{"model":"tiny","prompt":"x"}', timeout=15)
        waited = time.monotonic() - started
        if status != 503 or "error" not in answer or waited > 10:
            fail("garbage", f"a replica's 503 that stalled mid-body reached the client as "
                 f"{status} {str(answer)[:100]} after {waited:.1f} s (expected the router's "
                 f"own 503 after --idle-timeout 1 s)")
    finally:
        router.stop()
        fake.shutdown()
    print("  garbage: a cut stream and one without [DONE] end with an error event; a "
          "non-JSON 200 is a 502; a 503 that stalls mid-body gives the router's own 503 after "
          f"--idle-timeout ({waited:.1f} s): ok")


def check_big_answers(servelab, model, folder):
    big = b"data: " + b'{"t":"' + b"x" * (10 << 20) + b'"}' + b"\n\n"
    pieces = [big[i:i + 65536] for i in range(0, len(big), 65536)] + [b"data: [DONE]\n\n"]
    fake, router = via_fake(servelab, folder, ("stream", pieces))
    try:
        events, seconds = read_stream(router.url, {"model": "tiny", "prompt": "x",
                                                   "stream": True})
        if events[-1] != "[DONE]" or seconds > 2:
            fail("big_answers", f"one 10 MiB event took {seconds:.2f} s through the router "
                 f"(ending {events[-1][:40]!r}; expected well under a second and [DONE])")
        print(f"  big_answers: one 10 MiB event relayed in {seconds:.2f} s: ok")
    finally:
        router.stop()
        fake.shutdown()
    over = [b"data: " + b"x" * (17 << 20) + b"\n\n", b"data: [DONE]\n\n"]
    fake, router = via_fake(servelab, folder, ("stream", over))
    try:
        events, _ = read_stream(router.url, {"model": "tiny", "prompt": "x", "stream": True})
        if not is_error_event(events[-1]) or "bytes" not in events[-1]:
            fail("big_answers", f"a 17 MiB event (cap 16 MiB) ended as {events[-1][:80]!r}")
    finally:
        router.stop()
        fake.shutdown()
    whole = json.dumps({"choices": [{"text": "y" * (10_000_000)}]}).encode()
    fake, router = via_fake(servelab, folder, ("whole", whole, "application/json"),
                            ["--max-response-bytes", str(32 << 20)])
    try:
        post_body(router.port, b'{"model":"tiny","prompt":"warm"}')
        baseline = rss_bytes(router.process.pid)
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            statuses = {status for status, _ in
                        pool.map(lambda _: post_body(router.port, b'{"prompt":"x"}'), range(16))}
        time.sleep(1.0)
        after = rss_bytes(router.process.pid)
        if statuses != {200} or after > 1.1 * baseline:
            fail("big_answers", f"16 whole 10 MB answers: statuses {statuses}, router RSS "
                 f"{baseline >> 20} -> {after >> 20} MiB after (limit +10 %)")
        print(f"  big_answers: 16 whole 10 MB answers at once; router RSS {baseline >> 20} -> "
              f"{after >> 20} MiB after: ok")
    finally:
        router.stop()
        fake.shutdown()
    fake, router = via_fake(servelab, folder, ("whole", whole, "application/json"),
                            ["--max-response-bytes", str(1 << 20)])
    try:
        status, answer = post_body(router.port, b'{"prompt":"x"}')
        if status != 502 or "bytes" not in json.dumps(answer):
            fail("big_answers", f"a 10 MB answer over --max-response-bytes 1 MiB got {status}")
        print("  big_answers: an answer over --max-response-bytes is a 502: ok")
    finally:
        router.stop()
        fake.shutdown()


CHECKS = ["deep_json", "framing", "chunked_limit", "json_memory", "slow_clients", "sighup",
          "kv_share", "pool_size", "hung_backend", "client_left", "garbage", "big_answers"]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--servelab", required=True)
    parser.add_argument("--only", nargs="*", choices=CHECKS, default=CHECKS)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        model = os.path.join(folder, "tiny.gguf")
        subprocess.run([args.servelab, "-q", "make-tiny-model", "-o", model, "--seed", "3",
                        "--context", "4096"], check=True)
        for name in args.only:
            started = time.monotonic()
            globals()[f"check_{name}"](args.servelab, model, folder)
            print(f"    ({name}: {time.monotonic() - started:.1f} s)")
    print("PASS")


if __name__ == "__main__":
    main()
