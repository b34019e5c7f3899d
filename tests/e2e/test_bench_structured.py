#!/usr/bin/env python3
"""test_bench_structured.py — `servelab bench structured` and its report, small and fast.

Lab 12 (chapter 11.6, constrained decoding). Runs
tools/reports/structured_report.py --servelab-only on two small schemas of
data/schemas/ with SmolLM2 (24 tokens, one round, batches 1 and 2): the
bench must report every figure (compile time, masks, both arms' decode
speed, the stop and JSON counts), write one output line per schema, arm and
batch, and every constrained output that finished with "stop" must be valid
under its schema, judged by Python's jsonschema (the report exits 1
otherwise). Then bad input: a missing schema, a file that is not JSON, no
schema the converter takes (each one line on stderr, exit 1); and a schema
it refuses beside one it takes is left out and listed with its reason. No timing
is checked. About 15 s; skipped (exit 77) without the model.

Usage: test_bench_structured.py --servelab PATH
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
MODEL = os.path.join(ROOT, "data", "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
# Small grammars (compiled in well under a second); the second one's answer
# finishes with "stop" within 24 tokens.
SCHEMAS = ["data/schemas/importmap.json", "data/schemas/minecraft-pack-mcmeta.json"]
FAILURES = []


def check(name, condition, detail=""):
    print(f"{'ok  ' if condition else 'FAIL'} {name}" + (f": {detail}" if detail and not condition else ""))
    if not condition:
        FAILURES.append(name)


def test_report(servelab, workdir):
    out = os.path.join(workdir, "report.json")
    done = subprocess.run(
        [sys.executable, os.path.join(ROOT, "tools/reports/structured_report.py"), "--servelab-only",
         "--servelab-bin", servelab, "--schemas", *SCHEMAS, "--max-tokens", "24", "--repeats", "1",
         "--concurrency", "1", "2", "--threads", "1", "--out", out],
        cwd=ROOT, capture_output=True, text=True, timeout=120)
    check("structured_report.py exits 0 (every stopped output valid)", done.returncode == 0,
          done.stderr[-2000:])
    if done.returncode != 0:
        return
    results = json.load(open(out))
    bench = results["servelab"]
    check("one row per schema", [r["schema"] for r in bench["per_schema"]] == SCHEMAS,
          bench["per_schema"])
    check("compile times measured", all(r["compile_ms"] > 0 for r in bench["per_schema"]))
    check("a row per batch", [b["batch"] for b in bench["batches"]] == [1, 2], bench["batches"])
    for b in bench["batches"]:
        name = f"batch {b['batch']}"
        check(f"{name}: masks timed", b["mask"]["count"] > 0 and b["mask"]["p99_us"] > 0, b["mask"])
        check(f"{name}: both arms decoded",
              b["constrained_tokens_per_s"] > 0 and b["unconstrained_tokens_per_s"] > 0, b)
        check(f"{name}: a stopped output parses as JSON",
              b["finished_stop"] >= 1 and b["stop_parses_as_json"] == b["finished_stop"], b)
    records = [json.loads(line) for line in
               open(os.path.join(workdir, "report_logs", "servelab_outputs.jsonl"))]
    check("an output line per schema, arm and batch", len(records) == 2 * 2 * 2, len(records))
    for r in records:
        matched = [c for c in records if c["arm"] == "constrained" and c["batch"] == r["batch"]
                   and c["schema"] == r["schema"]]
        if r["arm"] == "unconstrained":
            check(f"unconstrained {r['schema']} at batch {r['batch']} as long as constrained",
                  r["output_tokens"] == matched[0]["output_tokens"], r["output_tokens"])
    check("batch 1's constrained outputs carry a mask per token",
          all(len(r["mask_us"]) == r["output_tokens"] for r in records
              if r["arm"] == "constrained" and r["batch"] == 1))
    for v in results["validity"].values():
        check("the judge saw a stopped output", v["finished_stop"] >= 1, v)


def expect_error(servelab, name, args, needle):
    done = subprocess.run([servelab, "-q", "bench", "structured", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    check(f"{name}: exit 1", done.returncode == 1, f"got {done.returncode}")
    check(f"{name}: one line naming it", len(lines) == 1 and lines[0].startswith("servelab: error:")
          and needle in lines[0], done.stderr)


def test_bad_input(servelab, workdir):
    not_json = os.path.join(workdir, "not_json.json")
    with open(not_json, "w") as f:
        f.write("{\"type\": ")
    refused = os.path.join(workdir, "unique.json")
    with open(refused, "w") as f:
        json.dump({"type": "array", "uniqueItems": True}, f)
    expect_error(servelab, "a missing schema", ["--schemas", "/nonexistent/schema.json"],
                 "cannot read schema /nonexistent/schema.json")
    expect_error(servelab, "a schema that is not JSON", ["--schemas", not_json], "is not JSON")
    expect_error(servelab, "no schema that compiles", ["--schemas", refused, "--repeats", "1"],
                 "no schema compiled")
    # Beside one that compiles, a refused schema is left out and reported.
    done = subprocess.run([servelab, "-q", "bench", "structured", "--schemas", f"{refused},{SCHEMAS[0]}",
                           "--max-tokens", "4", "--repeats", "1", "--batch", "1", "--json"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    report = json.loads(done.stdout) if done.returncode == 0 else {}
    check("a refused schema beside one that compiles: left out, with the reason",
          [r["schema"] for r in report.get("refused", [])] == [refused]
          and "uniqueItems" in report["refused"][0]["reason"]
          and [r["schema"] for r in report["per_schema"]] == [SCHEMAS[0]], done.stderr[-500:])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--servelab", required=True)
    args = parser.parse_args()
    if not os.path.isfile(MODEL):
        print(f"skipped: no model at {MODEL}")
        return 77
    servelab = os.path.abspath(args.servelab)
    with tempfile.TemporaryDirectory() as workdir:
        test_report(servelab, workdir)
        test_bad_input(servelab, workdir)
    print(f"{len(FAILURES)} failed" if FAILURES else "all passed")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
