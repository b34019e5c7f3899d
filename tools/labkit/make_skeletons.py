#!/usr/bin/env python3
"""make_skeletons.py — generate each lab's student files from solution regions.

Part of the lab framework (all labs). The reference engine is complete: the
code a lab asks students to write lives in the reference sources themselves,
between marker lines:

    void rmsnorm(const float* x, ...) {
        // BEGIN SOLUTION lab01 (rmsnorm)     <- "(name)" is optional
        // HINT: divide by the root mean square, then scale by weight
        ...solution code...
        // END SOLUTION
    }

For every file under reference/ and kernels/ (*.cpp, *.h, *.cu, *.cuh) that
holds regions of lab NN, this script writes the student's copy to
labs/labNN_<name>/student/<same relative path>, where each region becomes

        // TODO(lab01): divide by the root mean square, then scale by weight
        throw NotImplemented("lab01: rmsnorm");

Everything outside the regions is copied byte for byte; a first line says the
file is generated, and the NotImplemented header is #included if missing.

Device code cannot throw, so a region inside a CUDA kernel (a `__global__`
function in a .cu/.cuh file: the GPU tracks of the labs) becomes instead

        // TODO(lab01): ...
        if (threadIdx.x == 0 && blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0)
            printf("not implemented: lab01: rmsnorm_kernel (this kernel writes nothing)\n");

The kernel then writes nothing, so its test fails on the output it poisoned
beforehand, each kernel's test on its own (a trap would break the CUDA
context for every later test); the grader finds the printed line and shows
it with that test. Such a region must hold the kernel's whole body, and a
region in a `__device__` function is an error. When
the marker names no function, the name is taken from the function the region
sits in. Student files that no longer match any region are removed.

The rules are strict so that mistakes surface at once, as `path:line: message`
and exit status 1: markers may not nest, every BEGIN needs its END, a region
must hold code, a file may hold regions of only one lab, and that lab's folder
labs/labNN_<name>/ must exist.

Usage (from anywhere):
    python3 tools/labkit/make_skeletons.py     write labs/*/student/
    python3 tools/labkit/make_skeletons.py --check  compare only (CI): exit 1 if stale
    python3 tools/labkit/make_skeletons.py --root DIR work on another tree (the tests do)

Standard library only.
"""
from __future__ import annotations

import argparse
import dataclasses
import pathlib
import re
import sys

SOURCE_DIRS = ("reference", "kernels")
SOURCE_SUFFIXES = (".cpp", ".h", ".cu", ".cuh")
CUDA_SUFFIXES = (".cu", ".cuh")  # where a __global__ function is device code
NOT_IMPLEMENTED_HEADER = "kernels/common/not_implemented.h"
OUT_OF_DATE = "labs skeletons are out of date: run tools/labkit/make_skeletons.py"

# ---------------------------------------------------------------- markers

# A line that tries to be a marker; it must then match the strict form exactly.
BEGIN_LIKE = re.compile(r"^\s*//\s*BEGIN\s+SOLUTION\b")
END_LIKE = re.compile(r"^\s*//\s*END\s+SOLUTION\b")
QUALIFIED_NAME = r"~?[A-Za-z_]\w*(?:::~?[A-Za-z_]\w*)*"
BEGIN = re.compile(
    r"^(?P<indent>[ \t]*)// BEGIN SOLUTION lab(?P<lab>\d\d)"
    r"(?: \((?P<name>" + QUALIFIED_NAME + r")\))?[ \t]*$")
END = re.compile(r"^[ \t]*// END SOLUTION[ \t]*$")
HINT = re.compile(r"^[ \t]*// HINT:[ \t]?(?P<text>.*?)[ \t]*$")
INCLUDE = re.compile(r"^\s*#\s*include\b")
INCLUDE_NOT_IMPLEMENTED = re.compile(r'^\s*#\s*include\s*"' + re.escape(NOT_IMPLEMENTED_HEADER) + '"')
CONDITIONAL_OPEN = re.compile(r"^\s*#\s*if")  # #if, #ifdef, #ifndef
CONDITIONAL_CLOSE = re.compile(r"^\s*#\s*endif\b")
LAB_FOLDER = re.compile(r"^lab(?P<lab>\d\d)_.+$")


