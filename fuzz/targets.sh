# Sourced by the fuzzing scripts: the rows of fuzz/targets.txt (see its header).
#   fuzz_targets [ROLE]        target names in file order, all or those of ROLE (ships, canary)
#   fuzz_column NAME COLUMN    one column of NAME's row: sources, defines, seeds, role,
#                              dict or options (- when the row has none); fails for an
#                              unknown target
#   fuzz_seed_dirs NAME        NAME's seed folders as absolute paths, space-separated
#   fuzz_flags NAME DIR        NAME's libFuzzer options file as flags (-key=value, one per
#                              line), a dictionary named there looked up in DIR; the scripts
#                              run a target as ClusterFuzzLite does, with these options
fuzz_repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
fuzz_targets_file=$fuzz_repo/fuzz/targets.txt

# The rows without comments or blank lines; a row without its seven columns is an error,
# not a target with a silently missing dictionary.
_fuzz_rows() {
  awk '/^[[:space:]]*(#|$)/ {next}
       NF != 7 {printf "%s:%d: expected 7 columns, got %d\n", FILENAME, FNR, NF > "/dev/stderr"; bad = 1; next}
       {print}
       END {exit bad}' "$fuzz_targets_file"
}

fuzz_targets() {
  _fuzz_rows | awk -v role="${1:-}" 'role == "" || $5 == role {print $1}'
}

fuzz_column() {
  local column
  case $2 in
    sources) column=2 ;; defines) column=3 ;; seeds) column=4 ;; role) column=5 ;;
    dict) column=6 ;; options) column=7 ;;
    *) echo "fuzz_column: unknown column '$2'" >&2; return 2 ;;
  esac
  _fuzz_rows | awk -v name="$1" -v column="$column" '$1 == name {print $column; found = 1} END {exit !found}' ||
    { echo "fuzz_column: no target '$1' in $fuzz_targets_file" >&2; return 1; }
}

fuzz_seed_dirs() {
  local seeds dir dirs out=()
  seeds=$(fuzz_column "$1" seeds) || return
  IFS=, read -r -a dirs <<<"$seeds"
  for dir in "${dirs[@]}"; do out+=("$fuzz_repo/$dir"); done
  echo "${out[*]}"
}

fuzz_flags() {
  local options key value
  options=$(fuzz_column "$1" options) || return
  [[ $options == - ]] && return 0
  while IFS='=' read -r key value; do
    key=${key//[[:space:]]/}
    value=${value#"${value%%[![:space:]]*}"}
    [[ -z $key || $key == \[* || $key == \#* ]] && continue
    [[ $key == dict ]] && value=$2/$value
    echo "-$key=$value"
  done <"$fuzz_repo/fuzz/$options"
}

# Checked once when sourced, so a malformed row stops the script before it builds or
# fuzzes anything.
_fuzz_rows >/dev/null || return 2
