#!/usr/bin/env bash
# The main job (README quick start): installs what is missing, builds shardcheck once
# (the C++ core, the command line and the Python extension, optimised, through
# `pip install .`), installs the `shardcheck` command and the Python package together, and
# runs a campaign (default: a strict campaign of about a minute). Extra arguments go to
# `shardcheck campaign`.
#
# Where it installs:
#   default               for Debian's own /usr/bin/python3: the package importable by it
#                         (/usr/local/lib/python3.X/dist-packages) and the command as
#                         /usr/local/bin/shardcheck (as root, else through sudo);
#   SHARDCHECK_PREFIX=DIR a virtual environment DIR (seeing Debian's numpy and torch):
#                         DIR/bin/shardcheck and DIR/bin/python, no root needed.
# Either way `shardcheck deepspeed inspect` runs the Python the package was built for.
# The build stays in build-python/ (scikit-build-core), so running this again rebuilds
# only what changed.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
python=/usr/bin/python3
# python3-pip: Debian's pip for its python3; python3-dev: the extension's headers;
# python3-numpy and python3-regex: the package's dependencies, from Debian.
bash "$root/scripts/install-deps.sh" python3-pip python3-venv python3-dev python3-numpy python3-regex

sudo_cmd=""
if [ -n "${SHARDCHECK_PREFIX:-}" ]; then
  [ -x "$SHARDCHECK_PREFIX/bin/python" ] || "$python" -m venv --system-site-packages "$SHARDCHECK_PREFIX"
  python=$SHARDCHECK_PREFIX/bin/python
  bin=$SHARDCHECK_PREFIX/bin
  # A venv is its own: pip's guard for Debian's environment does not apply.
  guard=()
else
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  bin=/usr/local/bin
  # Debian marks its python3 as externally managed (PEP 668) so that pip does not replace
  # what apt installed. Nothing of apt's is touched here: shardcheck alone is installed
  # (--no-deps; numpy is Debian's), into /usr/local, where a local administrator's
  # packages go.
  guard=(--break-system-packages)
fi

# pip -v: the build's progress, of which one line per compiled file is shown rather than
# minutes of silence; the whole log where it fails.
echo "campaign.sh: building and installing shardcheck for $python (several minutes the first time)"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
$sudo_cmd env CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}" \
  "$python" -m pip install --disable-pip-version-check --no-deps "${guard[@]}" -v "$root" >"$log" 2>&1 &
pip_pid=$!
tail --pid="$pip_pid" -n +1 -f "$log" | grep --line-buffered -E '^ *\[[0-9]+/[0-9]+\] ' || true
status=0
wait "$pip_pid" || status=$?
if [ "$status" -ne 0 ] || ! "$python" -c 'import shardcheck' 2>/dev/null; then
  tail -40 "$log" >&2
  echo "campaign.sh: pip install of shardcheck for $python failed (exit $status; its log ends above)" >&2
  exit 1
fi
command=$bin/shardcheck
if [ ! -x "$command" ]; then
  echo "campaign.sh: pip left no shardcheck command in $bin" >&2
  exit 1
fi
echo "shardcheck installed: $command ($("$command" --version)); Python package for $python"
case ":$PATH:" in
  *":$bin:"*) ;;
  *) echo "note: $bin is not on PATH; add it, or run $command" ;;
esac
exec "$command" campaign "$@"