class MarkerError(Exception):
    """A problem in a source file, reported as `path:line: message`."""

    def __init__(self, path, line, message):
        super().__init__(f"{path}:{line}: {message}")


@dataclasses.dataclass
class Region:
    """One solution region; line numbers are 1-based, both marker lines included."""
    lab: str          # two digits, e.g. "01"
    name: str | None  # from the marker, or None to derive it
    indent: str       # leading whitespace of the BEGIN line
    begin: int        # line of BEGIN SOLUTION
    end: int          # line of END SOLUTION
    hints: list


def split_lines(text):
    """Lines split at "\n" only, each keeping its ending, so "".join(lines) == text."""
    pieces = text.split("\n")
    lines = [piece + "\n" for piece in pieces[:-1]]
    if pieces[-1]:
        lines.append(pieces[-1])  # a last line without a newline
    return lines


def strip_eol(line):
    return line.rstrip("\r\n")


def has_code(lines):
    """True if any line is more than whitespace or a // comment."""
    return any(line.strip() and not line.strip().startswith("//") for line in lines)


def parse_regions(path, lines):
    """Find the solution regions of one file; return (regions, errors)."""
    regions, errors = [], []
    open_region = None  # (match, line number) of a BEGIN still waiting for its END
    for number, raw in enumerate(lines, start=1):
        line = strip_eol(raw)
        if BEGIN_LIKE.match(line):
            match = BEGIN.match(line)
            if not match:
                errors.append(MarkerError(path, number, "malformed marker; write "
                                          "'// BEGIN SOLUTION labNN' or '// BEGIN SOLUTION labNN (function)'"))
            elif open_region:
                errors.append(MarkerError(path, number, "BEGIN SOLUTION inside the region begun at "
                                          f"line {open_region[1]} (regions cannot nest)"))
            else:
                open_region = (match, number)
        elif END_LIKE.match(line):
            if not END.match(line):
                errors.append(MarkerError(path, number, "malformed marker; write '// END SOLUTION'"))
            elif not open_region:
                errors.append(MarkerError(path, number, "END SOLUTION without a BEGIN SOLUTION"))
            else:
                region, error = close_region(path, lines, *open_region, end=number)
                if error:
                    errors.append(error)
                else:
                    regions.append(region)
                open_region = None
    if open_region:
        match, number = open_region
        errors.append(MarkerError(path, number, f"BEGIN SOLUTION lab{match['lab']} has no "
                                  "END SOLUTION before the end of the file"))
    return regions, errors


def close_region(path, lines, match, begin, end):
    """Build the Region for BEGIN at line `begin` and END at line `end`; (region, error)."""
    hints = []
    body_start = begin  # 0-based index of the first line after BEGIN
    while body_start < end - 1 and (hint := HINT.match(strip_eol(lines[body_start]))):
        hints.append(hint["text"])
        body_start += 1
    if not has_code(lines[body_start:end - 1]):
        return None, MarkerError(path, begin, f"empty region: lab{match['lab']} has no code "
                                 f"between BEGIN SOLUTION and END SOLUTION (line {end})")
    return Region(match["lab"], match["name"], match["indent"], begin, end, hints), None


# ---------------------------------------------------------------- function names

def mask_code(text):
    """`text` with comments, string and character literals and preprocessor lines
    turned into spaces (newlines kept), so braces and parentheses in them don't count."""
    out = list(text)
    i, n = 0, len(text)
    at_line_start = True

    def blank(start, stop):
        for k in range(start, min(stop, n)):
            if out[k] != "\n":
                out[k] = " "

    while i < n:
        c = text[i]
        if c == "\n":
            at_line_start = True
            i += 1
        elif c in " \t\r":
            i += 1
        elif at_line_start and c == "#":                      # preprocessor line(s)
            stop = i
            while True:
                eol = text.find("\n", stop)
                eol = n if eol < 0 else eol
                if not text[stop:eol].rstrip("\r").endswith("\\"):
                    break
                stop = eol + 1
            blank(i, eol)
            i = eol
        elif text.startswith("//", i):
            eol = text.find("\n", i)
            eol = n if eol < 0 else eol
            blank(i, eol)
            i = eol
        elif text.startswith("/*", i):
            stop = text.find("*/", i + 2)
            stop = n if stop < 0 else stop + 2
            blank(i, stop)
            i = stop
            at_line_start = False
        elif c == '"' and i > 0 and text[i - 1] == "R":      # raw string R"delim( ... )delim"
            paren = text.find("(", i)
            delim = text[i + 1:paren] if paren >= 0 else ""
            stop = text.find(")" + delim + '"', paren + 1) if paren >= 0 else -1
            stop = n if stop < 0 else stop + len(delim) + 2
            blank(i, stop)
            i, at_line_start = stop, False
        elif c == '"' or (c == "'" and not is_digit_separator(text, i)):
            stop = i + 1
            while stop < n and text[stop] != c and text[stop] != "\n":
                stop += 2 if text[stop] == "\\" else 1
            stop = min(stop + 1, n)
            blank(i, stop)
            i, at_line_start = stop, False
        else:
            i += 1
            at_line_start = False
    return "".join(out)


