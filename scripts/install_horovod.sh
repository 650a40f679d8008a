#!/usr/bin/env bash
# Build (once) and install Horovod 0.28.1 with PyTorch + Gloo for the given Python.
#
#   bash scripts/install_horovod.sh [PYTHON]        (default: .venv/bin/python)
#
# Horovod 0.28.1 from PyPI does not compile against torch >= 2.1 as shipped: it builds
# with C++14 and torch's headers need C++17. This script downloads the PyPI sdist,
# switches CMAKE_CXX_STANDARD to 17, builds a wheel (about 6 minutes on 2 cores) and
# caches it in ${TRAINYARD_WHEEL_CACHE:-$HOME/.cache/trainyard/wheels}, keyed by the
# horovod, torch and Python versions. A cached wheel installs in seconds; when the
# right horovod is already importable the script does nothing.
set -euo pipefail

PY="${1:-.venv/bin/python}"
HOROVOD_VERSION="${HOROVOD_VERSION:-0.28.1}"
CACHE="${TRAINYARD_WHEEL_CACHE:-$HOME/.cache/trainyard/wheels}"

# An absolute path: the build runs in other directories and puts its bin/ on PATH.
if [[ "$PY" != */* ]]; then
    PY="$(command -v "$PY")" || { echo "install_horovod: $1 not found" >&2; exit 1; }
fi
[[ -x "$PY" ]] || { echo "install_horovod: $PY is not an executable Python" >&2; exit 1; }
PY="$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY")"

if ! "$PY" -c 'import torch' 2>/dev/null; then
    echo "install_horovod: torch is not importable by $PY; install trainyard[torch] first" >&2
    exit 1
fi

# Already installed and working against this torch: nothing to do.
if "$PY" - "$HOROVOD_VERSION" <<'PYEOF' 2>/dev/null
import sys
import horovod
import horovod.torch  # loads the compiled extension against the installed torch
sys.exit(0 if horovod.__version__ == sys.argv[1] else 1)
PYEOF
then
    echo "install_horovod: horovod $HOROVOD_VERSION already installed for $PY"
    exit 0
fi

TORCH_VERSION="$("$PY" -c 'import torch; print(torch.__version__.replace("+", "_"))')"
PY_TAG="$("$PY" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')"
KEY="horovod-${HOROVOD_VERSION}-torch-${TORCH_VERSION}-${PY_TAG}"
SLOT="$CACHE/$KEY"
mkdir -p "$SLOT"

wheel_in_slot() { compgen -G "$SLOT/horovod-*.whl" | head -n 1 || true; }

WHEEL="$(wheel_in_slot)"
if [[ -z "$WHEEL" ]]; then
    echo "install_horovod: no cached wheel for $KEY; building from the sdist (several minutes)"
    if ! command -v "${CXX:-c++}" >/dev/null && ! command -v g++ >/dev/null; then
        echo "install_horovod: building Horovod needs a C++17 compiler and the Python headers" \
             "(Debian/Ubuntu: apt-get install g++ python3-dev)" >&2
        exit 1
    fi
    WORK="$(mktemp -d)"
    trap 'rm -rf "$WORK"' EXIT
    "$PY" -m pip download -q --no-binary :all: --no-deps -d "$WORK" "horovod==$HOROVOD_VERSION"
    tar -xzf "$WORK"/horovod-"$HOROVOD_VERSION".tar.gz -C "$WORK"
    SRC="$WORK/horovod-$HOROVOD_VERSION"
    for f in "$SRC/CMakeLists.txt" "$SRC/horovod/torch/CMakeLists.txt"; do
        grep -q 'set(CMAKE_CXX_STANDARD 14)' "$f" || {
            echo "install_horovod: expected 'set(CMAKE_CXX_STANDARD 14)' in $f" >&2; exit 1; }
        sed -i 's/set(CMAKE_CXX_STANDARD 14)/set(CMAKE_CXX_STANDARD 17)/' "$f"
    done
    # Build requirements (no build isolation: it must see the installed torch).
    "$PY" -m pip install -q setuptools wheel packaging
    command -v cmake >/dev/null || "$PY" -m pip install -q cmake
    export PATH="$(dirname "$PY"):$PATH"
    HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 \
    HOROVOD_WITHOUT_MXNET=1 HOROVOD_WITHOUT_TENSORFLOW=1 \
    MAKEFLAGS="-j$(nproc)" \
        "$PY" -m pip wheel --no-build-isolation --no-deps -w "$WORK/dist" "$SRC"
    # Publish atomically so a concurrent or interrupted build never leaves half a wheel.
    built="$(compgen -G "$WORK/dist/horovod-*.whl" | head -n 1)"
    cp "$built" "$SLOT/.$(basename "$built").tmp"
    mv "$SLOT/.$(basename "$built").tmp" "$SLOT/$(basename "$built")"
    WHEEL="$(wheel_in_slot)"
fi

echo "install_horovod: installing $WHEEL"
# Replace whatever horovod is there (e.g. one built against another torch), then let pip
# add its small runtime dependencies (cffi, cloudpickle, psutil, pyyaml, packaging).
"$PY" -m pip install -q --force-reinstall --no-deps "$WHEEL"
"$PY" -m pip install -q "$WHEEL"
"$PY" -c 'import horovod.torch as hvd; print("install_horovod: horovod", __import__("horovod").__version__, "ok")'
