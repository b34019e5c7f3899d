"""timing.py — stage 3 of a grade: the student's speed as a ratio to the reference's.

Part of the autograder (tools/labkit/grade.py; docs/labs.md, "Timing on a busy
machine"). Student and reference run alternately; a load probe (/proc/stat)
leaves out rounds other programs disturbed; rounds are added until the ratio's
standard error is small enough, or the speed is "not graded: machine busy".
The rules and the reasons for them: the comment below, before OTHER_CORES_ALLOWED.
"""
import itertools
import json
import math
import os
import resource
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import is_number
from .results import Entry, number, tail, truncate
from .process import describe_exit, run_program


# A timed run can be slowed by anything else the machine does, never sped up
# by it, and a busy core can slow a multi-threaded run many times over (an
# OpenMP thread spins at a barrier while its partner waits for a core). So:
#   - the timed runs use the manifest's `threads` OpenMP threads (default 1):
#     on a machine with a core to spare, one busy core then costs them little;
#   - student and reference alternate, S R, R S, S R, ... (neither always
#     goes first), and each round's ratio compares two runs made moments
#     apart, under the same conditions;
#   - a load probe (Linux /proc/stat, hypervisor steal included) counts the
#     CPU time every other program used during each run. A run during which
#     others used more than OTHER_CORES_ALLOWED beyond the cores this run
#     leaves free is disturbed, and its round is not used;
#   - each round's ratio is noisy even on a quiet machine (run-to-run speed
#     varies by several percent, and the run that comes second in a round can
#     be systematically faster or slower). The ratio is the geometric mean of
#     the median ratio of the student-first rounds and that of the
#     reference-first rounds, so that an order effect cancels;
#   - its uncertainty is estimated from the rounds' spread (a robust standard
#     deviation of the log ratios within each order, Shamos' estimator, at
#     least NOISE_FLOOR, x 1.25 / sqrt(rounds) for a median). A spread needs
#     rounds to measure it: no ratio comes from fewer than
#     MIN_ROUNDS_PER_ORDER rounds of each order, and the standard error is
#     scaled by Student's t(0.975, rounds - 2) / 1.96, since a spread measured
#     from four rounds may be a lucky one and the uncertainty must say so.
#     (Lab 7's rounds vary by 8.5 %; two of them once agreed at 1.108, and the
#     noise floor alone called that ratio certain to 1 %.) Rounds are added, from
#     `repetitions` up to MAX_ROUNDS_FACTOR x repetitions (or --max-rounds),
#     until it is at most RATIO_SE_TARGET (or --target-error);
#   - a machine that disturbs most rounds will not settle a ratio in the
#     rounds left: once 2 x repetitions rounds have run and more than half
#     of them were disturbed, no more are added (it says "machine busy"
#     now, not after four times the repetitions);
#   - when even then it is over RATIO_SE_LIMIT, or too few rounds ran
#     undisturbed, the speed is not graded: the entry says "not graded:
#     machine busy" with the figures, and scores 0 of 0. A score is never
#     computed from disturbed or disagreeing runs. docs/labs.md has the
#     measurements behind these choices.

OTHER_CORES_ALLOWED = 0.1   # CPU cores other programs may use beside a run's free cores
RATIO_SE_TARGET = 0.02      # stop adding rounds once the ratio is this certain (2 %)
RATIO_SE_LIMIT = 0.035      # grade at most this uncertain a ratio, else "machine busy"
NOISE_FLOOR = 0.01          # the smallest run-to-run noise assumed (1 %)
MAX_ROUNDS_FACTOR = 4       # rounds at most: this x repetitions
ORDER_GAP_TO_SETTLE = 0.05  # an order of 2 rounds settles only within 5 % of the other
MIN_ROUNDS_PER_ORDER = 2    # undisturbed rounds of each order before there is any ratio

# Student's t quantile t(0.975, df) for df = 1..30; above that, a series in 1/df.
T_975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
         2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
         2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042]
Z_975 = 1.960


