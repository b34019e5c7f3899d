#!/usr/bin/env bash
# setup.sh — Gradescope runs this once, as root, when it builds the course
# autograder's image (tools/labkit/autograder/make_autograder.py puts it at the top
# of autograder_labNN.zip, which Gradescope unpacks into /autograder/source/).
#
# 1. tools/setup/setup.sh: the Debian packages, the Python tools in .venv/, the
#    default model and Lab 10's text (what `make run` installs);
# 2. the release build, configured, with the lab's targets built: the
#    reference engine (its exercise files prebuilt, from
#    prebuilt/linux-x86_64/libservelab_solutions.a), the lab's tests and
#    CLIs. Grading a submission then compiles only the student's files.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
lab=$(cat "$here/LAB")
cd "$here/servelab"
bash tools/setup/setup.sh
.venv/bin/python tools/labkit/autograder/run_autograder.py --lab "$lab" --setup
