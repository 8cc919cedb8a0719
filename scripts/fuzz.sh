#!/usr/bin/env bash
# Runs every libFuzzer harness built in BUILD_DIR for FUZZ_SECONDS each, on its
# checked-in corpus (tests/fuzz/corpus/<name>/) with its dictionary when there
# is one, then merges what it found that adds coverage back into that corpus.
# Prints each harness's executions and new corpus entries; exits non-zero if
# any harness crashed, leaving the input in BUILD_DIR/crashes/<name>/.
#   scripts/fuzz.sh BUILD_DIR [SECONDS]
# FUZZ_ONLY="fuzz_a fuzz_b" runs those harnesses alone (two shells with halves of the list use
# two cores).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:?usage: scripts/fuzz.sh BUILD_DIR [SECONDS]}
seconds=${2:-60}
fuzz=tests/fuzz
failed=()
summary=()

for corpus in "$fuzz"/corpus/*/; do
  name=$(basename "$corpus")
  [[ -z ${FUZZ_ONLY:-} || " $FUZZ_ONLY " == *" $name "* ]] || continue
  bin=$build/tests/fuzz/$name
  [[ -x $bin ]] || { echo "fuzz: $bin is not built" >&2; exit 1; }
  scratch=$build/fuzz-corpus/$name crashes=$build/crashes/$name/
  mkdir -p "$scratch" "$crashes"
  dict=()
  [[ -f $fuzz/$name.dict ]] && dict=(-dict="$fuzz/$name.dict")
  before=$(find "$corpus" -type f | wc -l)
  echo "== $name: ${seconds}s"
  log=$build/fuzz-$name.log
  # New inputs land in the scratch folder; the checked-in corpus is read only.
  if "$bin" "$scratch" "$corpus" "${dict[@]}" -max_total_time="$seconds" -max_len=8192 -timeout=10 \
    -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$crashes" >"$log" 2>&1; then
    status=ok
  else
    status="CRASHED (see $log and $crashes)"
    failed+=("$name")
  fi
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  # Only what adds edge coverage (not hit counts) joins the checked-in corpus, so it stays small.
  "$bin" -merge=1 -use_counters=0 "${dict[@]}" -max_len=8192 "$corpus" "$scratch" >"$build/fuzz-$name.merge.log" 2>&1 || true
  after=$(find "$corpus" -type f | wc -l)
  summary+=("$(printf '%-22s %5ss %12s execs %4d new corpus entries (%d now)  %s' "$name" "$seconds" \
    "${execs:-?}" $((after - before)) "$after" "$status")")
done

echo
printf '%s\n' "${summary[@]}"
if ((${#failed[@]} > 0)); then
  echo "fuzz: crashed: ${failed[*]}" >&2
  exit 1
fi