def t_975(degrees_of_freedom):
    """Student's t(0.975) for this many degrees of freedom (>= 1)."""
    if degrees_of_freedom <= len(T_975):
        return T_975[degrees_of_freedom - 1]
    return Z_975 + (Z_975 ** 3 + Z_975) / (4 * degrees_of_freedom)


class BenchError(Exception):
    """A bench run that gave no usable number; the message says why."""


@dataclass
class Run:
    """One timed run: its metric values and what the machine did meanwhile."""
    values: list
    seconds: float
    own_cores: float = None    # CPU time of the run (and the grader) / wall time
    other_cores: float = None  # CPU time of every other program / wall time (None: no probe)

    @property
    def value(self):
        return self.values[0]


def probe_cpus():
    """The CPUs this process may run on (its affinity), as /proc/stat names them."""
    try:
        return {f"cpu{i}" for i in os.sched_getaffinity(0)}
    except (AttributeError, OSError):
        return None


def machine_busy_seconds(cpus):
    """CPU seconds the CPUs in `cpus` spent busy (steal included) since boot, or None."""
    try:
        lines = Path("/proc/stat").read_text(encoding="ascii").splitlines()
        ticks_per_s = os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, AttributeError):
        return None
    busy = 0
    for line in lines:
        fields = line.split()
        if not fields or fields[0] not in cpus:
            continue
        # user nice system idle iowait irq softirq steal (guest is inside user)
        numbers = [int(x) for x in fields[1:9]]
        busy += sum(numbers) - numbers[3] - numbers[4]
    return busy / ticks_per_s if busy else None


def own_cpu_seconds():
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    return total


def timed_run(command, timeout_s, env, metrics):
    """Runs one timed command; returns a Run with the metrics from its JSON output."""
    cpus = probe_cpus()
    busy_before = machine_busy_seconds(cpus) if cpus else None
    own_before, started = own_cpu_seconds(), time.monotonic()
    try:
        run = run_program(command, timeout_s, env)
    except OSError as error:
        raise BenchError(f"cannot run {command[0]}: {error.strerror}") from None
    seconds = max(time.monotonic() - started, 1e-6)
    own = own_cpu_seconds() - own_before
    busy_after = machine_busy_seconds(cpus) if cpus else None
    if run.timed_out:
        raise BenchError(f"timed out after {number(timeout_s)} s")
    if run.returncode != 0:
        raise BenchError(f"{describe_exit(run.returncode)}; last lines of stderr:\n"
                         f"{tail(run.stderr, 10) or '(empty)'}")
    other = None
    if busy_before is not None and busy_after is not None:
        other = max(0.0, (busy_after - busy_before - own) / seconds)
    return Run(json_metrics(run.stdout, metrics), seconds, own / seconds, other)


def json_metrics(stdout, metrics):
    """Each of `metrics` (a field, or a nested one with dots:
    "summary.output_tokens_per_s") from a program's JSON output."""
    try:
        output = json.loads(stdout)
    except ValueError:
        output = None
    values = []
    for metric in metrics:
        try:
            value = output
            for key in metric.split("."):
                value = value[key]
        except (KeyError, TypeError):
            raise BenchError(f"stdout is not a JSON object with a {metric!r} field: "
                             f"{truncate(stdout.strip(), 300)!r}") from None
        if not is_number(value) or value < 0:
            raise BenchError(f"{metric} is {value!r}, not a number >= 0")
        values.append(float(value))
    return values


def timed_environment(spec):
    """The environment of a timed run: the manifest's OpenMP threads, whatever the caller set."""
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = str(spec.threads)
    return env


def throughput_points(ratio, spec):
    """Full points at ratio >= full_ratio, none below zero_ratio, linear in between."""
    fraction = (ratio - spec.zero_ratio) / (spec.full_ratio - spec.zero_ratio)
    return spec.points * min(1.0, max(0.0, fraction))


def usable_cpus():
    cpus = probe_cpus()
    return len(cpus) if cpus else (os.cpu_count() or 1)


