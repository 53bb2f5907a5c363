#!/usr/bin/env bash
# Builds the peer venv, .venv-peers/ at the repository root: the loaders people use today
# (lerobot's LeRobotDataset, mosaicml-streaming's MDS) with their own code, apart from .venv.
# Idempotent: a stamp keyed by the hash of this script, requirements.txt and peers_shim.py
# makes a second run instant; any change to them rebuilds the venv from scratch.
# Progress goes to stderr, so that `run.sh` can call this before a script that prints JSON.
# See docs/peers.md.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
venv="$root/.venv-peers"
python="${PYTHON:-python3.11}"
start=$SECONDS

key="$(cat "$here/setup.sh" "$here/requirements.txt" "$here/peers_shim.py" | sha256sum | cut -c1-16)"
stamp="$venv/.setup-$key"

# One build at a time (a test and a person may start one together).
exec 9>"$root/.venv-peers.lock"
flock 9

if [[ -f "$stamp" && -x "$venv/bin/python" ]]; then
    echo "peer venv up to date: $venv (stamp $key)" >&2
    exit 0
fi

command -v "$python" >/dev/null || { echo "setup.sh: need $python on PATH" >&2; exit 1; }
echo "building the peer venv in $venv ..." >&2
rm -rf "$venv"
"$python" -m venv "$venv"
# --no-deps: requirements.txt is the whole, pinned list (the peers' own pins are wrong here).
# --no-compile halves the install (torch alone is thousands of modules); the import check
# below byte-compiles what the peers import instead.
log="$venv/pip-install.log"
if ! "$venv/bin/python" -m pip install --no-compile --no-deps -r "$here/requirements.txt" >"$log" 2>&1; then
    grep -v "is ignored: it is neither a file nor a directory" "$log" | tail -20 >&2
    echo "setup.sh: pip install failed (whole log: $log)" >&2
    exit 1
fi

site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"

# torchcodec links FFmpeg by standard names (libavcodec.so.61); PyAV's wheel ships the same
# libraries under hashed names (av.libs/libavcodec-7ee0753d.so.61.19.101). One folder of
# symlinks holds both, for LD_LIBRARY_PATH (run.sh): the standard names for torchcodec, the
# hashed ones for the libraries' own dependencies on each other (they carry no RPATH).
libs="$venv/ffmpeg-libs"
mkdir -p "$libs"
for lib in "$site"/av.libs/*.so*; do
    name="$(basename "$lib")"
    ln -sf "$(realpath --relative-to="$libs" "$lib")" "$libs/$name"
    if [[ "$name" =~ ^(libav[a-z]+|libsw[a-z]+)-[0-9a-f]+\.so\.([0-9]+)\. ]]; then
        ln -sf "$name" "$libs/${BASH_REMATCH[1]}.so.${BASH_REMATCH[2]}"
    fi
done
for base in avcodec avdevice avfilter avformat avutil swresample swscale; do
    compgen -G "$libs/lib$base.so.[0-9]*" >/dev/null \
        || { echo "setup.sh: no lib$base in $site/av.libs" >&2; exit 1; }
done

# The torchvision shim, loaded at interpreter start-up by a .pth file (see peers_shim.py).
cp "$here/peers_shim.py" "$site/peers_shim.py"
echo "import peers_shim; peers_shim.install()" >"$site/peers_shim.pth"

# Prove the workarounds hold before stamping (torchcodec loads FFmpeg, torchvision imports,
# so both peers import), and byte-compile what they import on the way: without the .pyc files
# each import of lerobot compiles ~2,000 modules again (PYTHONDONTWRITEBYTECODE is unset
# here for that alone).
env -u PYTHONDONTWRITEBYTECODE "$here/run.sh" --no-setup python -c \
    "import torchcodec.decoders, lerobot.datasets.lerobot_dataset, streaming, PIL.JpegImagePlugin" \
    || { echo "setup.sh: the peers do not import in $venv (see above)" >&2; exit 1; }

touch "$stamp"
echo "peer venv built in $((SECONDS - start)) s: $venv (stamp $key)" >&2
