#!/usr/bin/env python3
"""make_quant_goldens.py — llama.cpp's perplexity and greedy text for each model file of Lab 10.

Part of Lab 10, weight quantization (chapter 11.7 GPTQ and AWQ; 11.8 what
quantization costs). Writes data/golden/llamacpp_quant.json, which is
committed; tests/e2e/test_perplexity_llamacpp.py compares `servelab
perplexity` and `servelab generate` with it (docs/perplexity.md).

For each model file, keyed by its sha256, it records what llama.cpp's own
tools (built from the pinned source by tools/build_peers.sh) say about it:

  perplexity  llama-perplexity on data/text/kjv_evaluation.txt with
              -c 128 --chunks 8 -t 2 (a case small enough for every test run):
              its "Final estimate: PPL = P +/- E".
  completion  llama-completion's greedy continuation (--temp 0 --top-k 1,
              --ignore-eos, 24 tokens) of a fixed prompt, as token ids. The
              ids come from the session file llama-completion writes with
              --prompt-cache-all (a u32 magic, u32 version, u32 count, then
              that many i32 token ids: llama_state_save_file), so no
              re-tokenization of the printed text is involved.

Each entry carries "recreate": the servelab command that makes the file
from the downloaded model ("" for the downloaded model itself), with {out}
standing for the output path. The test runs it, checks the sha256 equals
the entry's key, and only then compares — so a change to the quantizer that
changes its output bytes shows up as that, not as a perplexity mismatch.

    tools/build_peers.sh && make build
    .venv/bin/python tools/goldens/make_quant_goldens.py    # every entry below
    .venv/bin/python tools/goldens/make_quant_goldens.py --only rtn_q4_0

Entries already in the JSON and not made again are kept.
"""
from __future__ import annotations

import argparse
import datetime
import json
import pathlib
import re
import shlex
import struct
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools" / "setup"))
from fetch_model import sha256_of  # noqa: E402  (the one file hash every golden and download uses)

OUT_JSON = ROOT / "data" / "golden" / "llamacpp_quant.json"
PEERS_BIN = ROOT / "build" / "peers" / "bin"
WORK_DIR = ROOT / "build" / "quant_goldens"
SOURCE_MODEL = "data/models/SmolLM2-135M-Instruct.Q4_1.gguf"
EVAL_TEXT = "data/text/kjv_evaluation.txt"

THREADS = 2
PPL_CONTEXT = 128
PPL_CHUNKS = 8
PROMPT = "The capital of France is"
NEW_TOKENS = 24

# name → the servelab command that makes the file ("" : the downloaded model).
ENTRIES = {
    "source_q4_1": "",
    "rtn_q4_0": f"servelab quantize -m {SOURCE_MODEL} -o {{out}} --method rtn --type q4_0",
    "awq_q4_0": f"servelab quantize -m {SOURCE_MODEL} -o {{out}} --method awq --type q4_0 "
                f"--calibration-sequences 8 --calibration-tokens 128",
    "gptq_q4_0": f"servelab quantize -m {SOURCE_MODEL} -o {{out}} --method gptq --type q4_0 "
                 f"--calibration-sequences 8 --calibration-tokens 128",
}

SESSION_MAGIC = 0x6767736E  # "ggsn", LLAMA_SESSION_MAGIC


def run(cmd: list[str]) -> subprocess.CompletedProcess:
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"make_quant_goldens: {shlex.join(cmd)} failed ({result.returncode}):\n"
                         f"{result.stderr[-3000:]}")
    return result


def model_file(name: str, recreate: str, servelab: pathlib.Path) -> pathlib.Path:
    if not recreate:
        return ROOT / SOURCE_MODEL
    out = WORK_DIR / f"{name}.gguf"
    out.parent.mkdir(parents=True, exist_ok=True)
    args = shlex.split(recreate.format(out=out))
    assert args[0] == "servelab", recreate
    run([str(servelab), *args[1:]])
    return out


def llama_perplexity(model: pathlib.Path) -> dict:
    result = run([str(PEERS_BIN / "llama-perplexity"), "-m", str(model), "-f", str(ROOT / EVAL_TEXT),
                  "-c", str(PPL_CONTEXT), "--chunks", str(PPL_CHUNKS), "-t", str(THREADS)])
    match = re.search(r"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)", result.stderr + result.stdout)
    if match is None:
        raise SystemExit(f"make_quant_goldens: no final estimate from llama-perplexity on {model}:\n"
                         f"{result.stderr[-3000:]}")
    return {"ppl": float(match[1]), "ppl_stderr": float(match[2]),
            "context": PPL_CONTEXT, "chunks": PPL_CHUNKS}