def cores_in_use(runs, spec, num_cpus):
    """The cores a side's runs keep busy: the manifest's `cores`, or more if the least
    disturbed of its runs used more (a student's code may start threads of its own)."""
    measured = max((run.own_cores for run in runs if run.own_cores is not None), default=0.0)
    return min(num_cpus, max(spec.cores, math.ceil(measured - 0.1)))


@dataclass
class Verdict:
    """What a set of rounds allows: a ratio and its uncertainty, or why there is none."""
    ratio: float = None
    standard_error: float = None                   # of log(ratio): 0.02 is about 2 %
    used: list = field(default_factory=list)       # round indices the ratio comes from
    disturbed: list = field(default_factory=list)  # round indices a busy machine spoiled
    allowed_other_cores: float = None
    reason: str = ""                               # why there is no ratio
    busy: bool = False                             # no ratio because the machine was busy
    order_gap: float = None      # |log| of one order's median ratio over the other's
    smallest_order: int = None   # rounds in the order that has fewer

    def settled(self, target_error=RATIO_SE_TARGET):
        # An order with two rounds has no median that resists an outlier: one
        # disturbance the probe missed moves it by half of that round's error
        # while the rest looks settled. So such a ratio counts only when the two
        # orders agree.
        orders_agree = self.smallest_order is not None and (
            self.smallest_order > MIN_ROUNDS_PER_ORDER or self.order_gap <= ORDER_GAP_TO_SETTLE)
        return (self.ratio is not None and self.standard_error <= target_error
                and orders_agree)


def judge(rounds, spec, num_cpus):
    """The Verdict on `rounds`, a list of (student Run, reference Run); round i ran
    the student first when i is even."""
    allowed = {}
    for side in (0, 1):
        in_use = cores_in_use([pair[side] for pair in rounds], spec, num_cpus)
        allowed[side] = max(0, num_cpus - in_use) + OTHER_CORES_ALLOWED
    verdict = Verdict(allowed_other_cores=min(allowed.values()))
    if any(pair[1].value <= 0 for pair in rounds):
        verdict.reason = f"the reference reported {spec.metric} = 0; cannot compare"
        return verdict
    logs = {}
    for index, pair in enumerate(rounds):
        if any(run.other_cores is not None and run.other_cores > allowed[side]
               for side, run in enumerate(pair)):
            verdict.disturbed.append(index)
        else:
            logs[index] = math.log(max(pair[0].value, 1e-12) / pair[1].value)
    by_order = [[logs[i] for i in logs if i % 2 == 0], [logs[i] for i in logs if i % 2 == 1]]
    if len(logs) < spec.repetitions or min(map(len, by_order)) < MIN_ROUNDS_PER_ORDER:
        verdict.reason = (f"only {len(logs)} of {len(rounds)} rounds ran undisturbed "
                          f"({max(spec.repetitions, 2 * MIN_ROUNDS_PER_ORDER)} needed, "
                          f"{MIN_ROUNDS_PER_ORDER} of each order)")
        verdict.busy = True
        return verdict
    centers = [statistics.median(group) for group in by_order]
    verdict.ratio = math.exp(sum(centers) / 2)
    verdict.order_gap = abs(centers[0] - centers[1])
    verdict.smallest_order = min(len(group) for group in by_order)
    verdict.standard_error = ratio_standard_error(by_order)
    verdict.used = sorted(logs)
    return verdict


def ratio_standard_error(by_order):
    """The standard error of log(ratio), from the spread of the log ratios within
    each order (each order has MIN_ROUNDS_PER_ORDER rounds or more)."""
    # Shamos' estimator: 1.0483 x the median of |x_i - x_j| over the pairs of
    # rounds of one order is the standard deviation for normal noise, ignores
    # the order effect, and resists outliers like the median absolute
    # deviation does -- but, unlike deviations from an order's own median,
    # has no zero term from the median round itself.
    differences = [abs(a - b) for group in by_order for a, b in itertools.combinations(group, 2)]
    noise = max(1.0483 * statistics.median(differences), NOISE_FLOOR)
    rounds = sum(len(group) for group in by_order)
    degrees_of_freedom = rounds - len(by_order)
    return 1.25 * noise / math.sqrt(rounds) * t_975(degrees_of_freedom) / Z_975


