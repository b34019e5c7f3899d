#!/usr/bin/env python3
"""make_regex_goldens.py — Python's re.fullmatch verdicts on many strings, for regex_grammar_test.

Lab 12 support (chapter 11.6, constrained decoding). servelab turns a regex
into grammar rules (reference/constrained/regex_grammar.h) and promises the
strings Python's re.fullmatch(pattern, s, re.ASCII) accepts, no more and no
fewer. This script asks the real thing. For each pattern of a list that
covers every construct the subset claims (literals and escapes, . and
classes, shorthands, groups of every kind, alternation, every quantifier,
lazy ones, repeated items that can match "", anchors, and some realistic
patterns), it draws strings:
  - matching ones, from a small random generator over the pattern's parse
    tree (re._parser), so that long and nested matches are tried;
  - their mutations (a character deleted, inserted, replaced, doubled...);
  - short random strings over the pattern's own characters plus a few
    others (ASCII, a newline, Greek, an emoji);
and records, for each, whether re.fullmatch accepts it. The verdict always
comes from `re`, never from the generator. It also records patterns Python
itself rejects, which servelab must reject too.

Python 3.11 has no (?<name>...) (servelab takes it, as ECMAScript and newer
Pythons do): such a pattern is checked as (?P<name>...).

Deterministic (seeded). Writes data/golden/constrained/regex_cases.json.
Usage:  .venv/bin/python tools/goldens/make_regex_goldens.py  (then commit the JSON)
"""

import json
import pathlib
import random
import re
import re._constants as C
import re._parser as sre_parse
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]
OUTPUT = REPO / "data" / "golden" / "constrained" / "regex_cases.json"
SEED = 47
FLAGS = re.ASCII

