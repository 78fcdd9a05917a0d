#!/usr/bin/env bash
# Mutation testing: plants each mutant of mutants/mutants.tsv in turn, in a scratch copy of
# this tree (never the tree itself), rebuilds incrementally in one scratch build folder
# reused across mutants, runs the detectors and prints the kill matrix.
#
#   scripts/mutants.sh [--detectors campaign,replay,ctest] [--only ID] [--budget SECONDS]
#                      [--out DIR] [--jobs J] [--seed S] [--cases N] [--scratch DIR] [--list]
#
# Detectors: campaign (the strict campaign, fixed seed, --budget seconds (default 40) split
# 25/12.5/12.5/12.5/37.5 between a plain run, a --digest run, an --op reshard run, a
# --backend device-omp run and a large run (--large-share 1 --digest) (the nightly's
# modes without a target), each stopped at its first
# finding; builds only the shardcheck CLI), replay
# (ctest -R '^fuzz_': the fuzz corpora, the canary's known findings and
# corpus/regressions/) and ctest (the whole suite).
# A mutant is killed by a campaign that exits 1 or reports a finding, or a non-zero ctest.
# Time to detection: for each mutant the campaign kills, the CPU seconds the campaign and
# its workers spent until the first finding (one-core seconds, whatever else loads the
# machine); the matrix gives the median and 90th percentile over the catalogue, a survivor
# counting as never detected.
# A mutant whose search text no longer occurs exactly once is stale, one that does not
# compile is build-failed; neither counts as killed. The unmutated tree must pass every
# detector first. --list only checks the anchors (exit 1 when any is stale).
# Output (default out/mutants/<time>/): matrix.md, results.tsv, results.json, logs/.
# Run it nightly (docs/guide/testing.md, Fuzzing: Nightly), not in CI: a full pass takes about
# (build + budget) x mutants.
set -euo pipefail
exec python3 "$(dirname "$0")/mutants.py" "$@"