def mostly_disturbed(rounds, verdict, spec):
    """True once 2 x repetitions rounds ran and a busy machine spoiled most of them."""
    return len(rounds) >= 2 * spec.repetitions and 2 * len(verdict.disturbed) > len(rounds)


def measure_rounds(spec, one_round):
    """Calls one_round(index) -> (student Run, reference Run) until judge() gives a
    settled ratio (at least spec.repetitions rounds), spec.round_limit() rounds
    were run, or most rounds were disturbed; returns (rounds, verdict), the verdict
    without a ratio (busy) when the last one is still over RATIO_SE_LIMIT."""
    num_cpus = usable_cpus()
    rounds = []
    verdict = Verdict()
    for index in range(spec.round_limit()):
        rounds.append(one_round(index))
        if len(rounds) >= spec.repetitions:
            verdict = judge(rounds, spec, num_cpus)
            if verdict.settled(spec.target_error or RATIO_SE_TARGET):
                return rounds, verdict
            if mostly_disturbed(rounds, verdict, spec):
                break
    if verdict.ratio is not None and verdict.standard_error > RATIO_SE_LIMIT:
        verdict.reason = (f"the undisturbed rounds disagree: ratio {verdict.ratio:.3f} with a "
                          f"standard error of {verdict.standard_error:.1%} after {len(rounds)} "
                          f"rounds (at most {RATIO_SE_LIMIT:.1%} is graded)")
        verdict.ratio, verdict.busy = None, True
    return rounds, verdict


def alternating(index, first, second):
    """Round 0: first, second; round 1: second, first; ... (A B, B A, A B, ...)."""
    return (first, second) if index % 2 == 0 else (second, first)


def measure(spec, student_cli, reference_cli, args):
    """Runs student and reference CLIs alternately; returns (rounds, verdict)."""
    env = timed_environment(spec)

    def one_round(index):
        runs = {}
        for who in alternating(index, "student", "reference"):
            cli = student_cli if who == "student" else reference_cli
            try:
                runs[who] = timed_run([cli, *args], spec.timeout_s, env, [spec.metric])
            except BenchError as error:
                raise BenchError(f"the {who} CLI failed: {error}") from None
        return runs["student"], runs["reference"]
    return measure_rounds(spec, one_round)


def measure_in_process(spec, program, args):
    """Runs the throughput program, which times both kernels itself, in one process;
    each run is one round: (student Run, reference Run) of the same process."""
    env = timed_environment(spec)

    def one_round(_index):
        try:
            run = timed_run([program, *args], spec.timeout_s, env,
                            [spec.metric, spec.reference_metric])
        except BenchError as error:
            raise BenchError(f"the throughput program {Path(program).name} failed: {error}") from None
        student = Run([run.values[0]], run.seconds, run.own_cores, run.other_cores)
        reference = Run([run.values[1]], run.seconds, run.own_cores, run.other_cores)
        return student, reference
    return measure_rounds(spec, one_round)


def describe_rounds(rounds, verdict, order):
    """One line per round: both values, the ratio, the load, whether it was used."""
    lines = []
    for index, (student, reference) in enumerate(rounds):
        first, _ = alternating(index, *order)
        values = (f"student {student.value:.4g}, reference {reference.value:.4g}"
                  if first == "student" else
                  f"reference {reference.value:.4g}, student {student.value:.4g}")
        ratio = student.value / reference.value if reference.value > 0 else float("nan")
        loads = [run.other_cores for run in (student, reference) if run.other_cores is not None]
        load = f"; other programs {max(loads):.2f} cores" if loads else ""
        if index in verdict.disturbed:
            mark = " (disturbed: not used)"
        elif index in verdict.used:
            mark = " (used)"
        else:
            mark = ""
        lines.append(f"  round {index + 1}: {values}: ratio {ratio:.3f}{load}{mark}")
    return lines


