"""build.py — stage 1 of a grade: build the lab's targets, or say why they do not build.

Part of the autograder (tools/labkit/grade.py; docs/labs.md). A failed build is
one failing "compilation" entry worth the whole lab, holding the compiler's
last lines (not the commands the build tool echoes). Also tells whether a build
folder has CUDA at all, for the GPU track.
"""
import sys
from pathlib import Path

from .results import OUTPUT_LIMIT
from .process import describe_exit, run_program
from .gtest import compilation_entry


BUILD_TIMEOUT_S = 3600
BUILD_LOG_LINES = 60         # compiler lines shown when the build fails


def cuda_unavailable(build_dir):
    """Why `build_dir` has no CUDA targets (configured without CUDA), or None.

    Read from its CMakeCache.txt: SERVELAB_CUDA=OFF, or no CMAKE_CUDA_COMPILER
    (check_language(CUDA) found no nvcc). None also when there is no cache
    yet: the build then says what is wrong."""
    try:
        lines = (Path(build_dir) / "CMakeCache.txt").read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    cache = dict(line.split("=", 1) for line in lines if "=" in line and not line.startswith(("#", "//")))
    cache = {key.split(":")[0]: value for key, value in cache.items()}
    if cache.get("SERVELAB_CUDA", "ON").upper() in ("OFF", "0", "FALSE", "NO"):
        return f"{build_dir} was configured with SERVELAB_CUDA=OFF (CPU only)"
    compiler = cache.get("CMAKE_CUDA_COMPILER", "")
    if not compiler or compiler.endswith("NOTFOUND"):
        return f"{build_dir} was configured without CUDA: nvcc was not found"
    return None


def build(build_dir, lab):
    """Builds the lab's targets; returns None on success, else a failing 'compilation' entry."""
    clis = [f"servelab-{lab.tag}", "servelab"] if lab.track == "cpu" or lab.throughput else []
    if lab.throughput and lab.throughput.program:
        clis.append(lab.throughput_target)
    command = ["cmake", "--build", str(build_dir), "--target", lab.test_target, *clis]
    print(f"grade: {' '.join(command)}", file=sys.stderr)
    try:
        run = run_program(command, BUILD_TIMEOUT_S, merge_stderr=True)
    except OSError as error:
        return compilation_entry(lab.max_score, f"cannot run cmake: {error.strerror}")
    if run.returncode == 0 and not run.timed_out:
        return None
    status = "timed out" if run.timed_out else describe_exit(run.returncode)
    return compilation_entry(lab.max_score,
                             f"build failed ({status}); last lines of the build output:\n"
                             f"{build_log_excerpt(run.stdout)}")


COMMAND_LINE_CHARS = 300  # a build output line longer than this, with " -c ", echoes a command


def build_log_excerpt(output):
    """The build output's last lines as a student needs them: the compiler's
    messages, not the commands the build tool echoes before them (one such line
    is longer than a whole entry may be), and the end kept when it is too long,
    since the errors come last."""
    lines = []
    for line in output.splitlines():
        if not line.strip():
            continue
        if len(line) > COMMAND_LINE_CHARS and " -c " in line:
            line = "(the compile command)"
        lines.append(line)
    text = "\n".join(lines[-BUILD_LOG_LINES:])
    room = OUTPUT_LIMIT - 150  # the entry's first line and the truncation note
    if len(text) > room:
        text = "... (earlier lines left out)\n" + text[-room:].split("\n", 1)[-1]
    return text
