#!/usr/bin/env bash
# The Python package as a user installs a release of it: the wheel scripts/release.sh
# builds (the release workflow's own, repaired by auditwheel) installed offline into a
# fresh virtual environment that sees Debian's numpy (and torch, where installed), a check
# that the `shardcheck` command is on the venv's PATH and prints its help, a smoke check,
# then the pytest suite (pytest, Hypothesis and junitparser from PyPI, Debian's chromium for
# the report tests). CI runs this.
#
#   bash scripts/python-test.sh [WHEEL_DIR]   (a folder release.sh made; default: make one)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-${SHARDCHECK_JOBS:-$(nproc)}}

# Chromium renders report.html in python/tests/test_reports.py (headless).
bash "$root/scripts/install-deps.sh" chromium
missing=()
for p in python3-venv python3-dev python3-numpy python3-regex; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $sudo_cmd env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

venv=$(mktemp -d)
wheels=${1:-}
cleanup=("$venv")
if [ -z "$wheels" ]; then
  wheels=$(mktemp -d)
  cleanup+=("$wheels")
  bash "$root/scripts/release.sh" "$wheels"
fi
trap 'rm -rf "${cleanup[@]}"' EXIT
/usr/bin/python3 -m venv --system-site-packages "$venv"
py="$venv/bin/python"
# The release's wheel, offline: nothing of shardcheck comes from an index. Into the venv
# whatever the system has: after the quick start (scripts/campaign.sh) Debian's python3 holds
# a shardcheck of the same version, which the venv sees and pip would keep instead.
"$py" -m pip install --disable-pip-version-check --no-index --no-deps --ignore-installed "$wheels"/shardcheck-*.whl
# What the tests need beside it ([test] extra, and the JUnit validator of
# python/tests/test_reports.py), from PyPI.
"$py" -m pip install --disable-pip-version-check --quiet pytest hypothesis junitparser
"$py" -c "import pytest, hypothesis"

# The command line ships in the wheel: `shardcheck` is on the environment's PATH.
command=$(PATH="$venv/bin:$PATH" command -v shardcheck || true)
if [ "$command" != "$venv/bin/shardcheck" ]; then
  echo "the wheel left no shardcheck command in $venv/bin (found: '${command:-nothing}')" >&2
  exit 1
fi
help=$(PATH="$venv/bin:$PATH" shardcheck --help)
for sub in check repro digest campaign; do
  if ! grep -q "^  $sub " <<<"$help"; then
    echo "shardcheck --help from the venv does not cover '$sub':" >&2
    echo "$help" >&2
    exit 1
  fi
done
echo "shardcheck command: $command ($(PATH="$venv/bin:$PATH" shardcheck --version))"

# Outside the source tree, so that the installed package is the one imported.
cd "$venv"
"$py" - <<'EOF'
import numpy as np
import shardcheck

assert shardcheck.__file__.startswith(__import__("sys").prefix), shardcheck.__file__
split = {"logical_shape": [4, 6], "ranks": {
    0: {"shard_shape": [4, 4], "pieces": [{"shape": [4, 4], "source": [0, [6, 1]], "dest": [0, [4, 1]], "locations": [0]}]},
    1: {"shard_shape": [4, 2], "pieces": [{"shape": [4, 2], "source": [4, [6, 1]], "dest": [0, [2, 1]], "locations": [1]}]}}}
full = np.random.default_rng(1).standard_normal((4, 6)).astype(np.float32)
shards = {0: np.ascontiguousarray(full[:, :4]), 1: np.ascontiguousarray(full[:, 4:])}
assert shardcheck.rebuild(split, shards).tobytes() == full.tobytes(), "column split not rebuilt bit-exact"
split["ranks"][1]["pieces"][0]["source"][0] = 3  # rank 1's block now overlaps rank 0's
try:
    shardcheck.rebuild(split, shards)
except shardcheck.MapError as e:
    assert e.kind == "uncovered", e.kind
else:
    raise AssertionError("a corrupted map was converted")
print("shardcheck smoke check: ok")
EOF

cd "$root"
set +e
"$py" -m pytest -q -p no:cacheprovider "$root/python/tests"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "pytest collected no tests: failing" >&2
  exit 1
fi
exit "$rc"
