#!/usr/bin/env python3
"""structured_report.py — JSON-schema-constrained decoding: servelab against llama.cpp's server.

Lab 12 (chapter 11.6, constrained decoding); the figures of docs/perf.md's
"Structured output" section. Three steps, one after the other so that they
never share the cores:

1. `servelab bench structured --json --outputs FILE` (reference/cli/
   cmd_bench_structured.cpp): per schema of data/schemas/, a chat prompt asking
   for a JSON object valid under it, the schema in the prompt; constrained and
   length-matched unconstrained arms, interleaved, at 1 and 16 requests in
   flight; grammar compile time, mask time per token, decode tok/s.
2. Every constrained output that finished with "stop" is judged by an
   independent validator, Python's jsonschema (with the format checkers of
   tests/e2e/test_json_schema_grammar.py): the share valid must be 100%.
3. llama.cpp's own server, `llama-server` (tools/build_peers.sh builds it from
   the pinned source, the peer of `make serve-report`), on the same model file
   and the same prompts (the token ids servelab built, sent to /completion),
   greedy, the same max_tokens, with `json_schema` for the constrained arm and,
   for the unconstrained one, exactly as many tokens as its own constrained
   output had (`ignore_eos`), as servelab's bench does. Its valid share is
   judged the same way; its decode tok/s is the server's own timing at 1
   request in flight (predicted_n / predicted_ms) and output tokens per
   second of wall time at more (the prompts are computed once beforehand, so
   its prompt cache holds them).

Prints a markdown table and writes everything to --out as JSON.

Usage: tools/reports/structured_report.py [--limit 0] [--max-tokens 128] [--repeats 3]
       [--concurrency 1 16] [--servelab-only]
"""
from __future__ import annotations

import argparse
import concurrent.futures
import json
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools/reports"))
sys.path.insert(0, str(ROOT / "tests/e2e"))
from serve_side_by_side import Server, free_port, llama_server_binary, machine_info  # noqa: E402
from test_json_schema_grammar import validation_error  # noqa: E402  (the judge the tests use)

DEFAULT_MODEL = ROOT / "data/models/SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_BIN = ROOT / "build/release/servelab"


