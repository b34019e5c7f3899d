#!/usr/bin/env python3
"""test_gpu_check.py — what of tools/gpu_check.sh and its peer comparison runs without a GPU.

Part of the CUDA backend's checks (issue 48; registered by tests/tools/tests.cmake).
The script's GPU steps can only run on the lent machine, so these test the
parts that decide whether that one call is worth its minutes:
  - its options: an unknown option or step is refused before anything runs;
  - the peers' archive: packed into parts under the carry limit, reassembled
    byte for byte, and refused (naming the reason) when a part is missing or
    damaged;
  - tools/gpu_check/peer_bench.py: the two engines run in turn (S L S L), the
    medians, ratios and bandwidth shares it prints, from fake engines that
    print what the real ones print;
  - the check itself on a build folder of fake programs: the steps' rows,
    the time budget (a step with no time left is skipped, saying so, and the
    summary still prints), the scratch file deleted after its run.
Standard library only; temporary folders only.
"""
import json
import os
import re
import stat
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools" / "gpu_check.sh"
PEER_BENCH = ROOT / "tools" / "gpu_check" / "peer_bench.py"


def run_script(*args, env=None):
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, cwd=ROOT)


def write_executable(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


class Options(unittest.TestCase):
    def test_unknown_option_is_refused(self):
        done = run_script("--no-such-option")
        self.assertEqual(done.returncode, 2, done.stderr)
        self.assertIn("unknown option --no-such-option", done.stderr)

    def test_unknown_step_is_refused_naming_the_steps(self):
        done = run_script("--steps", "build,peers-70b")
        self.assertEqual(done.returncode, 2, done.stderr)
        self.assertIn("unknown step peers-70b", done.stderr)
        self.assertIn("peers-8b", done.stderr, "the message should list the known steps")

    def test_steps_needs_a_list(self):
        self.assertEqual(run_script("--steps").returncode, 2)


class PeerArchive(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = Path(self.tmp.name)
        self.bin = self.dir / "bin"
        self.bin.mkdir()
        # Random bytes, so xz cannot shrink them below one part: the split is exercised.
        for name in ("llama-bench", "llama-batched-bench"):
            write_executable(self.bin / name, "")
            (self.bin / name).write_bytes(os.urandom(1_500_000))
        self.env = {"PEERS_BIN": str(self.bin), "GPU_PEERS_DIR": str(self.dir / "pack"),
                    "GPU_PEERS_BIN_DIR": str(self.dir / "unpacked"), "PEERS_PART_MIB": "1",
                    "PEERS_XZ_LEVEL": "0"}

    def tearDown(self):
        self.tmp.cleanup()

    def pack(self):
        done = run_script("--pack-peers", env=self.env)
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        return done.stdout

    def test_round_trip_through_parts(self):
        report = self.pack()
        parts = sorted((self.dir / "pack").glob("peers.tar.xz.part*"))
        self.assertGreaterEqual(len(parts), 3, "3 MB of random bytes in 1 MiB parts")
        self.assertTrue(all(p.stat().st_size <= 1 << 20 for p in parts), "a part is over PEERS_PART_MIB")
        self.assertIn("of 64", report, "the pack should report the carry's size against the limit")
        done = run_script("--unpack-peers", env=self.env)
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        for name in ("llama-bench", "llama-batched-bench"):
            unpacked = self.dir / "unpacked" / name
            self.assertEqual(unpacked.read_bytes(), (self.bin / name).read_bytes(),
                             f"{name} changed on the way through the archive")
            self.assertTrue(os.access(unpacked, os.X_OK), f"{name} lost its executable bit")

    def test_missing_part_is_named(self):
        self.pack()
        (self.dir / "pack" / "peers.tar.xz.part01").unlink()
        done = run_script("--unpack-peers", env=self.env)
        self.assertNotEqual(done.returncode, 0)
        self.assertIn("missing", done.stdout)
        self.assertIn("part01", done.stdout)

    def test_damaged_part_is_refused(self):
        self.pack()
        part = self.dir / "pack" / "peers.tar.xz.part00"
        data = bytearray(part.read_bytes())
        data[100] ^= 0xFF
        part.write_bytes(bytes(data))
        done = run_script("--unpack-peers", env=self.env)
        self.assertNotEqual(done.returncode, 0)
        self.assertIn("damaged", done.stdout)

    def test_absent_archive_says_not_carried(self):
        done = run_script("--unpack-peers", env=self.env)
        self.assertEqual(done.returncode, 1)
        self.assertIn("not carried", done.stdout)


# Fake engines: each appends its name to calls.log and prints what the real
# program prints (e2e_bench's JSON lines on stderr, llama-bench's JSON on
# stdout, llama-batched-bench's jsonl). Rates differ per call so medians show.
FAKE_E2E = """#!/usr/bin/env python3
import sys, pathlib
log = pathlib.Path(sys.argv[0]).parent / "calls.log"
n = len(log.read_text().splitlines()) if log.exists() else 0
log.open("a").write("servelab " + " ".join(sys.argv[1:]) + "\\n")
rate = 100.0 + n
print("end to end ...")
print('{"case": "model", "path": "m", "copy_gbs": 4000.0, "servelab_read_bytes_per_token": 2.0e9, '
      '"file_read_bytes_per_token": 1.0e9}', file=sys.stderr)
for batch in (1, 64, 256):
    print('{"case": "decode", "batch": %d, "tokens_per_s": %.1f, "steps_per_s": 1, "graph_launches": 1}'
          % (batch, rate * batch), file=sys.stderr)
print('{"case": "prefill", "tokens_per_s": 5000.0}', file=sys.stderr)
"""
FAKE_LLAMA_BENCH = """#!/usr/bin/env python3
import sys, json, pathlib
log = pathlib.Path(sys.argv[0]).parent / "calls.log"
log.open("a").write("llama-bench " + " ".join(sys.argv[1:]) + "\\n")
print("ggml_cuda_init: found 1 CUDA devices [fake]", file=sys.stderr)
print(json.dumps([{"n_prompt": 512, "n_gen": 0, "avg_ts": 4000.0},
                  {"n_prompt": 0, "n_gen": 128, "avg_ts": 80.0}]))
"""
FAKE_BATCHED = """#!/usr/bin/env python3
import sys, json, pathlib
log = pathlib.Path(sys.argv[0]).parent / "calls.log"
log.open("a").write("llama-batched-bench " + " ".join(sys.argv[1:]) + "\\n")
for pl in (64, 256):
    print(json.dumps({"pp": 32, "tg": 128, "pl": pl, "speed_tg": 40.0 * pl, "speed_pp": 1.0}))
"""


class PeerBench(unittest.TestCase):
    def test_interleaves_and_summarizes(self):
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            write_executable(tmp / "e2e", FAKE_E2E)
            write_executable(tmp / "llama-bench", FAKE_LLAMA_BENCH)
            write_executable(tmp / "llama-batched-bench", FAKE_BATCHED)
            out = tmp / "r.json"
            done = subprocess.run(
                [sys.executable, str(PEER_BENCH), "run", "--model", "m.gguf", "--label", "1B Q4_1",
                 "--e2e", str(tmp / "e2e"), "--llama-dir", str(tmp), "--out", str(out),
                 "--rounds", "3", "--log", str(tmp / "commands.log")],
                capture_output=True, text=True)
            self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
            engines = [line.split()[0] for line in (tmp / "calls.log").read_text().splitlines()]
            self.assertEqual(engines, ["servelab", "llama-bench", "llama-batched-bench"] * 3,
                             "the engines must take turns, servelab first, every round")
            result = json.loads(out.read_text())
            # servelab's batch-1 rates were 100, 103, 106 (n calls before): median 103.
            self.assertEqual(result["servelab"]["decode-1"], 103.0)
            self.assertEqual(result["llama.cpp"]["decode-256"], 40.0 * 256)
            self.assertEqual(result["llama.cpp"]["prefill"], 4000.0)
            self.assertIn("-ngl 99", (tmp / "calls.log").read_text())
            table = subprocess.run([sys.executable, str(PEER_BENCH), "summary", str(out)],
                                   capture_output=True, text=True, check=True).stdout
            # 103 / 80 = 1.29x, target 1.2 met; 256 * 103 / (40 * 256) = 2.58x.
            self.assertRegex(table, r"decode-1\s+103\s+80\s+1\.29x\s+>= 1\.2x met")
            self.assertRegex(table, r"decode-256\s+26,368\s+10,240\s+2\.58x")
            # Bandwidth: 103 tok/s * 2 GB / 4000 GB/s = 5%; 80 * 1 GB / 4000 GB/s = 2%.
            self.assertIn("servelab 5% (2.00 GB/token)", table)
            self.assertIn("llama.cpp 2% (1.00 GB/token)", table)

    def test_a_failing_engine_is_reported_not_fatal(self):
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            write_executable(tmp / "e2e", FAKE_E2E)
            out = tmp / "r.json"
            done = subprocess.run(
                [sys.executable, str(PEER_BENCH), "run", "--model", "m.gguf", "--label", "8B F16",
                 "--e2e", str(tmp / "e2e"), "--llama-dir", str(tmp / "absent"), "--out", str(out),
                 "--rounds", "1"], capture_output=True, text=True)
            self.assertEqual(done.returncode, 1, "a missing peer must fail the run's status")
            result = json.loads(out.read_text())
            self.assertEqual(result["servelab"]["decode-1"], 100.0)
            self.assertTrue(any(e.startswith("llama.cpp") for e in result["errors"]), result["errors"])
            table = subprocess.run([sys.executable, str(PEER_BENCH), "summary", str(out)],
                                   capture_output=True, text=True, check=True).stdout
            self.assertIn("error: llama.cpp", table)


FAKE_CUDA_TESTS = """#!/usr/bin/env python3
import sys, json
path = next(a.split("json:", 1)[1] for a in sys.argv if a.startswith("--gtest_output="))
json.dump({"testsuites": [{"name": "CudaKernels", "testsuite": [
    {"name": "RmsNorm", "time": "0.1s"}, {"name": "Softmax", "time": "0.2s", "result": "SKIPPED"}]}]},
    open(path, "w"))
"""
FAKE_WRITE_SHAPE = """#!/usr/bin/env python3
import sys, pathlib
pathlib.Path(sys.argv[3]).write_bytes(b"GGUF" + b"0" * 1000)
print(f"wrote {sys.argv[3]} (0.00 GB, 0.1 s, 2 threads)")
"""


class DryRun(unittest.TestCase):
    """The whole check on fake programs: no GPU, no compiler."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        tmp = Path(self.tmp.name)
        self.build, self.scratch, self.out = tmp / "build", tmp / "scratch", tmp / "out"
        self.build.mkdir()
        write_executable(self.build / "cuda_tests", FAKE_CUDA_TESTS)
        write_executable(self.build / "cuda_kernel_bench", "#!/bin/sh\necho kernel table\n")
        write_executable(self.build / "cuda_e2e_bench", FAKE_E2E)
        write_executable(self.build / "write_shape", FAKE_WRITE_SHAPE)
        peers = tmp / "peers"
        peers.mkdir()
        write_executable(peers / "llama-bench", FAKE_LLAMA_BENCH)
        write_executable(peers / "llama-batched-bench", FAKE_BATCHED)
        self.env = {"GPU_CHECK_BUILD": str(self.build), "GPU_CHECK_CONFIGURED": "1",
                    "OUT": str(self.out), "GPU_CHECK_SCRATCH": str(self.scratch),
                    "PEERS_BIN": str(peers), "GPU_PEERS_DIR": str(tmp / "pack"),
                    "GPU_PEERS_BIN_DIR": str(tmp / "unpacked"), "PEER_TYPES": "q4_1",
                    "PEER_ROUNDS": "1", "PEERS_XZ_LEVEL": "0"}
        self.assertEqual(run_script("--pack-peers", env=self.env).returncode, 0)

    def tearDown(self):
        self.tmp.cleanup()

    def test_steps_run_and_the_peer_table_prints(self):
        done = run_script("--steps", "tests,kernels,e2e,peers-1b", env=self.env)
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        summary = done.stdout.split("== summary", 1)[1]
        for row in ("tests", "kernels", "e2e", "e2e-bf16", "peers-1b-q4_1-write", "peers-1b-q4_1"):
            self.assertRegex(summary, rf"\n{re.escape(row)}\s+ok", f"no ok row for {row}")
        self.assertIn("1 ok, 1 skipped", summary)
        # The e2e steps ran the fake twice before (native, bf16), so the peers' run got 102.
        self.assertRegex(summary, r"1B Q4_1\s+decode-1\s+102\s+80\s+1\.2[78]x")
        self.assertEqual(list(self.scratch.glob("*.gguf")), [], "the shape's file was left behind")
        self.assertTrue((self.out / "peers" / "1b-q4_1.json").is_file())

    def test_no_time_left_skips_and_still_summarizes(self):
        env = {**self.env, "GPU_CHECK_BUDGET_S": "10"}
        done = run_script("--steps", "tests,peers-8b", env=env)
        summary = done.stdout.split("== summary", 1)[1]
        self.assertRegex(summary, r"peers-8b-q4_1-write\s+skipped\s+0 s\s+\d+ s left, needs ~\d+ s")
        self.assertEqual(done.returncode, 0, "a skipped step is not a failure")

    def test_without_the_peers_servelab_runs_alone(self):
        env = {**self.env, "GPU_PEERS_DIR": str(Path(self.tmp.name) / "not-carried")}
        done = run_script("--steps", "peers-1b", env=env)
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        summary = done.stdout.split("== summary", 1)[1]
        self.assertRegex(summary, r"peers-unpack\s+skipped.*not carried")
        self.assertRegex(summary, r"1B Q4_1\s+decode-1\s+100\s+-\s+-")
        self.assertIn("error: llama.cpp: not run", summary)

    def test_a_failing_step_fails_the_check_but_not_the_rest(self):
        (self.build / "cuda_kernel_bench").unlink()
        done = run_script("--steps", "kernels,e2e", env=self.env)
        self.assertEqual(done.returncode, 1)
        summary = done.stdout.split("== summary", 1)[1]
        self.assertRegex(summary, r"\nkernels\s+FAILED")
        self.assertRegex(summary, r"\ne2e\s+ok")


if __name__ == "__main__":
    unittest.main()
