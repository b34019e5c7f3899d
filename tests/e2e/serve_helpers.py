"""serve_helpers.py — start `servelab serve` on a free port and talk to it, for the e2e tests.

Shared by test_openai_server.py (the API) and test_server_reliability.py
(hostile and careless clients): a Server that waits for /health, reads
/metrics, and stops with SIGTERM; raw-socket helpers for what the official
client cannot send (slow headers, chunked bodies, pipelined requests); and
a process's memory from /proc. test_hostile_clients.py uses them too.
"""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import openai


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`servelab serve` of `model`, named "tiny", or of several: models=[(path, name), ...]."""

    def __init__(self, servelab, model=None, extra=(), kv_memory="64MiB", models=None):
        self.port = free_port()
        models = models or [(model, "tiny")]
        model_args = [arg for path, name in models
                      for arg in ("--model", path, "--served-model-name", name)]
        self.process = subprocess.Popen(
            [servelab, "serve", *model_args, "--port", str(self.port), "--kv-memory",
             kv_memory, *extra],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env=dict(os.environ, OMP_NUM_THREADS="1"))
        self.url = f"http://127.0.0.1:{self.port}"
        for _ in range(400):
            try:
                urllib.request.urlopen(self.url + "/health", timeout=1)
                return
            except OSError:
                if self.process.poll() is not None:
                    sys.exit("server exited: " + self.process.stdout.read())
                time.sleep(0.05)
        sys.exit("server did not start")

    def client(self, api_key="none", timeout=60.0):
        return openai.OpenAI(base_url=self.url + "/v1", api_key=api_key, max_retries=0,
                             timeout=timeout)

    def metrics(self, timeout=5):
        """Every sample by its full name (`name{model="tiny"}`), and each family's
        samples summed over the model label by the bare name (`name`)."""
        text = urllib.request.urlopen(self.url + "/metrics", timeout=timeout).read().decode()
        values = {}
        summed = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                values[name] = float(value)
                bare = re.sub(r'model="(?:[^"\\]|\\.)*",?', "", name).replace("{}", "")
                summed[bare] = summed.get(bare, 0.0) + float(value)
        values.update({k: v for k, v in summed.items() if k not in values})
        return values

    def metric(self, name):
        return self.metrics()[name]

    def peak_rss_bytes(self):
        return proc_status_bytes(self.process.pid, "VmHWM")

    def stop(self, timeout=60):
        """SIGTERM, then the exit status must be 0; returns the rest of the server's log."""
        self.process.send_signal(signal.SIGTERM)
        rc = self.process.wait(timeout=timeout)
        log = self.process.stdout.read()
        assert rc == 0, ("exit status after SIGTERM", rc, log[-2000:])
        return log


def read_http_response(sock, buffer=b""):
    """One HTTP/1.1 response with a Content-Length from `sock`: (status, headers, body, rest)."""
    while b"\r\n\r\n" not in buffer:
        data = sock.recv(65536)
        if not data:
            raise ConnectionError(f"the connection closed before a response head ({buffer!r})")
        buffer += data
    head, buffer = buffer.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        key, _, value = line.partition(":")
        headers[key.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0"))
    while len(buffer) < length:
        data = sock.recv(65536)
        if not data:
            raise ConnectionError("the connection closed inside a response body")
        buffer += data
    return status, headers, buffer[:length], buffer[length:]


def post_head(path, body_length=None, chunked=False, extra=""):
    head = f"POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
    if chunked:
        head += "Transfer-Encoding: chunked\r\n"
    else:
        head += f"Content-Length: {body_length}\r\n"
    return (head + extra + "\r\n").encode()


def ttft_s(client, prompt, results, key):
    """Streams a 2-token completion of `prompt`; results[key] = seconds to its first chunk."""
    start = time.perf_counter()
    stream = client.completions.create(model="tiny", prompt=prompt, max_tokens=2, stream=True)
    for _ in stream:
        results[key] = time.perf_counter() - start
        break
    for _ in stream:
        pass


def send_chunked(port, body, chunk_bytes=65536, path="/v1/completions"):
    """POSTs `body` with Transfer-Encoding: chunked; returns (status, response body)."""
    with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
        try:
            s.sendall(post_head(path, chunked=True))
            for i in range(0, len(body), chunk_bytes):
                piece = body[i:i + chunk_bytes]
                s.sendall(b"%x\r\n" % len(piece) + piece + b"\r\n")
            s.sendall(b"0\r\n\r\n")
        except OSError:
            pass  # answered 413 and closed: the answer is still there
        status, _, answer, _ = read_http_response(s)
        return status, answer


def padded_body(size):
    """A valid 1-token completion request of exactly `size` bytes (spaces pad it)."""
    core = json.dumps({"model": "tiny", "prompt": "a", "max_tokens": 1})
    return (core[:-1] + " " * (size - len(core)) + "}").encode()


def proc_status_bytes(pid, field):
    """A size field of /proc/PID/status ("VmRSS", "VmHWM"), in bytes."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(field)


def expect_bad_request(call, param, words=""):
    """`call()` must raise the client's BadRequestError (a 400) whose body names
    `param` and whose message holds `words`."""
    try:
        call()
    except openai.BadRequestError as error:
        body = error.body if isinstance(error.body, dict) else {}
        assert body.get("param") == param, (param, error.body)
        assert words in body.get("message", ""), (words, error.body)
        return
    sys.exit(f"accepted a request that should be refused ({param}: {words})")
