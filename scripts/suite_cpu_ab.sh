#!/usr/bin/env bash
# What the whole CI run of each commit costs, one after the other on this machine:
#
#     scripts/suite_cpu_ab.sh 315538a main        # reports under /tmp/suite_ab/
#
# For each commit: a clean clone (as CI's), its `.ci/run` (venv bootstrap included) under
# this checkout's scripts/cpu_by_process.py, which reads the machine's /proc/stat from
# start to end and charges processes to the tests that started them; the speed loop
# before and after. The suite is CPU-bound and the VM's speed moves about 3x from day
# to day, so compare commits only within one sitting, on a quiet machine (nothing else
# running: contention costs CPU too). Each run takes about as long as CI's (~45 min).
set -uo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
repo="$(git -C "$here" rev-parse --show-toplevel)"
out="${SUITE_AB_DIR:-/tmp/suite_ab}"
mkdir -p "$out"
speed() { python3 "$here/tests/support/machine_speed.py"; }
for commit in "$@"; do
  sha="$(git -C "$repo" rev-parse --short "$commit")"
  clone="$out/clone-$sha"
  rm -rf "$clone"
  git clone -q "$repo" "$clone" && git -C "$clone" checkout -q "$sha"
  echo "== $commit ($sha): $(speed) before"
  started=$SECONDS
  python3 "$here/scripts/cpu_by_process.py" --by-test "$out/$sha.timeline" \
    --out "$out/$sha.cpu.txt" -- bash "$clone/.ci/run" > "$out/$sha.log" 2>&1
  rc=$?
  echo "== $commit ($sha): exit $rc, $((SECONDS - started)) s, $(speed) after"
  grep -m1 -i "cpu-s" "$out/$sha.cpu.txt" || true
  tail -n 3 "$out/$sha.log"
done
