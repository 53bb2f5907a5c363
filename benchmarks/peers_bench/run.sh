#!/usr/bin/env bash
# Runs a command inside the peer venv: `benchmarks/peers_bench/run.sh python script.py ...`.
# Builds or refreshes the venv first (setup.sh, instant when up to date; `--no-setup` skips
# it), puts .venv-peers/bin first on PATH, PyAV's FFmpeg under its standard names on
# LD_LIBRARY_PATH (for torchcodec), and keeps the Hugging Face libraries offline with their
# own home in .venv-peers/hf-home, so nothing downloads and no user token or cache is read.
# See docs/peers.md.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="$(cd "$here/../.." && pwd)/.venv-peers"

if [[ "${1:-}" == "--no-setup" ]]; then
    shift
else
    "$here/setup.sh"
fi
if [[ $# -eq 0 ]]; then
    echo "usage: run.sh [--no-setup] COMMAND [ARG...]   (e.g. run.sh python script.py)" >&2
    exit 2
fi

export VIRTUAL_ENV="$venv"
export PATH="$venv/bin:$PATH"
export LD_LIBRARY_PATH="$venv/ffmpeg-libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export HF_HOME="$venv/hf-home"
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1
unset PYTHONHOME
exec "$@"
