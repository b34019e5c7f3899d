#!/usr/bin/env python3
"""make_text_data.py — the King James Bible as two plain-text files: calibration and evaluation.

Part of Lab 10, weight quantization (chapter 11.7 GPTQ and AWQ; 11.8 what
quantization costs). AWQ and GPTQ look at activations of real text to choose
their scales (`servelab quantize`, data/text/kjv_calibration.txt by default),
and `servelab perplexity` scores a quantized model on text (docs/perplexity.md).
The two must be different text, or the evaluation rewards fitting the
calibration set. data/README.md describes the files.

Source: the Debian packages bible-kjv (the `bible` program) and
bible-kjv-text (its data). The KJV translation dates from 1611 and its
copyright has expired (/usr/share/doc/bible-kjv-text/copyright).
`bible -f "Gen1:1-Rev22:21"` prints all 31,102 verses, one per line, each
behind a reference such as "Ge1:1 " or "1Sm3:4 ". This script

  1. runs it and checks every line has that shape (66 books, 31,102 verses);
  2. strips the references: each chapter becomes one paragraph (its verses
     joined by a space), each book starts with its name on a line of its own,
     paragraphs are separated by a blank line;
  3. splits by book, alternating in canonical order: books 1, 3, 5, ...
     (Genesis, Leviticus, Deuteronomy, ...) are calibration, books 2, 4,
     6, ... (Exodus, Numbers, Joshua, ...) evaluation. Alternating keeps both
     halves alike in kind — law, history, poetry, prophets, gospels,
     letters — while no verse is in both;
  4. checks each file's sha256 against the value recorded below, so that
     every machine gets the same text (a different `bible` build that printed
     anything differently fails here, loudly, instead of changing the numbers).

    python3 tools/setup/make_text_data.py      # writes data/text/, skips it when present and right
    python3 tools/setup/make_text_data.py --force  # writes it again
"""
from __future__ import annotations

import argparse
import hashlib
import os
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
OUT_DIR = ROOT / "data" / "text"
CALIBRATION = OUT_DIR / "kjv_calibration.txt"
EVALUATION = OUT_DIR / "kjv_evaluation.txt"

# What the files must hash to (made with bible-kjv 4.38, Debian bookworm).
SHA256 = {
    CALIBRATION.name: "44822f3a8a2e5f2a9299171ad366ec59b26c98e9afc216d3acf9190fe606fa89",
    EVALUATION.name: "d8d731e45e8b74c9fd7978a757e26ecdecaf789dfe5ebb9e58d9f963a38cb492",
}

# The 66 books in the order `bible` prints them; the references' own
# abbreviations ("Ge", "Jdgs", "SSol") are only used to see where a book ends.
BOOK_NAMES = [
    "Genesis", "Exodus", "Leviticus", "Numbers", "Deuteronomy", "Joshua", "Judges", "Ruth",
    "1 Samuel", "2 Samuel", "1 Kings", "2 Kings", "1 Chronicles", "2 Chronicles", "Ezra",
    "Nehemiah", "Esther", "Job", "Psalms", "Proverbs", "Ecclesiastes", "Song of Solomon",
    "Isaiah", "Jeremiah", "Lamentations", "Ezekiel", "Daniel", "Hosea", "Joel", "Amos",
    "Obadiah", "Jonah", "Micah", "Nahum", "Habakkuk", "Zephaniah", "Haggai", "Zechariah",
    "Malachi", "Matthew", "Mark", "Luke", "John", "Acts", "Romans", "1 Corinthians",
    "2 Corinthians", "Galatians", "Ephesians", "Philippians", "Colossians",
    "1 Thessalonians", "2 Thessalonians", "1 Timothy", "2 Timothy", "Titus", "Philemon",
    "Hebrews", "James", "1 Peter", "2 Peter", "1 John", "2 John", "3 John", "Jude",
    "Revelation",
]
NUM_VERSES = 31102

# "1Sm3:4 And ..." → book "1Sm", chapter 3, verse 4, text "And ...".
REFERENCE = re.compile(r"^([1-3]?[A-Za-z]+)(\d+):(\d+) (.+)$")


def sha256_of(path: pathlib.Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def files_ok() -> bool:
    return all(p.exists() and sha256_of(p) == SHA256[p.name] for p in (CALIBRATION, EVALUATION))


def run_bible() -> list[str]:
    # -f prints one verse per line behind its reference. COLUMNS is dropped
    # so that no terminal width can reach the program's line formatting.
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    try:
        out = subprocess.run(["bible", "-f", "Gen1:1-Rev22:21"], env=env, check=True,
                             capture_output=True, text=True).stdout
    except FileNotFoundError:
        raise SystemExit("make_text_data: no `bible` program: install the Debian packages "
                         "bible-kjv and bible-kjv-text (tools/setup/setup.sh does)")
    return out.splitlines()


def parse_books(lines: list[str]) -> list[list[list[str]]]:
    """books[b][c] = the verse texts of chapter c + 1 of book b, checked for order."""
    books: list[list[list[str]]] = []
    last_book = None
    for line_number, line in enumerate(lines, 1):
        match = REFERENCE.match(line)
        if match is None:
            raise SystemExit(f"make_text_data: `bible` line {line_number} has no verse "
                             f"reference: {line[:60]!r}")
        book, chapter, verse, text = match[1], int(match[2]), int(match[3]), match[4].strip()
        if book != last_book:
            books.append([])
            last_book = book
        chapters = books[-1]
        if chapter == len(chapters) + 1 and verse == 1:
            chapters.append([])
        elif chapter != len(chapters) or verse != len(chapters[-1]) + 1:
            raise SystemExit(f"make_text_data: {book}{chapter}:{verse} is out of order")
        chapters[-1].append(text)
    num_verses = sum(len(c) for b in books for c in b)
    if len(books) != len(BOOK_NAMES) or num_verses != NUM_VERSES:
        raise SystemExit(f"make_text_data: `bible` printed {len(books)} books and {num_verses} "
                         f"verses; expected {len(BOOK_NAMES)} and {NUM_VERSES}")
    return books


def book_text(name: str, chapters: list[list[str]]) -> str:
    paragraphs = [name] + [" ".join(verses) for verses in chapters]
    return "\n\n".join(paragraphs) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--force", action="store_true", help="write the files even if present")
    args = parser.parse_args()
    if files_ok() and not args.force:
        print(f"make_text_data: {OUT_DIR.relative_to(ROOT)}/ present (sha256 ok)")
        return 0

    books = parse_books(run_bible())
    texts = [book_text(name, chapters) for name, chapters in zip(BOOK_NAMES, books)]
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    # Books 1, 3, 5, ... (index 0, 2, 4, ...) calibrate; books 2, 4, 6, ... evaluate.
    CALIBRATION.write_text("\n".join(texts[0::2]), encoding="utf-8")
    EVALUATION.write_text("\n".join(texts[1::2]), encoding="utf-8")

    status = 0
    for path in (CALIBRATION, EVALUATION):
        got = sha256_of(path)
        size_kib = path.stat().st_size >> 10
        if got == SHA256[path.name]:
            print(f"make_text_data: wrote {path.relative_to(ROOT)} ({size_kib} KiB, sha256 ok)")
        else:
            print(f"make_text_data: {path.relative_to(ROOT)} has sha256 {got}, expected "
                  f"{SHA256[path.name]}: this machine's `bible` prints different text",
                  file=sys.stderr)
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