def llama_completion(model: pathlib.Path) -> dict:
    session = WORK_DIR / "completion.session"
    session.parent.mkdir(parents=True, exist_ok=True)
    session.unlink(missing_ok=True)
    result = run([str(PEERS_BIN / "llama-completion"), "-m", str(model), "-p", PROMPT,
                  "-n", str(NEW_TOKENS), "--temp", "0", "--top-k", "1", "-s", "0",
                  "-t", str(THREADS), "-c", "256", "-no-cnv", "--ignore-eos",
                  "--no-display-prompt", "--prompt-cache", str(session), "--prompt-cache-all"])
    data = session.read_bytes()
    magic, _version, count = struct.unpack_from("<III", data)
    if magic != SESSION_MAGIC:
        raise SystemExit(f"make_quant_goldens: {session} is not a llama.cpp session file")
    ids = list(struct.unpack_from(f"<{count}i", data, 12))
    # The session holds the prompt, then every token decoded after it.
    generated = ids[len(ids) - NEW_TOKENS:]
    text = result.stdout.split("\nllama_completion: saving")[0]
    return {"prompt": PROMPT, "prompt_ids": ids[:len(ids) - NEW_TOKENS],
            "generated_ids": generated, "text": text}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", choices=sorted(ENTRIES),
                        help="make only this entry (repeatable); the others are kept")
    parser.add_argument("--servelab", type=pathlib.Path, default=ROOT / "build/release/servelab")
    args = parser.parse_args()
    for tool in ("llama-perplexity", "llama-completion"):
        if not (PEERS_BIN / tool).exists():
            raise SystemExit(f"make_quant_goldens: no {PEERS_BIN / tool}: run tools/build_peers.sh")
    if not (ROOT / EVAL_TEXT).exists():
        raise SystemExit(f"make_quant_goldens: no {EVAL_TEXT}: run tools/setup/make_text_data.py")

    golden = json.loads(OUT_JSON.read_text()) if OUT_JSON.exists() else {"models": {}}
    models = golden["models"]
    for name in args.only or list(ENTRIES):
        recreate = ENTRIES[name]
        path = model_file(name, recreate, args.servelab)
        digest = sha256_of(path)
        # A re-made entry replaces the old one of the same name.
        for key in [k for k, v in models.items() if v["name"] == name]:
            del models[key]
        print(f"make_quant_goldens: {name}: {path.name} sha256 {digest[:12]}...", flush=True)
        models[digest] = {
            "name": name,
            "file": path.name,
            "recreate": recreate,
            "perplexity": llama_perplexity(path),
            "completion": llama_completion(path),
        }
        print(f"  PPL {models[digest]['perplexity']['ppl']} "
              f"+/- {models[digest]['perplexity']['ppl_stderr']}; "
              f"greedy: {models[digest]['completion']['text']!r}", flush=True)

    golden["header"] = {
        "made_by": "tools/goldens/make_quant_goldens.py",
        "llama_cpp_commit": (ROOT / "build/peers/commit").read_text().strip(),
        "llama_cpp_stamp": (ROOT / "build/peers/stamp").read_text().strip(),
        "date": datetime.date.today().isoformat(),
        "text": EVAL_TEXT,
        "text_sha256": sha256_of(ROOT / EVAL_TEXT),
        "threads": THREADS,
        "perplexity_command": f"llama-perplexity -m MODEL -f {EVAL_TEXT} -c {PPL_CONTEXT} "
                              f"--chunks {PPL_CHUNKS} -t {THREADS}",
        "completion_command": f"llama-completion -m MODEL -p {PROMPT!r} -n {NEW_TOKENS} --temp 0 "
                              f"--top-k 1 -no-cnv --ignore-eos -t {THREADS}",
        "note": "llama.cpp quantizes activations to 8 bits inside its quantized matmuls and keeps "
                "the KV cache in F16, so servelab's figures are compared within a tolerance "
                "(tests/e2e/test_perplexity_llamacpp.py, docs/perplexity.md).",
    }
    golden = {"header": golden["header"], "models": dict(sorted(models.items(),
                                                                  key=lambda kv: kv[1]["name"]))}
    OUT_JSON.write_text(json.dumps(golden, indent=1) + "\n")
    print(f"make_quant_goldens: wrote {OUT_JSON.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
