#!/usr/bin/env python3
"""test_json_schema_grammar.py — JSON Schema grammars against Python's json and jsonschema.

Lab 12 (chapter 11.6, constrained decoding). The converter
(reference/constrained/json_schema_grammar.h) promises that every text its
grammar allows is valid for the schema. An independent judge checks that
promise: for every schema of the collection (data/schemas/*.json, real-world
schemas from SchemaStore) and ~100 random schemas drawn by a seeded
generator over the supported keywords, `servelab grammar --json-schema -
--sample 30` draws random sentences, and each must parse with json.loads
and validate with jsonschema (formats checked too: date, time, date-time,
email, uuid, uri; the time ones and uri by checkers here, as jsonschema
skips them without the rfc3339-validator and rfc3987 packages).

The other direction, for a few schemas: valid samples made invalid (a
required property dropped, a value of the wrong type, a bound crossed)
must be rejected by `servelab grammar --check`, and the samples themselves
accepted. And bad input (no constraint, bad JSON, a refused keyword, ...)
gives one line on stderr naming it.

Usage: test_json_schema_grammar.py --servelab PATH [--seed N] [--random N]
Prints one line per failure and "N passed, N failed" last; exit 1 on failure.
"""
import argparse
import concurrent.futures
import datetime
import glob
import json
import os
import random
import re
import subprocess
import sys
import warnings

import jsonschema

# A $schema jsonschema does not know ("draft-04/schema" without its "#") means
# the latest draft, with a warning per schema: the validation is what counts.
warnings.filterwarnings("ignore", message="The metaschema specified by")

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
SAMPLES = 30

# ---------------------------------------------------------------- judges