def is_digit_separator(text, i):
    """True for the ' in 1'000'000 (C++14 digit separators), not a character literal."""
    return 0 < i < len(text) - 1 and text[i - 1].isdigit() and text[i + 1].isalnum()


TOKEN = re.compile(r"::|->|&&|[A-Za-z_]\w*|\d[\w.']*|\S")

# Words that may stand right before "(" without naming a function.
NOT_A_FUNCTION = {
    "if", "for", "while", "switch", "catch", "return", "throw", "sizeof", "alignof",
    "alignas", "decltype", "noexcept", "requires", "static_assert", "typeid", "constexpr",
    "explicit", "new", "delete", "co_await", "co_return", "co_yield",
    "void", "bool", "char", "short", "int", "long", "float", "double", "signed",
    "unsigned", "auto",
    "__attribute__", "__declspec", "__launch_bounds__",
}
IDENTIFIER = re.compile(r"[A-Za-z_]\w*")


def is_identifier(token):
    return bool(IDENTIFIER.fullmatch(token))


def enclosing_function(text, offset):
    """(name, header tokens) of the function whose body contains `offset`, or (None, None).

    Walks backwards from `offset` to each brace that encloses it, innermost
    first, and asks whether the declaration just before that brace is a
    function header. Blocks of `for`/`if`, lambdas, classes and namespaces are
    not, and the walk goes on outwards.
    """
    tokens = TOKEN.findall(mask_code(text)[:offset])
    depth = 0
    for i in range(len(tokens) - 1, -1, -1):
        if tokens[i] == "}":
            depth += 1
        elif tokens[i] == "{":
            if depth:
                depth -= 1
                continue
            header = header_before(tokens, i)
            name = function_name_in_header(header) if header else None
            if name:
                return name, header
    return None, None


def header_before(tokens, brace):
    """The tokens of the declaration that ends at tokens[brace] (a "{").

    Goes back to the previous ';', '{' or '}', skipping brace groups that are
    constructor member initializers (`: a_(x), b_{y} {`). Returns None when the
    brace stands inside parentheses: then it opens a lambda or an initializer
    that is a function argument, never a function body.
    """
    depth = 0  # () and [] depth, counted backwards
    j = brace - 1
    while j >= 0:
        token = tokens[j]
        if token in (")", "]"):
            depth += 1
        elif token in ("(", "["):
            if depth == 0:
                return None
            depth -= 1
        elif depth == 0 and token in (";", "{"):
            break
        elif depth == 0 and token == "}":
            opening = matching_open_brace(tokens, j)
            if opening is None or not is_member_initializer(tokens, opening):
                break
            j = opening
        j -= 1
    return tokens[j + 1:brace]


def matching_open_brace(tokens, close):
    depth = 0
    for k in range(close, -1, -1):
        if tokens[k] == "}":
            depth += 1
        elif tokens[k] == "{":
            depth -= 1
            if depth == 0:
                return k
    return None


def is_member_initializer(tokens, opening):
    """True for the "{" of `b_{y}` or `Base<T>{y}` in a constructor's `: a_(x), b_{y}`."""
    k = opening - 1
    if k >= 0 and tokens[k] == ">":  # skip the template arguments of a base class
        depth = 0
        while k >= 0:
            depth += {">": 1, "<": -1}.get(tokens[k], 0)
            if depth == 0:
                break
            k -= 1
        k -= 1
    return (k >= 1 and is_identifier(tokens[k]) and tokens[k] not in NOT_A_FUNCTION
            and tokens[k - 1] in (",", ":"))


