"""manifest.py — a lab's manifest (labs/labNN_<name>/manifest.json) read and checked.

Part of the autograder (tools/labkit/grade.py; docs/labs.md). Turns the JSON
into a Lab: its test groups with points and visibility, its optional throughput
case, its limits and track (cpu or cuda). Anything malformed raises
ManifestError with one line saying where and what, before anything is built.
"""
import json
from dataclasses import dataclass
from pathlib import Path

from . import REPO_ROOT, is_number
from .results import number
from .timing import MAX_ROUNDS_FACTOR, MIN_ROUNDS_PER_ORDER


DEFAULT_TIMEOUT_S = 300
# One test's limit: 4.5x the slowest reference test of any lab (Lab 6's
# SpeculativeEngine.SampledTokensFollowTheTargetsDistribution, 6.6 s on the 2-core
# course machine with a build beside it, 2026-12-06), and short beside timeout_s, so
# a hang in a student's code costs its test this long, not the lab's whole timeout.
DEFAULT_TEST_TIMEOUT_S = 30
TRACK_MANIFESTS = {"cpu": "manifest.json", "cuda": "manifest_cuda.json"}


class ManifestError(Exception):
    """The manifest is missing or malformed; the message is one line."""


# Gradescope's test visibilities. A group that is not "visible" is the
# course's hidden test: left out of the student release (tools/labkit/student_release.py),
# graded by make grade in the instructor's tree and by the autograder.
VISIBILITIES = ("visible", "hidden", "after_due_date", "after_published")


@dataclass
class Group:
    name: str
    filter: str
    points: float
    visibility: str = "visible"

    @property
    def hidden(self):
        return self.visibility != "visible"


@dataclass
class Throughput:
    name: str
    points: float
    args: list
    metric: str
    repetitions: int = 3
    full_ratio: float = 1 / 1.2
    zero_ratio: float = 0.1
    timeout_s: float = DEFAULT_TIMEOUT_S
    program: str = None           # its source; the student's build is BUILD/labNN_throughput
    reference_metric: str = None  # with program: the reference kernel's field, same output
    threads: int = 1              # OMP_NUM_THREADS of the timed runs
    cores: int = None             # cores a timed run keeps busy (default: threads)
    max_rounds: int = None        # rounds at most (default MAX_ROUNDS_FACTOR x repetitions)
    target_error: float = None    # stop at this standard error (default RATIO_SE_TARGET)

    def __post_init__(self):
        if self.cores is None:
            self.cores = self.threads

    def round_limit(self):
        """Rounds at most: --max-rounds, never below the repetitions, nor below
        the rounds any ratio needs (MIN_ROUNDS_PER_ORDER of each order)."""
        least = max(self.repetitions, 2 * MIN_ROUNDS_PER_ORDER)
        if self.max_rounds is None:
            return max(MAX_ROUNDS_FACTOR * self.repetitions, least)
        return max(self.max_rounds, least)


@dataclass
class Lab:
    number: int
    name: str
    folder: Path
    timeout_s: float
    groups: list
    throughput: Throughput = None
    track: str = "cpu"
    test_timeout_s: float = DEFAULT_TEST_TIMEOUT_S  # one test's limit (a hang stops here)
    hidden_points: float = 0  # a release's manifest: the points of the groups it left out

    @property
    def tag(self):
        """'lab01' for lab 1: the prefix of the lab's build targets."""
        return f"lab{self.number:02d}"

    @property
    def test_target(self):
        """The lab's test binary for this track: lab01_tests, lab01_cuda_tests."""
        return f"{self.tag}_tests" if self.track == "cpu" else f"{self.tag}_{self.track}_tests"

    @property
    def throughput_target(self):
        """The build target of the manifest's throughput program: lab08_throughput."""
        return f"{self.tag}_throughput"

    @property
    def results_name(self):
        return "results.json" if self.track == "cpu" else f"results_{self.track}.json"

    @property
    def title(self):
        track = "" if self.track == "cpu" else f", {self.track} track"
        return f"lab {self.number:02d} ({self.name}{track})"

    @property
    def max_score(self):
        total = sum(group.points for group in self.groups)
        return total + (self.throughput.points if self.throughput else 0)


GROUP_KEYS = {"name", "filter", "points", "description", "visibility"}
THROUGHPUT_KEYS = {"name", "points", "args", "metric", "repetitions", "full_ratio",
                   "zero_ratio", "timeout_s", "description", "program", "reference_metric",
                   "threads", "cores"}




def require(condition, where, problem):
    if not condition:
        raise ManifestError(f"{where} {problem}")


def check_keys(table, allowed, where):
    unknown = sorted(set(table) - allowed)
    require(not unknown, where, f"has unknown key(s) {', '.join(unknown)} "
                                f"(allowed: {', '.join(sorted(allowed))})")


def parse_group(table, where):
    require(isinstance(table, dict), where, "must be an object")
    check_keys(table, GROUP_KEYS, where)
    for key in ("name", "filter"):
        value = table.get(key)
        require(isinstance(value, str) and value.strip(), f"{where}.{key}", "must be a non-empty string")
    points = table.get("points")
    require(is_number(points) and points >= 0, f"{where}.points", "must be a number >= 0")
    visibility = table.get("visibility", "visible")
    require(visibility in VISIBILITIES, f"{where}.visibility",
            f"must be one of {', '.join(VISIBILITIES)} (Gradescope's)")
    return Group(table["name"], table["filter"], points, visibility)