FORMATS = jsonschema.FormatChecker()
RFC3339_TIME = re.compile(r"(\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-](\d{2}):(\d{2}))")
WHATWG_EMAIL = re.compile(r"[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]+@[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
                          r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*")


def rfc3339_time(text):
    m = RFC3339_TIME.fullmatch(text)
    if not m:
        return False
    hour, minute, second = int(m[1]), int(m[2]), int(m[3])
    offset_ok = m[6] is None or (int(m[6]) <= 23 and int(m[7]) <= 59)
    return hour <= 23 and minute <= 59 and second <= 60 and offset_ok


@FORMATS.checks("time")
def is_time(instance):
    return not isinstance(instance, str) or rfc3339_time(instance)


@FORMATS.checks("date-time")
def is_date_time(instance):
    if not isinstance(instance, str):
        return True
    date, sep, time = instance.partition("T") if "T" in instance else instance.partition("t")
    try:
        datetime.date.fromisoformat(date)
    except ValueError:
        return False
    return sep != "" and len(date) == 10 and rfc3339_time(time)


@FORMATS.checks("email")
def is_email(instance):
    return not isinstance(instance, str) or WHATWG_EMAIL.fullmatch(instance) is not None


# RFC 3986's URI (all of it but IP literals), for format "uri": jsonschema
# checks it only with the rfc3987 package.
_UNRESERVED, _PCT, _SUB = r"[A-Za-z0-9\-._~]", r"%[0-9A-Fa-f]{2}", r"[!$&'()*+,;=]"
_PCHAR = f"(?:{_UNRESERVED}|{_PCT}|{_SUB}|[:@])"
_AUTHORITY = (f"(?:(?:{_UNRESERVED}|{_PCT}|{_SUB}|:)*@)?(?:{_UNRESERVED}|{_PCT}|{_SUB})*"
              r"(?::[0-9]*)?")
_HIER = (f"//{_AUTHORITY}(?:/{_PCHAR}*)*|/(?:{_PCHAR}+(?:/{_PCHAR}*)*)?|{_PCHAR}+(?:/{_PCHAR}*)*|")
RFC3986_URI = re.compile(f"[A-Za-z][A-Za-z0-9+\\-.]*:(?:{_HIER})(?:\\?(?:{_PCHAR}|[/?])*)?"
                         f"(?:#(?:{_PCHAR}|[/?])*)?")


@FORMATS.checks("uri")
def is_uri(instance):
    return not isinstance(instance, str) or RFC3986_URI.fullmatch(instance) is not None


def validation_error(schema, instance):
    """None if `instance` validates, else jsonschema's message."""
    cls = jsonschema.validators.validator_for(schema)
    try:
        cls(schema, format_checker=FORMATS).validate(instance)
    except jsonschema.ValidationError as e:
        return f"{e.message} (at {list(e.absolute_path)})"
    return None


# ---------------------------------------------------------------- servelab

def grammar(servelab, schema, *args, timeout=60):
    return subprocess.run([servelab, "-q", "grammar", "--json-schema", "-", *args],
                          input=json.dumps(schema), capture_output=True, text=True,
                          timeout=timeout)


def samples_of(servelab, schema, seed):
    r = grammar(servelab, schema, "--sample", str(SAMPLES), "--seed", str(seed))
    if r.returncode != 0:
        return None, r.stderr.strip()
    # split("\n"), not splitlines(): a sample may hold U+2028 and friends raw.
    return [json.loads(line) for line in r.stdout.split("\n") if line], None


class Tally:
    def __init__(self):
        self.passed = 0
        self.failed = 0

    def check(self, ok, what):
        if ok:
            self.passed += 1
        else:
            self.failed += 1
            print(f"FAIL {what}")
        return ok


def in_parallel(function, argument_lists):
    """function(*arguments) for each list, a few processes at a time (each run is
    mostly process start-up); results in order."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=2 * (os.cpu_count() or 2)) as pool:
        return list(pool.map(lambda arguments: function(*arguments), argument_lists))


def check_samples(servelab, tally, name, schema, seed, sampled=None):
    texts, error = sampled if sampled is not None else samples_of(servelab, schema, seed)
    if not tally.check(texts is not None, f"{name}: converted ({error}); schema {json.dumps(schema)}"):
        return []
    good = []
    for text in texts:
        try:
            instance = json.loads(text)
        except ValueError as e:
            tally.check(False, f"{name}: sample is not JSON ({e}): {text!r}")
            continue
        error = validation_error(schema, instance)
        if tally.check(error is None, f"{name}: sample {text!r} is invalid: {error}; "
                                      f"schema {json.dumps(schema)}"):
            good.append(instance)
    return good


# ---------------------------------------------------------------- random schemas

NAMES = ["id", "name", "name2", "a", "ab", "é", "q\"uote", "tags", "count", "x-y"]
STRINGS = ["", "red", "é😀", "say \"hi\"", "back\\slash", "tab\there", "line\nbreak"]
PATTERNS = ["^[a-z]+$", "^\\d{3}-\\d{2}$", "ab", "^x", "y$", "^(foo|bar)[0-9]?$",
            "^[A-Z][a-z]*( [A-Z][a-z]*)*$", "^[^@]+@[^@]+$"]
FORMAT_NAMES = ["date", "time", "date-time", "email", "uuid", "uri"]


def random_value(rng, depth=0):
    kind = rng.choice(["str", "int", "float", "null", "bool"] + (["list", "dict"] if depth < 1 else []))
    if kind == "str":
        return rng.choice(STRINGS)
    if kind == "int":
        return rng.choice([0, -1, 7, 2**40, -(2**63)])
    if kind == "float":
        return rng.choice([1.5, -0.25, 1e100, 2.0])
    if kind == "null":
        return None
    if kind == "bool":
        return rng.choice([True, False])
    if kind == "list":
        return [random_value(rng, depth + 1) for _ in range(rng.randint(0, 2))]
    return {rng.choice(NAMES): random_value(rng, depth + 1) for _ in range(rng.randint(0, 2))}


def random_integer_schema(rng):
    schema = {"type": "integer"}
    low = rng.choice([-(2**40), -1000, -3, 0, 5, 2**62, 2.5])
    span = rng.choice([0, 1, 9, 100, 12345, 2**33]) if isinstance(low, int) else 1
    for keyword, value in [("minimum", low), ("maximum", low + span),
                           ("exclusiveMinimum", low - 1), ("exclusiveMaximum", low + span + 1)]:
        if rng.random() < 0.4:
            schema[keyword] = value
    return schema


def random_string_schema(rng):
    choice = rng.randrange(4)
    if choice == 0:
        lo = rng.randint(0, 3)
        schema = {"type": "string", "minLength": lo}
        if rng.random() < 0.7:
            schema["maxLength"] = lo + rng.randint(0, 4)
        return schema
    if choice == 1:
        return {"type": "string", "format": rng.choice(FORMAT_NAMES)}
    if choice == 2:
        return {"type": "string", "pattern": rng.choice(PATTERNS)}
    return {"type": "string"}


def random_object_schema(rng, depth, defs):
    names = rng.sample(NAMES, rng.randint(0, 4))
    schema = {"type": "object", "properties": {n: random_schema(rng, depth + 1, defs) for n in names}}
    required = [n for n in names if rng.random() < 0.5]
    if required:
        schema["required"] = required
    extra = rng.choice(["absent", False, True, {"type": "integer"}, {}])
    if extra != "absent":
        schema["additionalProperties"] = extra
    return schema


def random_array_schema(rng, depth, defs):
    if rng.random() < 0.3:
        schema = {"type": "array",
                  "prefixItems": [random_schema(rng, depth + 1, defs) for _ in range(rng.randint(1, 3))]}
        schema["items"] = rng.choice([False, True, random_schema(rng, depth + 1, defs)])
    else:
        schema = {"type": "array", "items": random_schema(rng, depth + 1, defs)}
    if rng.random() < 0.5:
        schema["minItems"] = rng.randint(0, 2)
        if schema.get("items") is False:  # no more elements than the prefix
            schema["minItems"] = min(schema["minItems"], len(schema["prefixItems"]))
    if rng.random() < 0.5:
        schema["maxItems"] = schema.get("minItems", 0) + rng.randint(0, 3)
    return schema


def random_all_of(rng, depth, defs):
    """allOf parts that can all hold: objects over different names, or bounds."""
    choice = rng.randrange(3)
    if choice == 0:
        names = rng.sample(NAMES, 4)
        parts = []
        for group in (names[:2], names[2:]):
            part = {"properties": {n: random_schema(rng, depth + 1, defs) for n in group}}
            part["required"] = [n for n in group if rng.random() < 0.5]
            parts.append(part)
        return {"type": "object", "allOf": parts}
    if choice == 1:
        return {"allOf": [{"type": "integer"}, {"minimum": -5}, {"maximum": rng.randint(-5, 50)}]}
    return {"allOf": [random_string_schema(rng), {"type": "string"}]}


def disjoint_one_of(rng, depth, defs):
    if rng.random() < 0.5:  # by type
        makers = {"string": random_string_schema, "integer": random_integer_schema,
                  "null": lambda r: {"type": "null"}, "boolean": lambda r: {"type": "boolean"},
                  "array": lambda r: random_array_schema(r, depth + 1, defs)}
        types = rng.sample(sorted(makers), rng.randint(2, 3))
        return {"oneOf": [makers[t](rng) for t in types]}
    branches = []  # by a discriminator
    for kind in rng.sample(["cat", "dog", "fish"], 2):
        branch = random_object_schema(rng, depth + 1, defs)
        branch["properties"] = {"kind": {"const": kind}, **branch["properties"]}
        branch["required"] = ["kind"] + [n for n in branch.get("required", []) if n != "kind"]
        branches.append(branch)
    return {"oneOf": branches}


def random_schema(rng, depth, defs):
    leaves = ["string", "integer", "number", "boolean", "null", "enum", "const", "any", "types"]
    inner = ["object", "object", "array", "anyOf", "oneOf", "allOf", "ref", "recursive"]
    kind = rng.choice(leaves + (inner if depth < 3 else []))
    if kind == "string":
        return random_string_schema(rng)
    if kind == "integer":
        return random_integer_schema(rng)
    if kind in ("number", "boolean", "null"):
        return {"type": kind}
    if kind == "enum":
        return {"enum": [random_value(rng) for _ in range(rng.randint(1, 4))]}
    if kind == "const":
        return {"const": random_value(rng)}
    if kind == "any":
        return rng.choice([{}, True, {"description": "anything"}])
    if kind == "types":
        return {"type": rng.sample(["string", "integer", "null", "boolean", "number"], 2)}
    if kind == "object":
        return random_object_schema(rng, depth, defs)
    if kind == "array":
        return random_array_schema(rng, depth, defs)
    if kind == "anyOf":
        return {"anyOf": [random_schema(rng, depth + 1, defs) for _ in range(rng.randint(2, 3))]}
    if kind == "oneOf":
        return disjoint_one_of(rng, depth, defs)
    if kind == "allOf":
        return random_all_of(rng, depth, defs)
    if kind == "ref":
        name = f"d{rng.randint(0, 3)}"
        if name in defs and defs[name] is None:  # inside its own definition: where it may end
            return {"type": "array", "items": {"$ref": f"#/$defs/{name}"}, "maxItems": 2}
        if name not in defs:
            defs[name] = None  # taken: a reference inside it builds recursion
            defs[name] = random_schema(rng, depth + 1, defs)
        return {"$ref": f"#/$defs/{name}"}
    # recursive: the whole schema again, where it may be left out
    return {"type": "array", "items": {"$ref": "#"}, "maxItems": 2}


def random_schemas(seed, count):
    rng = random.Random(seed)
    schemas = []
    while len(schemas) < count:
        defs = {}
        schema = random_schema(rng, 0, defs)
        if not isinstance(schema, dict):
            schema = {"anyOf": [schema]}
        if defs:
            schema = {**schema, "$defs": defs}
        schemas.append(schema)
    return schemas


# ---------------------------------------------------------------- mutations

MUTATION_SCHEMAS = [
    {"type": "object", "additionalProperties": False, "required": ["name", "age"],
     "properties": {"name": {"type": "string", "maxLength": 8}, "age": {"type": "integer", "minimum": 0, "maximum": 130},
                    "email": {"type": "string", "format": "email"}, "born": {"type": "string", "format": "date"}}},
    {"type": "object", "required": ["items"],
     "properties": {"items": {"type": "array", "minItems": 1, "maxItems": 3,
                              "items": {"type": "object", "required": ["sku", "qty"],
                                        "properties": {"sku": {"type": "string", "pattern": "^[A-Z]{3}-\\d{3}$"},
                                                       "qty": {"type": "integer", "exclusiveMinimum": 0}}}},
                    "note": {"type": ["string", "null"]}}},
    {"$defs": {"node": {"type": "object", "required": ["value"], "additionalProperties": False,
                        "properties": {"value": {"enum": ["a", "b", 3]},
                                       "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}}}},
     "$ref": "#/$defs/node"},
]


def mutations(rng, instance):
    """Variants of `instance` with one thing changed (some may still be valid)."""
    out = []
    if isinstance(instance, dict) and instance:
        key = rng.choice(sorted(instance))
        out.append({k: v for k, v in instance.items() if k != key})
        for wrong in ("text", 12345678901, None, [], 1.5):
            out.append({k: (wrong if k == key else v) for k, v in instance.items()})
        for k, v in instance.items():
            out.extend({**instance, k: m} for m in mutations(rng, v)[:2])
    elif isinstance(instance, list) and instance:
        out.append(instance + instance)
        out.append(instance[1:])
        out.extend([m] + instance[1:] for m in mutations(rng, instance[0])[:2])
    elif isinstance(instance, bool) or instance is None:
        out.append(0)
    elif isinstance(instance, int):
        out.extend([instance - 1000, -instance - 1, str(instance)])
    elif isinstance(instance, str):
        out.extend([instance + "x" * 9, "", 7])
    return out


def check_mutations(servelab, tally, seed):
    rng = random.Random(seed)
    checks = []  # (schema, text, valid)
    for index, schema in enumerate(MUTATION_SCHEMAS):
        valid = check_samples(servelab, tally, f"mutations #{index}", schema, seed)
        for instance in valid[:2]:
            checks.append((schema, json.dumps(instance, ensure_ascii=False), True))
            invalid = [m for m in mutations(rng, instance) if validation_error(schema, m) is not None]
            # (a mutation that is still valid may or may not be in the grammar)
            checks += [(schema, json.dumps(m, ensure_ascii=False), False) for m in invalid[:6]]
    results = in_parallel(lambda schema, text, valid: grammar(servelab, schema, "--check", text), checks)
    for (schema, text, valid), r in zip(checks, results):
        lines = r.stderr.strip().splitlines()
        if valid:
            tally.check(r.returncode == 0, f"--check rejects the valid {text}: {r.stderr.strip()}")
        else:
            tally.check(r.returncode == 1 and len(lines) == 1 and "--check" in lines[0],
                        f"--check accepts the invalid {text} (exit {r.returncode}); "
                        f"schema {json.dumps(schema)}")


# ---------------------------------------------------------------- errors

def check_cli_errors(servelab, tally):
    """Bad input: one line on stderr naming the problem, exit 1 (2 for bad flags)."""
    cases = [
        (["grammar"], "", 1, "give one constraint"),
        (["grammar", "--json-schema", "-"], "{not json", 1, "is not JSON"),
        (["grammar", "--json-schema", "-"],
         '{"properties": {"age": {"type": "integer", "multipleOf": 5}}}', 1, "properties.age.multipleOf"),
        (["grammar", "--json-schema", "-"], '{"type": "object", "required": ["a"], '
         '"additionalProperties": false}', 1, "validates no JSON value"),
        (["grammar", "--json-schema", "/nonexistent/schema.json"], "", 1, "cannot read"),
        (["grammar", "--regex", "a", "--choice", "b"], "", 2, "excludes"),
        (["grammar", "--regex", "(a"], "", 1, "regex"),
        (["grammar", "--choice", "yes", "--choice", "no", "--check", "maybe"], "", 1, "--check"),
    ]
    for args, stdin, code, needle in cases:
        r = subprocess.run([servelab, "-q", *args], input=stdin, capture_output=True, text=True,
                           timeout=60)
        lines = r.stderr.strip().splitlines()
        tally.check(r.returncode == code and len(lines) == 1 and needle in lines[0],
                    f"servelab {' '.join(args)}: want exit {code} and one line with {needle!r}, "
                    f"got exit {r.returncode}, stderr {r.stderr!r}")


# ---------------------------------------------------------------- main

def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--servelab", required=True)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--random", type=int, default=100, help="random schemas to draw")
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    print(f"seed {seed} (--seed {seed} repeats this run)")
    tally = Tally()

    collection = sorted(glob.glob(os.path.join(ROOT, "data", "schemas", "*.json")))
    tally.check(len(collection) >= 30, f"data/schemas holds {len(collection)} schemas, want >= 30")
    named = []
    for path in collection:
        with open(path, encoding="utf-8") as f:
            named.append((os.path.basename(path), json.load(f)))
    for k, schema in enumerate(random_schemas(seed, args.random)):
        jsonschema.validators.validator_for(schema).check_schema(schema)  # the generator's own bug
        named.append((f"random #{k}", schema))
    sampled = in_parallel(lambda k, schema: samples_of(args.servelab, schema, seed + k),
                          [(k, schema) for k, (_, schema) in enumerate(named)])
    for k, ((name, schema), result) in enumerate(zip(named, sampled)):
        check_samples(args.servelab, tally, name, schema, seed + k, result)

    check_mutations(args.servelab, tally, seed)
    check_cli_errors(args.servelab, tally)
    print(f"{tally.passed} passed, {tally.failed} failed")
    return 1 if tally.failed else 0


if __name__ == "__main__":
    sys.exit(main())