def function_name_in_header(header):
    """The function a header declares: the name before its first top-level "(".

    Parentheses nested in () or in template brackets <...> are skipped, so
    `std::function<Tensor(int)> make(int n)` gives "make", and so are those
    after a keyword (`__launch_bounds__(256) void k(...)`). Returns None when
    the header is no function (`for (...)`, a lambda `[&](int i)`, `struct X`).
    """
    paren = angle = 0
    after_operator = False  # inside `operator<(`, "<" is a name, not a bracket
    for i, token in enumerate(header):
        if token == "operator":
            after_operator = True
        elif token in ("(", "["):
            if token == "(" and paren == 0 and angle == 0 and callable_name(header, i):
                return callable_name(header, i)
            paren += 1
        elif token in (")", "]"):
            paren = max(paren - 1, 0)
        elif paren == 0 and not after_operator and token == "<":
            angle += 1
        elif paren == 0 and not after_operator and token == ">":
            angle = max(angle - 1, 0)
        if token != "operator" and (is_identifier(token) or token == "("):
            after_operator = False
    return None


def callable_name(header, paren):
    """The name before header[paren] (a "("), or None if it is no function name."""
    before = header[paren - 1] if paren > 0 else ""
    if before == "operator":
        return "operator()"
    # operator+, operator==, operator[] ...: symbols back to the keyword
    k = paren - 1
    while k >= 0 and not is_identifier(header[k]) and header[k] not in ("(", ")", ";", ","):
        k -= 1
    if k >= 0 and k < paren - 1 and header[k] == "operator":
        return "operator" + "".join(header[k + 1:paren])
    if before == ">":  # an explicit specialization: name<Args>(...)
        depth, k = 0, paren - 1
        while k >= 0:
            depth += {">": 1, "<": -1}.get(header[k], 0)
            if depth == 0:
                break
            k -= 1
        return callable_name(header, k) if k > 0 else None
    if not is_identifier(before):
        return None
    if paren >= 2 and header[paren - 2] == "operator":  # operator bool()
        return "operator " + before
    if before in NOT_A_FUNCTION:
        return None
    if paren >= 2 and header[paren - 2] == "~":
        return "~" + before
    return before


# ---------------------------------------------------------------- skeletons

def line_offset(lines, number):
    """Character offset of the start of 1-based line `number`."""
    return sum(len(line) for line in lines[:number - 1])


def stub_lines(region, name, kernel=False):
    """What a region turns into: TODO lines for its hints, then the throw (or,
    in a CUDA kernel, which cannot throw, one thread's "not implemented" line)."""
    todo = [f"{region.indent}// TODO(lab{region.lab}): {hint}".rstrip() + "\n" for hint in region.hints]
    if kernel:
        return todo + [
            f"{region.indent}if (threadIdx.x == 0 && blockIdx.x == 0 && blockIdx.y == 0 && "
            "blockIdx.z == 0)\n",
            f'{region.indent}    printf("not implemented: lab{region.lab}: {name} '
            '(this kernel writes nothing)\\n");\n']
    return todo + [f'{region.indent}throw NotImplemented("lab{region.lab}: {name}");\n']


def sorted_position_in_block(lines, last):
    """Where the NotImplemented #include sorts within the block of quoted
    includes that ends at line `last` (clang-format keeps such a block in
    order); after `last` when that block is not quoted includes."""
    quoted = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
    if not quoted.match(strip_eol(lines[last])):
        return last + 1
    first = last
    while first > 0 and quoted.match(strip_eol(lines[first - 1])):
        first -= 1
    # A .cpp file's first include is its own header, which stays first.
    first_include = next(i for i, raw in enumerate(lines) if INCLUDE.match(strip_eol(raw)))
    for i in range(max(first, first_include + 1), last + 1):
        if quoted.match(strip_eol(lines[i])).group(1) > NOT_IMPLEMENTED_HEADER:
            return i
    return last + 1


