#!/usr/bin/env bash
# Source-based coverage (clang -fprofile-instr-generate -fcoverage-mapping) of what the
# harness runs: one instrumented build, then three profiles and their reports:
#   campaign  a short strict campaign, plain then --digest (in-process: --no-isolate,
#             since forked workers leave with _exit and would write no profile)
#   corpora   every fuzz target's seed folders (fuzz/targets.txt), the nightly's merged
#             corpora in out/fuzz-corpus/<target>/ when present, and corpus/regressions/
#             (strictly, as ctest replays them), through the <target>_replay executables
#   all       both
# For each: an HTML report (llvm-cov show), a per-file line/branch summary (llvm-cov
# report, as text, and as markdown), and a combined per-file table of the three profiles
# with the mutants killed per file when given a mutation result (scripts/mutants.sh).
#
#   scripts/coverage.sh [--out DIR] [--build DIR] [--seconds N] [--seed S] [--jobs J]
#                       [--mutants RESULTS.json]
#
# Defaults: --out out/coverage, --build build-coverage, --seconds 60 (the campaign's
# total), --seed 1, --jobs 2. Works from a clean checkout: installs what is missing
# (scripts/install-deps.sh, plus llvm-14 for llvm-profdata and llvm-cov), configures and builds.
# Read out/coverage/summary.md first.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
out=$repo/out/coverage build=$repo/build-coverage seconds=60 seed=1 jobs=2 mutants=""
while (($#)); do
  case $1 in
    --out) out=$(realpath -m "$2"); shift 2 ;;
    --build) build=$(realpath -m "$2"); shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --mutants) mutants=$(realpath "$2"); shift 2 ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "coverage.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

# llvm-14: llvm-profdata and llvm-cov for the clang 14 that install-deps.sh installs.
bash "$repo/scripts/install-deps.sh" llvm-14
source "$repo/fuzz/targets.sh"

# The profile tools must match the compiler's LLVM version.
cxx=${CXX:-}
if [[ -z $cxx ]]; then
  for c in clang++-14 clang++; do command -v "$c" >/dev/null && { cxx=$c; break; }; done
fi
[[ -n $cxx ]] || { echo "coverage.sh: clang++ not found" >&2; exit 1; }
llvm_major=$("$cxx" -dumpversion | cut -d. -f1)
tool() {
  local t
  for t in "$1-$llvm_major" "/usr/lib/llvm-$llvm_major/bin/$1" "$1"; do
    command -v "$t" >/dev/null && { echo "$t"; return; }
  done
  echo "coverage.sh: $1 (LLVM $llvm_major) not found; install llvm-$llvm_major" >&2
  return 1
}
profdata=$(tool llvm-profdata)
cov=$(tool llvm-cov)

mapfile -t targets < <(fuzz_targets)
binaries=(shardcheck)
for t in "${targets[@]}"; do binaries+=("${t}_replay"); done

# -O0: the instrumented build compiles quickly on a small machine, and a campaign of a
# minute still runs tens of thousands of cases, far past where its coverage levels off.
flags="-O0 -fprofile-instr-generate -fcoverage-mapping"
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
cmake "${generator[@]}" -S "$repo" -B "$build" -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=None \
  -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="-fprofile-instr-generate" \
  -DSHARDCHECK_TESTS=OFF -DSHARDCHECK_BENCH=OFF -DSHARDCHECK_CUDA=OFF -DSHARDCHECK_FUZZ=OFF \
  -DSHARDCHECK_SANITIZE=OFF >/dev/null
cmake --build "$build" -j "$jobs" --target "${binaries[@]}"

rm -rf "$out"
mkdir -p "$out/raw/campaign" "$out/raw/corpora" "$out/logs"

