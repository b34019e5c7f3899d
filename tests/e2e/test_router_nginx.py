#!/usr/bin/env python3
"""test_router_nginx.py — `servelab route` (cache-aware) against nginx's round robin (11.7).

nginx, the load balancer most deployments already run, knows nothing of
prompts: its upstream round robin spreads requests that share a system
prompt over every replica, so each replica's prefix cache must hold every
prompt. Here nginx runs as an ordinary process (its own config, logs and
temporary files in a temporary folder, a free loopback port) in front of
two fresh SmolLM2 replicas with small KV pools, and the cache-aware router
in front of two other fresh ones; both get test_router.py's
shared-system-prompt trace, streamed, one request at a time. Checked:
nginx forwards correctly (the same greedy answers as through the router;
server-sent events stream through, the first arriving well before the
last) and the cache-aware router's prefix hit rate is higher by a clear
margin; its median TTFT is lower too (a loose bound: nginx's median falls
between a hit and a miss). TTFT p50/p90 are printed for both.
Exit 77 (skip) without nginx or without the model.
Usage: test_router_nginx.py --servelab build/release/servelab
"""
import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

import openai

from serve_helpers import Server, free_port
from test_router import (SMOLLM2, SMOLLM2_KV_MEMORY, SMOLLM2_REPLICA_FLAGS, Router, measure,
                         print_table, shared_prompt_trace, system_prompts)

NGINX_CONF = """\
{user}worker_processes 1;
events {{ worker_connections 256; }}
http {{
    access_log {dir}/access.log;
    client_body_temp_path {dir}/client_body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    upstream replicas {{
{servers}
    }}
    server {{
        listen 127.0.0.1:{port};
        client_max_body_size 1m;
        location / {{
            proxy_pass http://replicas;
            # HTTP/1.1 with no Connection header: keep-alive to the replicas, and the
            # chunked answers of a stream pass through as they come.
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_read_timeout 300s;
        }}
    }}
}}
"""


class Nginx:
    """nginx as a plain foreground process, everything it writes inside `folder`."""

    def __init__(self, binary, folder, backends):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        servers = "\n".join(f"        server {b.removeprefix('http://')};" for b in backends)
        # Run as root, nginx would switch its worker to "nobody", who cannot enter the
        # (private) temporary folder.
        user = "user root;\n" if os.geteuid() == 0 else ""
        with open(os.path.join(folder, "nginx.conf"), "w") as conf:
            conf.write(NGINX_CONF.format(user=user, dir=folder, servers=servers, port=self.port))
        self.folder = folder
        self.process = subprocess.Popen(
            [binary, "-p", folder, "-c", os.path.join(folder, "nginx.conf"), "-e",
             os.path.join(folder, "error.log"), "-g", f"daemon off; pid {folder}/nginx.pid;"],
            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        for _ in range(200):
            try:
                urllib.request.urlopen(self.url + "/health", timeout=1)
                return
            except OSError:
                if self.process.poll() is not None:
                    sys.exit("nginx exited: " + self.error_log())
                time.sleep(0.05)
        sys.exit("nginx did not start: " + self.error_log())

    def error_log(self):
        path = os.path.join(self.folder, "error.log")
        return open(path).read()[-2000:] if os.path.exists(path) else ""

    def stop(self):
        self.process.send_signal(signal.SIGQUIT)  # nginx's graceful shutdown
        self.process.wait(timeout=30)


def check_streams_through(url):
    """The first event of a 48-token stream arrives well before its last: not buffered."""
    client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=120)
    start = time.perf_counter()
    arrivals = []
    for chunk in client.completions.create(model="tiny", prompt="Once upon a time",
                                           max_tokens=48, temperature=0, stream=True,
                                           extra_body={"min_tokens": 48}):
        arrivals.append(time.perf_counter() - start)
    assert len(arrivals) >= 48, len(arrivals)
    assert arrivals[0] < 0.5 * arrivals[-1], ("the stream came in one piece", arrivals[:3],
                                              arrivals[-1])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--servelab", required=True)
    parser.add_argument("--nginx", default=shutil.which("nginx") or "/usr/sbin/nginx")
    args = parser.parse_args()
    if not os.path.exists(args.nginx):
        print("SKIP: no nginx binary (tools/setup/setup.sh installs the Debian package)")
        sys.exit(77)
    if not os.path.exists(SMOLLM2):
        print(f"SKIP: no {SMOLLM2} (make model)")
        sys.exit(77)
    prompts = system_prompts(4)
    trace = shared_prompt_trace(len(prompts), 16)
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for front in ("nginx round-robin", "servelab route cache-aware"):
            replicas = [Server(args.servelab, SMOLLM2, SMOLLM2_REPLICA_FLAGS,
                               kv_memory=SMOLLM2_KV_MEMORY)
                        for _ in range(2)]
            try:
                backends = [r.url for r in replicas]
                if front.startswith("nginx"):
                    proxy = Nginx(args.nginx, folder, backends)
                else:
                    proxy = Router(args.servelab, backends, "cache-aware", log_folder=folder)
                try:
                    rows.append(measure(front, proxy.url, replicas, prompts, trace, len(prompts)))
                    if front.startswith("nginx"):
                        check_streams_through(proxy.url)
                finally:
                    proxy.stop()
            finally:
                for replica in replicas:
                    replica.stop()
    print_table(rows, f"{len(trace)} chat requests (~{rows[0]['prompt_tokens']:.0f} prompt tokens "
                      f"each) over {len(prompts)} system prompts, 2 SmolLM2 replicas "
                      f"(--kv-memory {SMOLLM2_KV_MEMORY}), one request at a time; TTFT over the "
                      f"{len(trace) - len(prompts)} after the first round")
    nginx, cache_aware = rows
    assert nginx["texts"] == cache_aware["texts"], "nginx and the router gave other answers"
    print("  nginx forwards: the same greedy answers as the router; SSE streams through: ok")
    assert cache_aware["hit_rate"] > nginx["hit_rate"] + 0.2, rows
    # Only a generous bound: nginx's median falls between a hit and a miss, depending on
    # which of its requests happened to hit.
    assert cache_aware["ttft_p50_ms"] < nginx["ttft_p50_ms"], rows
    print("  cache-aware: higher prefix hit rate, lower median TTFT than nginx's round robin: ok")
    print("PASS")


if __name__ == "__main__":
    main()