# Every construct of the subset, then some patterns from real schemas.
PATTERNS = [
    # literals and escapes
    "abc", "", "a b", "héllo", "日本語", "😀+", r"\.\*\+\?", r"\n\t", r"\x41\u00e9",
    r"\U0001F600", r"a\0b", r"a\-b\/c", r"\\", r"\{\}\[\]\(\)", r"\a\f\v", r"\$\^\|",
    # any character
    ".", "a.c", ".*", ".+x",
    # classes
    "[abc]", "[^abc]", "[a-z]+", "[^a-z]*", "[]a]", "[^]a]", "[a-]", "[-a]", r"[a\-z]",
    r"[\d\s]+", r"[^\W]", r"[\D]x", "[α-ω]+", r"[^\n]*", r"[\]]", "[a-c-e]", r"[\b]",
    r"[\x00-\x7f]+", "[--a]", "[$^.*]", r"[\u00e0-\u00ff]{2}",
    # shorthands
    r"\d+", r"\D", r"\w+", r"\W", r"\s*", r"\S+",
    # groups
    "(ab)+", "(?:ab|cd)*", "(?P<x>a|b)c", r"(?<n>\d)-\d", "((a|b)c)?d", "()", "(|a)b",
    "a(|)b",
    # alternation
    "a|b|c", "a|", "|", "cat|dog|", "ab|a",
    # quantifiers, lazy ones, and the braces Python reads as literals
    "a*", "a+", "a?", "a{3}", "a{2,}", "a{,2}", "a{1,3}", "a{0}", "a{0,0}b", "(ab){2,3}",
    "a*?", "a+?", "a??", "a{2,3}?", "a{,}", "x{", "x{a}", "x{1", "{}", "a{}", "}", "]",
    # repeated items that can match ""
    "(a*)*", "(a?)+", "(a|)*b", "(a*b*)*c", "(a?b?){2,}", "(()|a)*", "(a{0,2}){3,}",
    # anchors at the ends
    "^abc$", "^a|b$", "^$",
    # realistic
    r"[\w.+-]+@[\w-]+\.[a-z]{2,4}", r"\d{4}-\d{2}-\d{2}", r"\(?\d{3}\)?[ -]?\d{3}-\d{4}",
    "#[0-9a-fA-F]{6}", r"((25[0-5]|2[0-4]\d|1?\d?\d)\.){3}(25[0-5]|2[0-4]\d|1?\d?\d)",
    r"[A-Za-z_]\w*", r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?", r'"([^"\\]|\\.)*"',
    "yes|no|maybe", r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
]

# Patterns Python rejects: servelab must throw for each.
INVALID = [
    "a**", "(", ")", "[a", "a{3,2}", "\\", "*a", "a|*", "[z-a]", "(?P<1>a)",
    "(?P<a>x)(?P<a>y)", r"\q", r"[\d-z]", "a{2}{3}", r"\x4", "a??+", "(?", "[]", "[^]",
    r"\u12", "+", "a|?", "(*)", r"\U00110000",
]

EXTRA_CHARACTERS = "abz09_ -.\n\tA@\\éα😀"


def python_pattern(pattern):
    """The pattern as Python 3.11 reads it: (?<name> spelt (?P<name>."""
    return re.sub(r"\(\?<(?=[A-Za-z_])", "(?P<", pattern)


def in_class(items, ch):
    """Whether `ch` is in an IN node's item list (re.ASCII categories)."""
    code = ord(ch)
    negate = False
    found = False
    for op, arg in items:
        if op is C.NEGATE:
            negate = True
        elif op is C.LITERAL:
            found |= code == arg
        elif op is C.RANGE:
            found |= arg[0] <= code <= arg[1]
        elif op is C.CATEGORY:
            found |= in_category(arg, ch)
        else:
            raise ValueError(f"class item {op} not handled")
    return found != negate


def in_category(category, ch):
    digit = "0" <= ch <= "9"
    word = ch.isascii() and (ch.isalnum() or ch == "_")
    space = ch in " \t\n\r\f\v"
    return {
        C.CATEGORY_DIGIT: digit, C.CATEGORY_NOT_DIGIT: not digit,
        C.CATEGORY_WORD: word, C.CATEGORY_NOT_WORD: not word,
        C.CATEGORY_SPACE: space, C.CATEGORY_NOT_SPACE: not space,
    }[category]


def class_candidates(items, alphabet, rng):
    """Characters worth trying for a class: the alphabet, range ends and insides."""
    pool = list(alphabet)
    for op, arg in items:
        if op is C.LITERAL:
            pool.append(chr(arg))
        elif op is C.RANGE:
            pool += [chr(arg[0]), chr(arg[1]), chr(rng.randint(arg[0], arg[1]))]
    pool += [chr(rng.randint(0x20, 0x7E)) for _ in range(8)]
    pool += [chr(rng.choice([rng.randint(0xA0, 0x2FF), rng.randint(0x4E00, 0x4FFF)]))]
    return [c for c in pool if not 0xD800 <= ord(c) <= 0xDFFF]


def generate(tree, alphabet, rng, out):
    """Appends a random string that the parse tree `tree` probably matches."""
    for op, arg in tree:
        if op is C.LITERAL:
            out.append(chr(arg))
        elif op is C.NOT_LITERAL:
            out.append(rng.choice([c for c in alphabet if ord(c) != arg] or ["\x00"]))
        elif op is C.ANY:
            out.append(rng.choice([c for c in alphabet if c != "\n"]))
        elif op is C.IN:
            fitting = [c for c in class_candidates(arg, alphabet, rng) if in_class(arg, c)]
            if fitting:
                out.append(rng.choice(fitting))
        elif op is C.BRANCH:
            generate(rng.choice(arg[1]), alphabet, rng, out)
        elif op is C.SUBPATTERN:
            generate(arg[3], alphabet, rng, out)
        elif op in (C.MAX_REPEAT, C.MIN_REPEAT):
            low, high, sub = arg
            high = min(high, low + 3)
            for _ in range(rng.randint(low, high)):
                generate(sub, alphabet, rng, out)
        elif op is C.AT:
            pass
        else:
            raise ValueError(f"construct {op} not handled")


def mutations(text, alphabet, rng):
    """Near misses of a string: one edit each."""
    out = [text + text, text[:-1], text + rng.choice(alphabet)]
    if text:
        i = rng.randrange(len(text))
        out += [text[:i] + text[i + 1:],
                text[:i] + rng.choice(alphabet) + text[i:],
                text[:i] + rng.choice(alphabet) + text[i + 1:],
                text[:i] + text[i] + text[i:]]
    if len(text) > 1:
        i = rng.randrange(len(text) - 1)
        out.append(text[:i] + text[i + 1] + text[i] + text[i + 2:])
    return out


def strings_for(pattern, rng):
    alphabet = sorted(set(pattern + EXTRA_CHARACTERS) - {chr(c) for c in range(0xD800, 0xE000)})
    tree = sre_parse.parse(python_pattern(pattern), FLAGS)
    positives = []
    for _ in range(12):
        out = []
        generate(tree, alphabet, rng, out)
        positives.append("".join(out))
    candidates = [""] + positives
    for text in positives[:6]:
        candidates += mutations(text, alphabet, rng)
    for _ in range(12):
        candidates.append("".join(rng.choice(alphabet) for _ in range(rng.randint(0, 6))))
    return list(dict.fromkeys(candidates))  # distinct, in order


def case_for(pattern, rng):
    compiled = re.compile(python_pattern(pattern), FLAGS)
    accept, reject = [], []
    for text in strings_for(pattern, rng):
        (accept if compiled.fullmatch(text) else reject).append(text)
    return {"pattern": pattern, "accept": accept, "reject": reject}


def invalid_case(pattern):
    try:
        re.compile(python_pattern(pattern), FLAGS)
    except re.error as error:
        return {"pattern": pattern, "python_error": str(error)}
    raise SystemExit(f"Python accepts {pattern!r}, listed as invalid")


def main():
    rng = random.Random(SEED)
    cases = [case_for(p, rng) for p in PATTERNS]
    golden = {
        "generator": "tools/goldens/make_regex_goldens.py",
        "python": sys.version.split()[0],
        "semantics": "re.fullmatch(pattern, string, re.ASCII)",
        "cases": cases,
        "invalid": [invalid_case(p) for p in INVALID],
    }
    OUTPUT.parent.mkdir(parents=True, exist_ok=True)
    OUTPUT.write_text(json.dumps(golden, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    num_strings = sum(len(c["accept"]) + len(c["reject"]) for c in cases)
    num_accepted = sum(len(c["accept"]) for c in cases)
    print(f"{OUTPUT.relative_to(REPO)}: {len(cases)} patterns, {num_strings} strings "
          f"({num_accepted} matching), {len(golden['invalid'])} invalid patterns")


if __name__ == "__main__":
    main()