# --- campaign --------------------------------------------------------------------
half=$(( seconds / 2 > 0 ? seconds / 2 : 1 ))
for mode in plain digest; do
  extra=()
  [[ $mode == digest ]] && extra=(--digest)
  echo "coverage: campaign ($mode, $half s)"
  rc=0
  LLVM_PROFILE_FILE="$out/raw/campaign/$mode-%p.profraw" \
    "$build/shardcheck" campaign --seed "$seed" --time "$half" --jobs "$jobs" --no-isolate --quiet \
    --out "$out/campaign-$mode" "${extra[@]}" >"$out/logs/campaign-$mode.log" 2>&1 || rc=$?
  # A finding (exit 1) still yields a profile; only an unusable run stops the report.
  ((rc <= 1)) || { echo "coverage: the campaign failed (exit $rc), see $out/logs/campaign-$mode.log" >&2; exit 1; }
  ((rc == 0)) || echo "coverage: note: the $mode campaign reported findings (exit 1); see its report.json"
done

# --- corpora ---------------------------------------------------------------------
for t in "${targets[@]}"; do
  read -r -a dirs <<<"$(fuzz_seed_dirs "$t")"
  [[ -d $repo/out/fuzz-corpus/$t ]] && dirs+=("$repo/out/fuzz-corpus/$t")
  echo "coverage: replay $t (${dirs[*]#"$repo/"})"
  LLVM_PROFILE_FILE="$out/raw/corpora/$t-%p.profraw" "$build/fuzz/${t}_replay" "${dirs[@]}" \
    >"$out/logs/replay-$t.log" 2>&1 ||
    { echo "coverage: replaying $t failed, see $out/logs/replay-$t.log" >&2; exit 1; }
done
echo "coverage: replay corpus/regressions (strict)"
SHARDCHECK_REPLAY_STRICT=1 LLVM_PROFILE_FILE="$out/raw/corpora/regressions-%p.profraw" \
  "$build/fuzz/case_file_replay" "$repo/corpus/regressions" >"$out/logs/replay-regressions.log" 2>&1 ||
  { echo "coverage: replaying corpus/regressions failed, see $out/logs/replay-regressions.log" >&2; exit 1; }

# --- reports ---------------------------------------------------------------------
objects=("$build/shardcheck")
for t in "${targets[@]}"; do objects+=(-object "$build/fuzz/${t}_replay"); done
# Our sources only, not the system headers (Eigen, fmt, nlohmann). File names may read
# <build>/../core/src/x.cc (ccache's base_dir makes compiled paths relative to the build
# folder); coverage_table.py normalises them.
ignore='^/usr/'
"$profdata" merge -sparse "$out"/raw/campaign/*.profraw -o "$out/campaign.profdata"
"$profdata" merge -sparse "$out"/raw/corpora/*.profraw -o "$out/corpora.profdata"
"$profdata" merge -sparse "$out/campaign.profdata" "$out/corpora.profdata" -o "$out/all.profdata"
# conversion.cc is built once per row that names it (conversion, reshard and their canaries)
# with different bodies under one name, so llvm-cov warns about "mismatched data" for those few functions; the
# warnings go to logs/llvm-cov-<set>.log.
for set in campaign corpora all; do
  args=(-instr-profile="$out/$set.profdata" -ignore-filename-regex="$ignore" "${objects[@]}")
  log=$out/logs/llvm-cov-$set.log
  "$cov" show -format=html -show-branches=count -output-dir="$out/$set/html" "${args[@]}" >/dev/null 2>>"$log"
  "$cov" report "${args[@]}" >"$out/$set/report.txt" 2>>"$log"
  "$cov" export -format=text -summary-only "${args[@]}" >"$out/$set/summary.json" 2>>"$log"
done

table_args=(--repo "$repo" --out "$out")
[[ -n $mutants ]] && table_args+=(--mutants "$mutants")
python3 "$repo/scripts/coverage_table.py" "${table_args[@]}"
echo "coverage: $out/summary.md; HTML: $out/{campaign,corpora,all}/html/index.html"