def busy_figures(rounds, verdict):
    """'other programs used 0.95-1.02 cores during 7 of 9 rounds (0.10 allowed ...)'."""
    loads = [max(run.other_cores for run in pair if run.other_cores is not None)
             for pair in rounds if any(run.other_cores is not None for run in pair)]
    if not loads:
        return "no load probe on this system (/proc/stat)"
    disturbed = [loads[i] for i in verdict.disturbed if i < len(loads)]
    if not disturbed:
        return f"other programs used at most {max(loads):.2f} cores"
    return (f"other programs used {min(disturbed):.2f}-{max(disturbed):.2f} CPU cores during "
            f"{len(disturbed)} of {len(rounds)} rounds, where {verdict.allowed_other_cores:.2f} "
            f"are allowed beside the cores the runs use")


def grade_throughput(spec, student_cli, reference_cli, model, student_program=None,
                     program_args=(), rerun_hint="make grade"):
    """The speed entry, the leaderboard (empty when there is no ratio), and whether it
    was graded (False: the machine was too busy to time; the entry scores 0 of 0)."""
    def failed(message):
        return Entry(spec.name, 0, spec.points, message, passed=False), [], True

    heading = ""
    try:
        if spec.program:
            if not Path(student_program).is_file():
                return failed(f"throughput program not found: {student_program}")
            args = [*spec.args, *program_args]
            rounds, verdict = measure_in_process(spec, student_program, args)
            heading = (f"{Path(student_program).name} {' '.join(args)}: your kernel "
                       f"({spec.metric}) against the reference kernel ({spec.reference_metric}), "
                       f"timed in the same runs")
            order = ("student", "reference")
        else:
            if not Path(model).is_file():
                return failed(f"model not found: {model} (python3 tools/setup/fetch_model.py downloads it)")
            for who, cli in (("student", student_cli), ("reference", reference_cli)):
                if not Path(cli).is_file():
                    return failed(f"{who} CLI not found: {cli}")
            args = [arg.replace("{model}", str(Path(model).resolve())) for arg in spec.args]
            rounds, verdict = measure(spec, student_cli, reference_cli, args)
            heading = (f"{spec.metric} of the student's CLI and the reference's, alternating "
                       f"(student first in odd rounds)")
            order = ("student", "reference")
    except BenchError as error:
        return failed(str(error))
    threads = f"{spec.threads} OpenMP thread{'s' if spec.threads != 1 else ''}"
    lines = [f"{heading}; {threads}, {len(rounds)} rounds:",
             *describe_rounds(rounds, verdict, order)]
    student = [pair[0].value for pair in rounds]
    reference = [pair[1].value for pair in rounds]
    lines.append(f"student median {statistics.median(student):.4g} (runs {fmt_runs(student)}), "
                 f"reference median {statistics.median(reference):.4g} (runs {fmt_runs(reference)})")
    if verdict.ratio is None:
        if verdict.busy:
            lines.insert(0, f"not graded: machine busy ({verdict.reason}; "
                            f"{busy_figures(rounds, verdict)}). No score was computed from "
                            f"disturbed runs: re-run `{rerun_hint}` when the machine is quiet")
            return Entry(spec.name, 0, 0, "\n".join(lines), passed=False), [], False
        return Entry(spec.name, 0, spec.points, f"{verdict.reason}\n" + "\n".join(lines),
                     passed=False), [], True
    lines.append(f"ratio {verdict.ratio:.3f} +- {verdict.standard_error:.1%}: the geometric mean "
                 f"of the median ratios of the student-first and the reference-first rounds, "
                 f"{len(verdict.used)} undisturbed rounds; {busy_figures(rounds, verdict)}")
    lines.append(f"full points at ratio >= {spec.full_ratio:.3f}, none below {spec.zero_ratio:.3f}")
    entry = Entry(spec.name, throughput_points(verdict.ratio, spec), spec.points, "\n".join(lines))
    return entry, [{"name": spec.name, "value": round(verdict.ratio, 4), "order": "desc"}], True


def fmt_runs(values):
    return ", ".join(f"{v:.4g}" for v in values)
