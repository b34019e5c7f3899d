#!/usr/bin/env python3
"""test_bench_grammar.py — constrained random walks on SmolLM2's vocabulary, judged by jsonschema.

Lab 12 (chapter 11.6, constrained decoding): the Python half of the lab's
property test (the C++ half is tests/unit/constrained_property_test.cpp, on a
made-up vocabulary). For random schemas (test_json_schema_grammar.py's
generator) and the five smallest of data/schemas without length bounds, `servelab bench grammar --cache both
--print-outputs` compiles the schema for the model's real vocabulary (its
first --vocab-size tokens), walks it token by token as a model would be
decoded (a token drawn uniformly among those the mask allows), and at every
step computes the mask both ways, from the cache and by the trie walk, and
exits non-zero if they differ or if the matcher refuses a token its mask
allowed. Every walk that finished (an end token) must be a JSON text that
parses with json.loads and validates with jsonschema.

Exit 77 (ctest: skipped) when the model file is absent.
Usage: test_bench_grammar.py --servelab PATH [--seed N] [--random N] [--vocab-size N]
Prints one line per failure and "N passed, N failed" last; exit 1 on failure.
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_json_schema_grammar import Tally, random_schemas, validation_error  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
MODEL = os.path.join(ROOT, "data", "models", "SmolLM2-135M-Instruct.Q4_1.gguf")


def collection(count=5):
    """The smallest schemas of data/schemas without length bounds (a minLength or
    maxLength is a chain of rules whose cache takes seconds to build): quick to compile."""
    folder = os.path.join(ROOT, "data", "schemas")
    paths = sorted((os.path.getsize(p), p) for p in
                   (os.path.join(folder, n) for n in os.listdir(folder) if n.endswith(".json")))
    chosen = []
    for _, path in paths:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        if "minLength" not in text and "maxLength" not in text:
            chosen.append(path)
    return chosen[:count]


def bench(servelab, schema_path, seed, vocab_size, walks):
    command = [servelab, "-q", "bench", "grammar", "--json", "--print-outputs", "--cache", "both",
               "--json-schema", schema_path, "--walks", str(walks), "--seed", str(seed),
               "--vocab-size", str(vocab_size), "--soft-max-tokens", "48", "--max-tokens", "160",
               "-m", MODEL]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


def check_schema(servelab, tally, name, schema, seed, args):
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(schema, f)
        path = f.name
    try:
        r = bench(servelab, path, seed, args.vocab_size, args.walks)
    finally:
        os.unlink(path)
    if not tally.check(r.returncode == 0, f"{name}: bench grammar exited {r.returncode}: "
                                          f"{r.stderr.strip()[-400:]}; schema {json.dumps(schema)}"):
        return 0
    row = json.loads(r.stdout)["grammars"][0]
    for text in row["outputs"]:
        try:
            instance = json.loads(text)
        except ValueError as e:
            tally.check(False, f"{name}: a finished walk is not JSON ({e}): {text!r}")
            continue
        error = validation_error(schema, instance)
        tally.check(error is None, f"{name}: a finished walk {text!r} is invalid: {error}; "
                                   f"schema {json.dumps(schema)}")
    return len(row["outputs"])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--servelab", required=True)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--random", type=int, default=16, help="random schemas to draw")
    parser.add_argument("--vocab-size", type=int, default=8192)
    parser.add_argument("--walks", type=int, default=3)
    args = parser.parse_args()
    if not os.path.exists(MODEL):
        print(f"skipped: no {MODEL} (make model downloads it)")
        return 77
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    print(f"seed {seed} (--seed {seed} repeats this run)")
    tally = Tally()
    finished = 0
    schemas = collection()
    for k, path in enumerate(schemas):
        with open(path, encoding="utf-8") as f:
            finished += check_schema(args.servelab, tally, os.path.basename(path), json.load(f),
                                     seed + k, args)
    for k, schema in enumerate(random_schemas(seed, args.random)):
        finished += check_schema(args.servelab, tally, f"random #{k}", schema, seed + k, args)
    walks = (len(schemas) + args.random) * args.walks
    tally.check(finished * 3 >= walks, f"only {finished} of {walks} walks finished")
    print(f"{finished} of {walks} walks finished and were validated")
    print(f"{tally.passed} passed, {tally.failed} failed")
    return 1 if tally.failed else 0


if __name__ == "__main__":
    sys.exit(main())