def include_position(lines):
    """Index of the line before which the NotImplemented #include goes.

    In sorted place within the last block of quoted #includes outside any
    #if block, else after the last #include outside any #if block (or, in a file whose
    includes are all inside an include guard, after the last one); with no
    #include at all, after `#pragma once` or else after the leading comments.
    """
    depth, last_top, last_any = 0, None, None
    for i, raw in enumerate(lines):
        line = strip_eol(raw)
        if CONDITIONAL_OPEN.match(line):
            depth += 1
        elif CONDITIONAL_CLOSE.match(line):
            depth = max(depth - 1, 0)
        elif INCLUDE.match(line):
            last_any = i
            if depth == 0:
                last_top = i
    last = last_top if last_top is not None else last_any
    if last is not None:
        return sorted_position_in_block(lines, last)
    for i, raw in enumerate(lines):
        if re.match(r"^\s*#\s*pragma\s+once\b", raw):
            return i + 1
    i = 0
    while i < len(lines) and (not lines[i].strip() or lines[i].lstrip().startswith("//")):
        i += 1
    return i


def insert_line(lines, index, line):
    """Insert `line` before lines[index], giving the line before it a newline if it lacks one."""
    if index > 0 and not lines[index - 1].endswith("\n"):
        lines[index - 1] += "\n"
    lines.insert(index, line)


def make_skeleton(path, lines, regions, names, kernels):
    """The student's copy of one source file (a string). kernels[i]: region i is in a CUDA kernel."""
    lab = regions[0].lab
    out, next_line = [], 1
    for region, name, kernel in zip(regions, names, kernels):
        out += lines[next_line - 1:region.begin - 1]
        out += stub_lines(region, name, kernel)
        next_line = region.end + 1
    out += lines[next_line - 1:]
    throws = not all(kernels)
    if throws and not any(INCLUDE_NOT_IMPLEMENTED.match(line) for line in out):
        insert_line(out, include_position(out), f'#include "{NOT_IMPLEMENTED_HEADER}"\n')
    banner = (f"// GENERATED by tools/labkit/make_skeletons.py from {path}\n"
              f"// This is your file for lab{lab}: write your code where it says TODO.\n")
    return banner + "".join(out)


def region_names(path, text, lines, regions):
    """The function name for each region: from the marker, or derived, and whether
    the region is in a CUDA kernel; (names, kernels, errors)."""
    names, kernels, errors = [], [], []
    cuda = path.endswith(CUDA_SUFFIXES)
    for region in regions:
        derived, header = enclosing_function(text, line_offset(lines, region.begin))
        name = region.name or derived
        if not name:
            errors.append(MarkerError(path, region.begin, "cannot tell which function this region "
                                      "is in; name it in the marker: "
                                      f"'// BEGIN SOLUTION lab{region.lab} (function_name)'"))
        kernel = cuda and header is not None and "__global__" in header
        if cuda and header is not None and not kernel and "__device__" in header:
            errors.append(MarkerError(path, region.begin, "a region in a __device__ function: "
                                      "device code cannot throw; put the region around the "
                                      "body of the __global__ kernel that calls it"))
        names.append(name)
        kernels.append(kernel)
    return names, kernels, errors


def find_lab_folders(root):
    """{"01": Path("labs/lab01_naive_decoding"), ...} relative to root; (folders, errors)."""
    folders, errors = {}, []
    labs = root / "labs"
    if not labs.is_dir():
        return folders, errors
    for entry in sorted(labs.iterdir()):
        match = LAB_FOLDER.match(entry.name)
        if not match or not entry.is_dir():
            continue
        lab = match["lab"]
        if lab in folders:
            errors.append(f"labs: two folders for lab{lab}: {folders[lab].name} and {entry.name}")
        else:
            folders[lab] = entry.relative_to(root)
    return folders, errors


def source_files(root):
    """Every *.cpp/*.h/*.cu/*.cuh under reference/ and kernels/, as sorted relative paths."""
    found = []
    for top in SOURCE_DIRS:
        if (root / top).is_dir():
            found += [p.relative_to(root) for p in (root / top).rglob("*")
                      if p.suffix in SOURCE_SUFFIXES and p.is_file()]
    return sorted(found, key=lambda p: p.as_posix())