def log(message: str) -> None:
    print(f"[structured-report] {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- the judge

def judge(schema_path: str, text: str) -> str | None:
    """None when `text` is JSON valid under the schema, else why not."""
    schema = json.loads((ROOT / schema_path).read_text())
    try:
        instance = json.loads(text)
    except json.JSONDecodeError as e:
        return f"not JSON: {e}"
    return validation_error(schema, instance)


def judge_outputs(records: list[dict]) -> dict:
    """The constrained outputs that finished with stop, judged: counts and failures."""
    stopped = [r for r in records if r["arm"] == "constrained" and r["finish_reason"] == "stop"]
    failures = []
    for r in stopped:
        error = judge(r["schema"], r["text"])
        if error is not None:
            failures.append({"schema": r["schema"], "batch": r.get("batch"), "error": error,
                             "text": r["text"][:300]})
    constrained = sum(1 for r in records if r["arm"] == "constrained")
    return {"outputs": constrained, "finished_stop": len(stopped),
            "valid": len(stopped) - len(failures), "failures": failures}


# ---------------------------------------------------------------- servelab

def run_servelab_bench(args, outputs_path: Path) -> tuple[dict, list[dict]]:
    command = [str(args.servelab_bin), "bench", "structured", "--model", str(args.model),
               "--threads", str(args.threads), "--limit", str(args.limit),
               "--max-tokens", str(args.max_tokens), "--repeats", str(args.repeats),
               "--batch", ",".join(str(c) for c in args.concurrency),
               "--outputs", str(outputs_path), "--json"]
    if args.schemas:
        command += ["--schemas", ",".join(args.schemas)]
    log("running " + " ".join(command))
    done = subprocess.run(command, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"servelab bench structured exited with {done.returncode}")
    records = [json.loads(line) for line in outputs_path.read_text().splitlines() if line]
    return json.loads(done.stdout), records


# ---------------------------------------------------------------- llama-server

def complete(url: str, body: dict, timeout_s: float) -> dict:
    request = urllib.request.Request(url + "/completion", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as e:  # a schema llama.cpp cannot convert: 400
        return {"error": e.read().decode(errors="replace")[:300]}


def llama_body(case: dict, args, constrained: bool, n_predict: int) -> dict:
    body = {"prompt": case["prompt_tokens"], "n_predict": n_predict, "temperature": 0.0,
            "seed": 0, "cache_prompt": True, "stream": False}
    if constrained:
        body["json_schema"] = case["schema_json"]
    else:
        body["ignore_eos"] = True
    return body


def run_llama_arm(url: str, cases: list[dict], args, concurrency: int, constrained: bool,
                  lengths: dict[str, int]) -> dict:
    """Every case through the server, `concurrency` in flight; the arm's figures."""
    def one(case):
        n_predict = args.max_tokens if constrained else max(1, lengths[case["schema"]])
        return case["schema"], complete(url, llama_body(case, args, constrained, n_predict),
                                        args.request_timeout_s)

    start = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max_workers=concurrency) as pool:
        answers = dict(pool.map(one, cases))
    wall_s = time.monotonic() - start
    ok = {k: a for k, a in answers.items() if "error" not in a}
    tokens = sum(a["timings"]["predicted_n"] for a in ok.values())
    decode_ms = sum(a["timings"]["predicted_ms"] for a in ok.values())
    rate = (1000.0 * tokens / decode_ms if decode_ms > 0 else 0.0) if concurrency == 1 \
        else tokens / wall_s
    return {"tokens_per_s": rate, "tokens": tokens, "wall_s": wall_s, "answers": answers}


def llama_cases(records: list[dict]) -> list[dict]:
    """One case per schema: servelab's prompt token ids and the schema."""
    cases, seen = [], set()
    for r in records:
        if r["schema"] in seen:
            continue
        seen.add(r["schema"])
        cases.append({"schema": r["schema"], "prompt_tokens": r["prompt_tokens"],
                      "schema_json": json.loads((ROOT / r["schema"]).read_text())})
    return cases


def run_llama_rounds(url: str, cases: list[dict], args) -> dict:
    """Constrained and unconstrained arms at each concurrency, interleaved by round."""
    log("computing the prompts once, for llama-server's prompt cache")
    run_llama_arm(url, cases, args, max(args.concurrency), False, {c["schema"]: 1 for c in cases})
    by_concurrency = {c: {"constrained": [], "unconstrained": []} for c in args.concurrency}
    for round_index in range(args.repeats):
        for concurrency in args.concurrency:
            arms = by_concurrency[concurrency]
            order = [True, False] if round_index % 2 == 0 else [False, True]
            for constrained in order:
                name = "constrained" if constrained else "unconstrained"
                log(f"llama-server: round {round_index + 1}/{args.repeats}, "
                    f"{concurrency} in flight, {name}")
                lengths = {} if constrained else {
                    k: a.get("tokens_predicted", 1)
                    for k, a in arms["constrained"][-1]["answers"].items()}
                arms[name].append(run_llama_arm(url, cases, args, concurrency, constrained,
                                                lengths))
    return by_concurrency


def llama_records(by_concurrency: dict) -> list[dict]:
    """The last round's answers as bench-structured output records."""
    records = []
    for concurrency, arms in by_concurrency.items():
        for arm in ("constrained", "unconstrained"):
            for schema, a in arms[arm][-1]["answers"].items():
                if "error" in a:
                    records.append({"schema": schema, "arm": arm, "batch": concurrency,
                                    "finish_reason": "refused", "text": "", "error": a["error"]})
                    continue
                finish = "length" if a.get("stop_type") == "limit" else "stop"
                records.append({"schema": schema, "arm": arm, "batch": concurrency,
                                "finish_reason": finish, "text": a["content"],
                                "output_tokens": a.get("tokens_predicted", 0)})
    return records


def summarize_llama(by_concurrency: dict) -> list[dict]:
    rows = []
    for concurrency, arms in by_concurrency.items():
        c = [run["tokens_per_s"] for run in arms["constrained"]]
        u = [run["tokens_per_s"] for run in arms["unconstrained"]]
        ratios = [a / b if b > 0 else 0.0 for a, b in zip(c, u)]
        refused = sum(1 for a in arms["constrained"][-1]["answers"].values() if "error" in a)
        rows.append({"batch": concurrency, "constrained_tokens_per_s": statistics.median(c),
                     "unconstrained_tokens_per_s": statistics.median(u),
                     "ratio": statistics.median(ratios), "ratios": ratios, "refused": refused})
    return rows


def run_llama(args, records: list[dict], work_dir: Path) -> dict:
    cases = llama_cases(records)
    longest = max(len(c["prompt_tokens"]) for c in cases)
    slots = max(args.concurrency)
    per_slot = longest + args.max_tokens + 64
    port = free_port()
    server = Server("llama.cpp", [
        str(args.llama_server), "--model", str(args.model), "--host", "127.0.0.1",
        "--port", str(port), "--threads", str(args.threads), "--threads-batch", str(args.threads),
        "--parallel", str(slots), "--ctx-size", str(per_slot * slots), "--cont-batching"],
        port=port, log_path=work_dir / "llama_server.log")
    try:
        server.wait_ready(args.start_timeout_s)
        by_concurrency = run_llama_rounds(server.url, cases, args)
    finally:
        server.stop()
    outputs = llama_records(by_concurrency)
    return {"batches": summarize_llama(by_concurrency),
            "validity": {c: judge_outputs([r for r in outputs if r["batch"] == c])
                         for c in args.concurrency},
            "outputs": outputs}


# ---------------------------------------------------------------- the table

def validity_cell(v: dict) -> str:
    share = 100.0 * v["valid"] / v["finished_stop"] if v["finished_stop"] else 0.0
    return f"{v['valid']}/{v['finished_stop']} ({share:.0f}%), {v['finished_stop']} of " \
           f"{v['outputs']} stopped"


def print_table(results: dict) -> None:
    s = results["servelab"]
    machine = results["machine"]
    print(f"\n{s['model']}, {machine['cpu']}, {s['threads']} threads, {len(s['per_schema'])} "
          f"schemas, <= {s['max_tokens']} tokens, greedy, medians of {s['repeats']} rounds, "
          f"{machine['date']}\n")
    servers = ["servelab"] + (["llama-server"] if "llama" in results else [])
    print("| figure | " + " | ".join(servers) + " |")
    print("|---|" + "---|" * len(servers))
    compile_ms = s["compile_ms"]
    rows = [("grammar compile ms, p50 / max",
             [f"{compile_ms['p50']:.1f} / {compile_ms['max']:.1f}", "–"]),
            (f"schemas compiling over the server's {compile_ms['server_limit_ms']:.0f} ms limit",
             [str(compile_ms["over_server_limit"]), "–"])]
    if s["refused"]:
        rows.append(("schemas left out: not compiled", [str(len(s["refused"])), "–"]))
    for b, row in enumerate(s["batches"]):
        c = row["batch"]
        llama_row = results["llama"]["batches"][b] if "llama" in results else None
        mask = row["mask"]
        rows.append((f"mask µs per token p50 / p99, {c} in flight",
                     [f"{mask['p50_us']:.1f} / {mask['p99_us']:.1f}", "–"]))
        rows.append((f"valid under the schema (jsonschema), {c} in flight",
                     [validity_cell(results["validity"][str(c)]),
                      validity_cell(results["llama"]["validity"][c]) if llama_row else ""]))
        for key, label in (("constrained_tokens_per_s", "decode tok/s constrained"),
                           ("unconstrained_tokens_per_s", "decode tok/s unconstrained")):
            rows.append((f"{label}, {c} in flight",
                         [f"{row[key]:.1f}", f"{llama_row[key]:.1f}" if llama_row else ""]))
        rows.append((f"constrained / unconstrained, {c} in flight",
                     [f"**{row['ratio']:.3f}×**",
                      f"{llama_row['ratio']:.3f}×" if llama_row else ""]))
        if llama_row and llama_row["refused"]:
            rows.append((f"schemas llama-server refused, {c} in flight",
                         ["0", str(llama_row["refused"])]))
    for label, cells in rows:
        print(f"| {label} | " + " | ".join(cells[:len(servers)]) + " |")
    for r in s["refused"]:
        print(f"\nleft out: {r['schema']}: {r['reason']}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--servelab-bin", type=Path, default=DEFAULT_BIN)
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    parser.add_argument("--schemas", nargs="*", default=[],
                        help="schema files or folders (default: the bench's, data/schemas)")
    parser.add_argument("--limit", type=int, default=0, help="the first N schemas (0: all)")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--llama-server", type=Path, default=None,
                        help="llama-server binary (default: tools/build_peers.sh builds it)")
    parser.add_argument("--servelab-only", action="store_true", help="skip llama.cpp")
    parser.add_argument("--start-timeout-s", type=float, default=180)
    parser.add_argument("--request-timeout-s", type=float, default=600)
    parser.add_argument("--out", type=Path, default=ROOT / "build/structured_report.json")
    args = parser.parse_args()
    for path, what in [(args.model, "model (make model)"), (args.servelab_bin, "servelab")]:
        if not path.is_file():
            parser.error(f"no {what} at {path}")
    if not args.servelab_only and args.llama_server is None:
        args.llama_server = llama_server_binary()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    work_dir = args.out.parent / (args.out.stem + "_logs")
    work_dir.mkdir(exist_ok=True)

    report, records = run_servelab_bench(args, work_dir / "servelab_outputs.jsonl")
    validity = {str(c): judge_outputs([r for r in records if r["batch"] == c])
                for c in args.concurrency}
    results = {"machine": machine_info(), "servelab": report, "validity": validity}
    if not args.servelab_only:
        results["llama"] = run_llama(args, records, work_dir)
    args.out.write_text(json.dumps(results, indent=1))
    print_table(results)
    failed = [f for v in validity.values() for f in v["failures"]]
    for f in failed:
        log(f"INVALID servelab output at batch {f['batch']} for {f['schema']}: {f['error']}")
    log(f"everything: {args.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
