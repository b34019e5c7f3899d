#!/usr/bin/env python3
"""mutate.py — mutation testing of the labs: do the tests catch what a student gets wrong?

Part of the lab framework (all labs; tests/labs/README.md, docs/labs.md). For
each lab, this applies simple mutations to the reference solution's code, one
at a time, inside the lab's solution regions (`// BEGIN SOLUTION labNN` ...
`// END SOLUTION`: the code a student writes), builds the lab's tests on the
mutant and runs the manifest's graded tests. A mutant the tests fail on (or
that crashes, or hangs past the time limit) is killed; one they pass on
survived: a plausible mistake a student could hand in for full marks.

Mutations (each on one line or statement of a region):
  relational   <  <=  >  >=  swapped for their neighbour (< for <=, > for >=, ...)
  bound        a comparison's right side off by one (i < n - 1, i > n + 1), and an
               integer literal one larger (0 -> 1, 16 -> 17)
  delete       a statement deleted (assignments, calls, ++/--, break, continue)
  negate       the condition of an if or while negated
  front/back   front <-> back, push_front <-> push_back, pop_front <-> pop_back
  swap         the two arguments of a two-argument call swapped

Mutants that do not compile are "stillborn" and not counted. A survivor that
cannot be told apart from the reference by any test (an equivalent mutant) is
listed in tests/labs/README.md, section "Equivalent mutants", as a line
`- labNN `<id>` ...: <why it is equivalent>`; the score leaves it out.
Score: killed / (compiled mutants - argued equivalents).

Each mutant is compiled with the build's own command for that file
(compile_commands.json) and linked in front of the reference engine library,
like the planted bugs (labs/labs.cmake); the tests run with one OpenMP thread
and a fixed SERVELAB_TEST_SEED, so that a run can be repeated.

Usage:
  tools/labkit/mutate.py                    every lab (takes a while: docs/labs.md)
  tools/labkit/mutate.py --lab 5 --lab 6    some labs
  tools/labkit/mutate.py --list --lab 5     the mutants, without running them
  tools/labkit/mutate.py --smoke 2          2 mutants per lab, which must be killed
                                            (what `make test` runs)
  tools/labkit/mutate.py --lab 5 --visibility hidden  what the lab's hidden tests alone kill
                                            (visible: what a student's copy alone kills)
Options: --build-dir DIR (default build/release), --jobs N (default: CPUs),
--seed N, --out DIR (JSON reports, default BUILD/mutation), --no-build (use the
build as it is; otherwise each lab's reference tests are built first). Exit status: 0
when every lab reaches --min-score (default 0: report only; --smoke: every
chosen mutant killed), 1 otherwise, 2 on a usage or build problem.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import hashlib
import json
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.dont_write_bytecode = True
sys.path.insert(0, str(REPO_ROOT / "tools" / "labkit"))
import grading.gtest  # noqa: E402  (manifests and gtest filters)
import grading.manifest  # noqa: E402
import grading.results  # noqa: E402
import make_skeletons  # noqa: E402  (solution regions, code masking)

README = REPO_ROOT / "tests" / "labs" / "README.md"
EQUIVALENT_LINE = re.compile(r"^- (lab\d\d) `([0-9a-f]{8})`")
DEFAULT_SEED = 20261202

# ---------------------------------------------------------------- mutants


@dataclasses.dataclass
class Mutant:
    lab: str          # "lab05"
    path: str         # repository path of the mutated file
    line: int         # 1-based line of the change
    operator: str     # relational, bound, delete, negate, front/back, swap
    original: str     # the original text of the changed lines (stripped)
    mutated: str      # their mutated text (stripped)
    text: str         # the whole mutated file
    id: str = ""

    def describe(self):
        def short(text):
            return text if len(text) <= 150 else text[:147] + "..."
        return (f"{self.path}:{self.line} [{self.operator}] `{short(self.original)}` -> "
                f"`{short(self.mutated)}`")


RELATIONAL = re.compile(r"(?<=\s)(<=|>=|<|>)(?=\s)")
RELATIONAL_SWAP = {"<": "<=", "<=": "<", ">": ">=", ">=": ">"}
INTEGER = re.compile(r"(?<![\w.])(\d+)(?![\w.'])")
FRONT_BACK = re.compile(r"\b(push_front|push_back|pop_front|pop_back|front|back)\b(?=\s*\()")
FRONT_BACK_SWAP = {"push_front": "push_back", "push_back": "push_front", "pop_front": "pop_back",
                   "pop_back": "pop_front", "front": "back", "back": "front"}
CALL = re.compile(r"\b([A-Za-z_][\w:]*)\s*\(")
# Calls whose two arguments commute exactly (IEEE addition and multiplication
# do), so swapping them cannot change anything.
COMMUTATIVE = {"std::min", "std::max", "min", "max", "std::swap", "swap", "std::fmax", "std::fmin",
               "fmaxf", "fminf", "std::hypot"}
COMMUTATIVE_INTRINSIC = re.compile(r"^_mm\d*_(add|mul|and|or|xor|max|min)_(ps|pd|epi\d+|epu\d+|si\d+)$")
NOT_CALLS = make_skeletons.NOT_A_FUNCTION | {"defined", "static_cast", "reinterpret_cast",
                                            "const_cast", "dynamic_cast"}
CONDITION = re.compile(r"\b(if|while)\s*\(")
DECLARATION = re.compile(
    r"^\s*(?:const\s+|constexpr\s+|static\s+|thread_local\s+)*"
    r"(?:auto|bool|char|short|int|long|float|double|unsigned|signed|size_t|u?int\d+_t|"
    r"std::[\w:<>, ]+|[A-Z]\w*(?:<[^;=]*>)?|__m\w+)[\s\*&]+[A-Za-z_]\w*(?:\[[^\]]*\])*\s*(?:=|\{|;|\(|,)")


def matching_paren(masked, open_index):
    """Index of the ')' that closes the '(' at open_index, or None."""
    depth = 0
    for i in range(open_index, len(masked)):
        if masked[i] == "(":
            depth += 1
        elif masked[i] == ")":
            depth -= 1
            if depth == 0:
                return i
    return None


def operand_end(masked, start):
    """End of the expression that starts at `start`: the first top-level ), ], }, ;, ',',
    &&, ||, ? or : (a comparison's right-hand side)."""
    depth = 0
    i = start
    while i < len(masked):
        c = masked[i]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            if depth == 0:
                return i
            depth -= 1
        elif depth == 0 and (c in ";,?:" or masked.startswith(("&&", "||"), i)):
            return i
        i += 1
    return len(masked)


def split_arguments(masked, open_index, close_index):
    """[(start, end)] of the top-level arguments between the parentheses."""
    parts, depth, start = [], 0, open_index + 1
    for i in range(open_index + 1, close_index):
        c = masked[i]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append((start, i))
            start = i + 1
    parts.append((start, close_index))
    return parts


def line_edits(masked, original):
    """(operator, start, end, replacement) edits within one statement's text."""
    edits = []
    for match in RELATIONAL.finditer(masked):
        op = match.group(1)
        edits.append(("relational", match.start(), match.end(), RELATIONAL_SWAP[op]))
        rhs_start = match.end()
        while rhs_start < len(masked) and masked[rhs_start] == " ":
            rhs_start += 1
        rhs_end = operand_end(masked, rhs_start)
        rhs = original[rhs_start:rhs_end].rstrip()
        if rhs:
            delta = "- 1" if op in ("<", "<=") else "+ 1"
            edits.append(("bound", rhs_start, rhs_start + len(rhs), f"({rhs}) {delta}"))
    for match in INTEGER.finditer(masked):
        # Not inside a #pragma or an array of constants, not a template argument.
        before = masked[:match.start()].rstrip()
        if before.endswith(("<", "[", "0x")):
            continue
        edits.append(("bound", match.start(), match.end(), str(int(match.group(1)) + 1)))
    for match in FRONT_BACK.finditer(masked):
        if match.start() > 0 and masked[match.start() - 1] in ".>":
            edits.append(("front/back", match.start(), match.end(),
                          FRONT_BACK_SWAP[match.group(1)]))
    for match in CONDITION.finditer(masked):
        open_index = masked.index("(", match.start())
        close = matching_paren(masked, open_index)
        if close is not None:
            condition = original[open_index + 1:close]
            edits.append(("negate", open_index + 1, close, f"!({condition})"))
    for match in CALL.finditer(masked):
        name = match.group(1)
        if (name in NOT_CALLS or name in COMMUTATIVE or name.split("::")[-1] in COMMUTATIVE
                or COMMUTATIVE_INTRINSIC.match(name)):
            continue
        open_index = match.end() - 1
        close = matching_paren(masked, open_index)
        if close is None:
            continue
        args = split_arguments(masked, open_index, close)
        if len(args) != 2:
            continue
        (a0, a1), (b0, b1) = args
        first, second = original[a0:a1].strip(), original[b0:b1].strip()
        if not first or not second or first == second:
            continue
        edits.append(("swap", a0, b1, f"{second}, {first}"))
    return edits


# A line ending in one of these continues its statement on the next line.
CONTINUES = ("=", "+", "-", "*", "/", "%", "&&", "||", ",", "?", ":", "<<", ">>", "(", "return")


def statements(lines, begin, end):
    """(first, last) 0-based line indices of the code statements in lines[begin:end]:
    a line, or several when a statement continues (parentheses still open, or the
    line ends in an operator)."""
    spans, i = [], begin
    while i < end:
        masked = make_skeletons.mask_code(lines[i])
        if not masked.strip():
            i += 1
            continue
        first, depth = i, 0
        while True:
            masked = make_skeletons.mask_code(lines[i])
            depth += masked.count("(") + masked.count("[") - masked.count(")") - masked.count("]")
            tail = masked.rstrip()
            # A line that opens a block ends the statement: the block's own
            # statements (a lambda's body too) are statements of their own.
            continues = not tail.endswith("{") and (
                depth > 0 or (tail.endswith(CONTINUES) and not tail.endswith(("::", "->"))))
            if not continues or i + 1 >= end:
                break
            i += 1
        spans.append((first, i))
        i += 1
    return spans


def is_deletable(statement_masked):
    text = statement_masked.strip()
    if not text.endswith(";") or text.startswith(("return ", "return(", "throw ", "#", "}", "case ")):
        return text in ("break;", "continue;", "return;")
    if text.startswith(("for ", "for(", "if ", "if(", "while ", "else", "do ", "using ", "typedef ")):
        return False
    if DECLARATION.match(text):
        return False
    return True


def file_mutants(lab, path, text):
    """Every mutant of `path`'s regions of `lab` (one edit each)."""
    lines = text.split("\n")
    regions, errors = make_skeletons.parse_regions(path, make_skeletons.split_lines(text))
    if errors:
        raise SystemExit(f"mutate: {errors[0]}")
    mutants = []
    for region in regions:
        if f"lab{region.lab}" != lab:
            continue
        body_begin = region.begin + len(region.hints)  # 0-based index after BEGIN and HINTs
        for first, last in statements(lines, body_begin, region.end - 1):
            statement = "\n".join(lines[first:last + 1])
            masked = make_skeletons.mask_code(statement)
            if masked.lstrip().startswith("#"):
                continue  # preprocessor lines (#pragma omp ...)
            for operator, start, stop, replacement in line_edits(masked, statement):
                mutated_statement = statement[:start] + replacement + statement[stop:]
                mutants.append(make_mutant(lab, path, lines, first, last, operator, statement,
                                           mutated_statement))
            if is_deletable(masked):
                indent = re.match(r"\s*", lines[first]).group(0)
                mutants.append(make_mutant(lab, path, lines, first, last, "delete", statement,
                                           f"{indent}// (deleted by mutate.py)"))
    return mutants


def make_mutant(lab, path, lines, first, last, operator, statement, mutated_statement):
    new_lines = lines[:first] + mutated_statement.split("\n") + lines[last + 1:]
    changed = [i for i in range(first, last + 1)
               if i - first < len(mutated_statement.split("\n"))
               and lines[i] != mutated_statement.split("\n")[i - first]]
    line = (changed[0] if changed else first) + 1
    squash = lambda s: " ".join(s.split())  # noqa: E731
    return Mutant(lab, path, line, operator, squash(statement), squash(mutated_statement),
                  "\n".join(new_lines))


def lab_files(lab):
    """Repository paths of the files holding `lab`'s regions (CPU track: not .cu)."""
    files = []
    for directory in make_skeletons.SOURCE_DIRS:
        for path in sorted((REPO_ROOT / directory).rglob("*")):
            if path.suffix not in (".cpp", ".h") or not path.is_file():
                continue
            text = path.read_text(encoding="utf-8")
            if f"BEGIN SOLUTION {lab}" in text:
                files.append(path.relative_to(REPO_ROOT).as_posix())
    return files


def assign_ids(mutants):
    """Gives each mutant its id: a hash of its file, operator and the text before and
    after (not its line number, so that ids survive edits elsewhere in the file), and
    which occurrence of that same change in the file it is. Returns the mutants."""
    seen = {}
    for mutant in mutants:
        key = f"{mutant.path}|{mutant.operator}|{mutant.original}|{mutant.mutated}"
        occurrence = seen.get(key, 0)
        seen[key] = occurrence + 1
        mutant.id = hashlib.sha1(f"{key}|{occurrence}".encode()).hexdigest()[:8]
    return mutants


def lab_mutants(lab):
    """Every mutant of a lab, without duplicates (two edits giving the same file)."""
    mutants, seen_texts = [], set()
    for path in lab_files(lab):
        text = (REPO_ROOT / path).read_text(encoding="utf-8")
        for mutant in file_mutants(lab, path, text):
            if mutant.text == text or mutant.text in seen_texts:
                continue
            seen_texts.add(mutant.text)
            mutants.append(mutant)
    return assign_ids(mutants)


def equivalent_ids():
    """{id: reason} of the mutants tests/labs/README.md argues are equivalent."""
    ids = {}
    if README.is_file():
        for line in README.read_text(encoding="utf-8").splitlines():
            match = EQUIVALENT_LINE.match(line)
            if match:
                ids[match.group(2)] = line
    return ids


# ---------------------------------------------------------------- building and running


class BuildError(Exception):
    pass


@dataclasses.dataclass
class LabBuild:
    lab: str
    build_dir: pathlib.Path
    compile_commands: dict   # repository path -> compile command (list)
    link_command: list       # the lab's reference test binary's link command
    test_filter: str         # the graded tests, as an explicit gtest filter
    timeout_s: float
    baseline_s: float        # how long the unmutated tests took


def load_manifest(lab):
    return grading.manifest.load_lab(int(lab[3:]))


def link_command(build_dir, target):
    """How the build links `target`, as a list: from Ninja (the presets'
    generator), or from the link.txt a Makefile build writes."""
    link_txt = build_dir / "CMakeFiles" / f"{target}.dir" / "link.txt"
    if link_txt.is_file():
        return shlex.split(link_txt.read_text(encoding="utf-8"))
    run = subprocess.run(["ninja", "-C", str(build_dir), "-t", "commands", target],
                         capture_output=True, text=True)
    lines = run.stdout.strip().splitlines()
    if run.returncode != 0 or not lines:
        raise BuildError(f"cannot read how {target} is linked: neither {link_txt} nor "
                         f"`ninja -t commands {target}` in {build_dir}: "
                         f"{grading.results.tail(run.stderr, 5)}")
    # Ninja wraps each link as ": && <command> && :" (with pre- and post-link steps).
    words = shlex.split(lines[-1])
    while words and words[0] in (":", "&&"):
        words.pop(0)
    while words and words[-1] in (":", "&&"):
        words.pop()
    return words


def graded_groups(manifest, visibility):
    """The manifest's groups that judge mutants: all, or only the visible (what a
    student's copy has) or only the hidden ones (do the hidden tests earn their place?)."""
    if visibility == "all":
        return manifest.groups
    chosen = [g for g in manifest.groups if g.hidden == (visibility == "hidden")]
    if not chosen:
        raise BuildError(f"the manifest has no {visibility} group")
    return chosen


def prepare(lab, build_dir, jobs, build=True, visibility="all"):
    """Builds the lab's reference tests (unless build is False: they must exist);
    returns what mutants need to be built and run."""
    target = f"{lab}_tests_reference"
    if build:
        run = subprocess.run(["cmake", "--build", str(build_dir), "--target", target,
                              "-j", str(jobs)], capture_output=True, text=True)
        if run.returncode != 0:
            raise BuildError(f"cmake --build {build_dir} --target {target} failed:\n"
                             f"{grading.results.tail(run.stdout + run.stderr, 30)}")
    elif not (build_dir / target).is_file():
        raise BuildError(f"{build_dir / target} is missing (build it, or drop --no-build)")
    entries = json.loads((build_dir / "compile_commands.json").read_text(encoding="utf-8"))
    commands = {}
    for entry in entries:
        path = pathlib.Path(entry["file"])
        if "servelab_reference_" in entry["command"] and path.is_relative_to(REPO_ROOT):
            commands[path.relative_to(REPO_ROOT).as_posix()] = shlex.split(entry["command"])
    link = link_command(build_dir, target)
    binary = build_dir / target
    names, failed = grading.gtest.list_tests(binary, 120)
    if failed is not None:
        raise BuildError(f"{binary}: could not list its tests")
    manifest = load_manifest(lab)
    groups = graded_groups(manifest, visibility)
    graded = [n for n in names if any(grading.gtest.matches_filter(n, g.filter) for g in groups)]
    test_filter = ":".join(graded)
    started = time.monotonic()
    baseline = run_tests(binary, test_filter, 600, DEFAULT_SEED)
    seconds = time.monotonic() - started
    if baseline != "survived":
        raise BuildError(f"{binary} fails its own graded tests ({baseline}); fix that first")
    return LabBuild(lab, build_dir, commands, link, test_filter, max(30.0, 10 * seconds), seconds)


def run_tests(binary, test_filter, timeout_s, seed):
    env = dict(os.environ, OMP_NUM_THREADS="1", SERVELAB_TEST_SEED=str(seed))
    try:
        run = subprocess.run([str(binary), f"--gtest_filter={test_filter}", "--gtest_fail_fast",
                              "--gtest_brief=1"], cwd=REPO_ROOT, env=env, capture_output=True,
                             timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return "killed (timeout)"
    if run.returncode == 0:
        return "survived"
    return "killed (crash)" if run.returncode < 0 else "killed"


def without_exercise_marker(command):
    """The reference object's compile command less the exercise-file marker
    (-include .../exercise_file_marker.h, -DSERVELAB_EXERCISE_FILE=...): a mutant
    is not the reference version, and must not say it is, or the engine would
    fuse kernels around it (reference/common/exercise_files.h)."""
    kept, index = [], 0
    while index < len(command):
        argument = command[index]
        if (argument == "-include" and index + 1 < len(command)
                and command[index + 1].endswith("exercise_file_marker.h")):
            index += 2
            continue
        if not argument.startswith("-DSERVELAB_EXERCISE_FILE="):
            kept.append(argument)
        index += 1
    return kept


def compile_mutant(lab_build, mutant, scratch):
    source = scratch / mutant.path
    source.parent.mkdir(parents=True, exist_ok=True)
    source.write_text(mutant.text, encoding="utf-8")
    command = without_exercise_marker(lab_build.compile_commands[mutant.path])
    obj = scratch / "mutant.o"
    out_at = command.index("-o")
    command[out_at + 1] = str(obj)
    source_at = command.index(str(REPO_ROOT / mutant.path))
    command[source_at] = str(source)
    run = subprocess.run(command, cwd=lab_build.build_dir, capture_output=True, text=True)
    if run.returncode != 0:
        return None
    link = list(lab_build.link_command)
    link[link.index("-o") + 1] = str(scratch / "tests")
    link.insert(1, str(obj))
    run = subprocess.run(link, cwd=lab_build.build_dir, capture_output=True, text=True)
    return scratch / "tests" if run.returncode == 0 else None


def try_mutant(lab_build, mutant, seed):
    with tempfile.TemporaryDirectory(prefix=f"mutant-{mutant.id}-") as scratch:
        binary = compile_mutant(lab_build, mutant, pathlib.Path(scratch))
        if binary is None:
            return "stillborn"
        return run_tests(binary, lab_build.test_filter, lab_build.timeout_s, seed)


# ---------------------------------------------------------------- reports


def smoke_choice(mutants, count):
    """`count` mutants spread evenly over the list (deterministic)."""
    if count >= len(mutants):
        return list(mutants)
    step = len(mutants) / count
    return [mutants[int(i * step + step / 2)] for i in range(count)]


def summarize(lab, outcomes, equivalents):
    killed = [m for m, o in outcomes if o.startswith("killed")]
    survived = [m for m, o in outcomes if o == "survived"]
    stillborn = [m for m, o in outcomes if o == "stillborn"]
    argued = [m for m in survived if m.id in equivalents]
    unexplained = [m for m in survived if m.id not in equivalents]
    counted = len(killed) + len(unexplained)
    score = 100.0 * len(killed) / counted if counted else 100.0
    return {"lab": lab, "mutants": len(outcomes), "stillborn": len(stillborn),
            "killed": len(killed), "survived": len(survived), "equivalent": len(argued),
            "score": round(score, 1),
            "survivors": [{"id": m.id, "where": m.describe(),
                           "equivalent": m.id in equivalents} for m in survived]}


def print_table(summaries):
    print(f"{'lab':<6} {'mutants':>8} {'stillborn':>10} {'killed':>7} {'survived':>9} "
          f"{'equivalent':>11} {'score':>7}")
    for s in summaries:
        print(f"{s['lab']:<6} {s['mutants']:>8} {s['stillborn']:>10} {s['killed']:>7} "
              f"{s['survived']:>9} {s['equivalent']:>11} {s['score']:>6.1f}%")
    for s in summaries:
        for survivor in s["survivors"]:
            mark = "equivalent (tests/labs/README.md)" if survivor["equivalent"] else "SURVIVED"
            print(f"{s['lab']} `{survivor['id']}` {survivor['where']}: {mark}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lab", type=int, action="append", help="lab number (repeatable)")
    parser.add_argument("--build-dir", type=pathlib.Path, default=REPO_ROOT / "build" / "release")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help="SERVELAB_TEST_SEED")
    parser.add_argument("--smoke", type=int, metavar="K", help="K mutants per lab; all must die")
    parser.add_argument("--list", action="store_true", help="print the mutants and stop")
    parser.add_argument("--no-build", action="store_true",
                        help="use the build folder as it is (what make test does)")
    parser.add_argument("--min-score", type=float, default=0.0)
    parser.add_argument("--visibility", choices=("all", "visible", "hidden"), default="all",
                        help="judge mutants by these groups only (default all; hidden: what the "
                             "hidden tests alone kill)")
    parser.add_argument("--out", type=pathlib.Path)
    args = parser.parse_args(argv)
    build_dir = args.build_dir.resolve()
    labs = sorted({f"lab{n:02d}" for n in args.lab} if args.lab else
                  {p.name[:5] for p in (REPO_ROOT / "labs").glob("lab[0-9][0-9]_*")
                   if (p / "manifest.json").is_file()})
    equivalents = equivalent_ids()
    summaries, failed = [], False
    out_dir = args.out or build_dir / "mutation"
    for lab in labs:
        mutants = lab_mutants(lab)
        if args.smoke:
            mutants = smoke_choice([m for m in mutants if m.id not in equivalents], args.smoke)
        if args.list:
            for mutant in mutants:
                print(f"{lab} `{mutant.id}` {mutant.describe()}")
            continue
        try:
            lab_build = prepare(lab, build_dir, args.jobs, build=not args.no_build,
                                visibility=args.visibility)
        except BuildError as error:
            print(f"mutate: {lab}: {error}", file=sys.stderr)
            return 2
        if args.smoke:
            # A smoke run asks only that its mutants die, and a mutant that
            # loops forever dies as surely at 3x the tests' time as at 10x
            # (the full run's margin against a slow machine).
            lab_build = dataclasses.replace(lab_build,
                                            timeout_s=max(10.0, 3 * lab_build.baseline_s))
        print(f"mutate: {lab}: {len(mutants)} mutants, {args.jobs} at a time "
              f"(tests time out after {lab_build.timeout_s:.0f} s)", file=sys.stderr, flush=True)
        outcomes = []
        started = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
            futures = {pool.submit(try_mutant, lab_build, m, args.seed): m for m in mutants}
            for done, future in enumerate(concurrent.futures.as_completed(futures), start=1):
                mutant = futures[future]
                outcome = future.result()
                outcomes.append((mutant, outcome))
                if outcome == "survived" or done % 25 == 0 or done == len(mutants):
                    print(f"mutate: {lab}: {done}/{len(mutants)} ({time.monotonic() - started:.0f} s)"
                          + (f"; survived: {mutant.describe()}" if outcome == "survived" else ""),
                          file=sys.stderr, flush=True)
        outcomes.sort(key=lambda pair: (pair[0].path, pair[0].line, pair[0].id))
        summary = summarize(lab, outcomes, equivalents)
        summary["seconds"] = round(time.monotonic() - started)
        summaries.append(summary)
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / f"{lab}.json").write_text(json.dumps(
            dict(summary, outcomes=[{"id": m.id, "where": m.describe(), "outcome": o}
                                    for m, o in outcomes]), indent=2) + "\n", encoding="utf-8")
        unexplained = [s for s in summary["survivors"] if not s["equivalent"]]
        if args.smoke and unexplained:
            failed = True
        if not args.smoke and summary["score"] < args.min_score:
            failed = True
    if summaries:
        print_table(summaries)
        print(f"mutate: reports in {out_dir}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