def skeleton_for_file(root, path, lab_folders):
    """(student path, content) for one source file, or None if it has no regions; or raise errors."""
    text = (root / path).read_bytes().decode("utf-8", errors="surrogateescape")
    lines = split_lines(text)
    name = path.as_posix()
    regions, errors = parse_regions(name, lines)
    if not regions:
        return None, errors
    first = regions[0]
    for region in regions:
        if region.lab != first.lab:
            errors.append(MarkerError(name, region.begin, f"region of lab{region.lab} in a file that "
                                      f"has regions of lab{first.lab} (line {first.begin}); a file may "
                                      "hold regions of only one lab"))
            break
    if first.lab not in lab_folders:
        errors.append(MarkerError(name, first.begin, f"lab{first.lab} has no folder "
                                  f"labs/lab{first.lab}_<name>/"))
    names, kernels, name_errors = region_names(name, text, lines, regions)
    errors += name_errors
    if errors:
        return None, errors
    student_path = lab_folders[first.lab] / "student" / path
    return (student_path, make_skeleton(name, lines, regions, names, kernels)), []


def generate(root):
    """All skeletons in memory: ({relative student path: bytes}, [error lines])."""
    lab_folders, errors = find_lab_folders(root)
    skeletons = {}
    for path in source_files(root):
        result, file_errors = skeleton_for_file(root, path, lab_folders)
        errors += [str(e) for e in file_errors]
        if result:
            student_path, content = result
            skeletons[student_path] = content.encode("utf-8", errors="surrogateescape")
    return skeletons, errors


def existing_student_files(root):
    """Files now under labs/labNN_*/student/, as relative paths."""
    labs = root / "labs"
    if not labs.is_dir():
        return set()
    return {p.relative_to(root) for folder in labs.iterdir()
            if LAB_FOLDER.match(folder.name) and (folder / "student").is_dir()
            for p in (folder / "student").rglob("*") if p.is_file() or p.is_symlink()}


# ---------------------------------------------------------------- commands

def write(root, skeletons):
    """Write changed skeletons, remove stale ones, print what happened."""
    written = 0
    for path in sorted(skeletons, key=lambda p: p.as_posix()):
        target = root / path
        if target.is_file() and target.read_bytes() == skeletons[path]:
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(skeletons[path])
        print(f"wrote   {path.as_posix()}")
        written += 1
    stale = sorted(existing_student_files(root) - set(skeletons), key=lambda p: p.as_posix())
    for path in stale:
        (root / path).unlink()
        print(f"removed {path.as_posix()}")
        remove_empty_parents(root / path, stop=root / "labs")
    print(f"{len(skeletons)} skeleton files: {written} written, "
          f"{len(skeletons) - written} unchanged, {len(stale)} removed")
    return 0


def remove_empty_parents(path, stop):
    """Remove the folders above `path` that are now empty, up to (not including) the lab folder."""
    folder = path.parent
    while folder != stop and folder.parent != stop and folder.is_dir() and not any(folder.iterdir()):
        folder.rmdir()
        folder = folder.parent


def check(root, skeletons):
    """Compare the skeletons with the committed files; 0 if identical, else list and 1."""
    on_disk = existing_student_files(root)
    problems = []
    for path in sorted(set(skeletons) | on_disk, key=lambda p: p.as_posix()):
        if path not in on_disk:
            problems.append(f"missing: {path.as_posix()}")
        elif path not in skeletons:
            problems.append(f"stale:   {path.as_posix()}")
        elif (root / path).read_bytes() != skeletons[path]:
            problems.append(f"differs: {path.as_posix()}")
    if problems:
        for problem in problems:
            print(problem, file=sys.stderr)
        print(OUT_OF_DATE, file=sys.stderr)
        return 1
    print(f"skeletons up to date ({len(skeletons)} files)")
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(description="Generate labs/*/student/ from the solution "
                                     "regions in reference/ and kernels/.")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if labs/*/student/ is out of date")
    parser.add_argument("--root", type=pathlib.Path,
                        default=pathlib.Path(__file__).resolve().parents[2],
                        help="repository root (default: the one holding this script)")
    args = parser.parse_args(argv)
    root = args.root.resolve()
    skeletons, errors = generate(root)
    if errors:
        for error in errors:
            print(error, file=sys.stderr)
        return 1
    return check(root, skeletons) if args.check else write(root, skeletons)


if __name__ == "__main__":
    sys.exit(main())