def parse_throughput(table, default_timeout):
    where = "throughput"
    require(isinstance(table, dict), where, "must be an object")
    check_keys(table, THROUGHPUT_KEYS, where)
    require(isinstance(table.get("name"), str) and table["name"].strip(), f"{where}.name",
            "must be a non-empty string")
    require(is_number(table.get("points")) and table["points"] >= 0, f"{where}.points",
            "must be a number >= 0")
    args = table.get("args")
    require(isinstance(args, list) and args and all(isinstance(a, str) for a in args),
            f"{where}.args", "must be a non-empty list of strings")
    require(isinstance(table.get("metric"), str) and table["metric"], f"{where}.metric",
            "must be a non-empty string")
    spec = Throughput(table["name"], table["points"], args, table["metric"], timeout_s=default_timeout)
    require(("program" in table) == ("reference_metric" in table), where,
            "needs both program and reference_metric, or neither")
    for key in ("program", "reference_metric"):
        if key in table:
            require(isinstance(table[key], str) and table[key].strip(), f"{where}.{key}",
                    "must be a non-empty string")
            setattr(spec, key, table[key])
    for key, low in (("repetitions", 1), ("threads", 1), ("cores", 1)):
        value = table.get(key, getattr(spec, key))
        require(isinstance(value, int) and not isinstance(value, bool) and value >= low,
                f"{where}.{key}", f"must be an integer >= {low}")
        setattr(spec, key, value)
    if "cores" not in table:
        spec.cores = spec.threads
    for key in ("full_ratio", "zero_ratio", "timeout_s"):
        value = table.get(key, getattr(spec, key))
        require(is_number(value) and value >= 0, f"{where}.{key}", "must be a number >= 0")
        setattr(spec, key, value)
    require(spec.zero_ratio < spec.full_ratio, where, "needs zero_ratio < full_ratio")
    require(spec.timeout_s > 0, f"{where}.timeout_s", "must be > 0")
    return spec


def parse_manifest(data, lab_number, folder, track="cpu"):
    """Checks a loaded manifest and returns a Lab; raises ManifestError."""
    require(isinstance(data, dict), "manifest", "must be a JSON object")
    require(data.get("lab") == lab_number and not isinstance(data.get("lab"), bool), "manifest",
            f"says lab {data.get('lab')!r}, but --lab is {lab_number}")
    require(data.get("track", "cpu") == track, "manifest",
            f"is for the {data.get('track', 'cpu')!r} track, but --track is {track}")
    name = data.get("name")
    require(isinstance(name, str) and name.strip(), "name", "must be a non-empty string")
    timeout_s = data.get("timeout_s", DEFAULT_TIMEOUT_S)
    require(is_number(timeout_s) and timeout_s > 0, "timeout_s", "must be a number > 0")
    test_timeout_s = data.get("test_timeout_s", DEFAULT_TEST_TIMEOUT_S)
    require(is_number(test_timeout_s) and test_timeout_s > 0, "test_timeout_s",
            "must be a number > 0")
    # Tests the lab builds that do not run the student's code, each with its
    # reason (tests/tools/test_lab_coverage.py holds every other test to a group).
    for i, entry in enumerate(data.get("not_graded", [])):
        require(isinstance(entry, dict) and set(entry) == {"filter", "why"}
                and all(isinstance(entry[k], str) and entry[k].strip() for k in entry),
                f"not_graded[{i}]", 'must be {"filter": ..., "why": ...}, both non-empty')
    groups = data.get("groups")
    require(isinstance(groups, list) and groups, "groups", "must be a non-empty list")
    parsed = [parse_group(group, f"groups[{i}]") for i, group in enumerate(groups)]
    names = [group.name for group in parsed]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    require(not duplicates, "groups", f"repeat the name(s) {', '.join(duplicates)}")
    throughput = None
    if data.get("throughput") is not None:
        throughput = parse_throughput(data["throughput"], timeout_s)
        require(throughput.name not in names, "throughput.name", "is also a group name")
    hidden_points = data.get("hidden_points", 0)
    require(is_number(hidden_points) and hidden_points >= 0, "hidden_points", "must be a number >= 0")
    return Lab(lab_number, name, folder, timeout_s, parsed, throughput, track, test_timeout_s,
               hidden_points)


def find_lab_folder(lab_number):
    """labs/labNN_<name>/ for lab N, or None when there is not exactly one."""
    folders = [p for p in (REPO_ROOT / "labs").glob(f"lab{lab_number:02d}_*") if p.is_dir()]
    return folders[0] if len(folders) == 1 else None


def load_lab(lab_number, manifest_path=None, track="cpu"):
    """Reads and checks the lab's manifest for a track; raises ManifestError."""
    if manifest_path is None:
        folder = find_lab_folder(lab_number)
        if folder is None:
            raise ManifestError(f"no single lab folder labs/lab{lab_number:02d}_<name>/ in {REPO_ROOT}")
        manifest_path = folder / TRACK_MANIFESTS[track]
        if track != "cpu" and not manifest_path.is_file():
            raise ManifestError(f"lab {lab_number} has no {track} track ({manifest_path} is missing)")
    manifest_path = Path(manifest_path)
    try:
        data = json.loads(manifest_path.read_text(encoding="utf-8"))
    except OSError as error:
        raise ManifestError(f"{manifest_path}: cannot read: {error.strerror}") from None
    except json.JSONDecodeError as error:
        raise ManifestError(f"{manifest_path}: not valid JSON: {error}") from None
    try:
        lab = parse_manifest(data, lab_number, manifest_path.parent, track)
    except ManifestError as error:
        raise ManifestError(f"{manifest_path}: {error}") from None
    expected_folder = f"lab{lab_number:02d}_{lab.name}"
    if manifest_path.parent.parent == REPO_ROOT / "labs" and manifest_path.parent.name != expected_folder:
        raise ManifestError(f"{manifest_path}: name {lab.name!r} does not match the folder "
                            f"(expected labs/{expected_folder}/)")
    return lab
