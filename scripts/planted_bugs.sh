#!/usr/bin/env bash
# The oracle can fail (issue 30, item 8): applies each planted bug of tests/sim/planted/*.patch
# to src/ one at a time, runs the simulation over it (every test of `--test sim`: the seeded
# run, the named cases, the kept case files), records whether an invariant caught it,
# and reverts the patch (also when interrupted). Prints a Markdown table (FAULTS.md keeps the
# last one) and writes it to target/planted_bugs.md.
#
#   bash scripts/planted_bugs.sh                 # every patch, the simulation's CI budget
#   bash scripts/planted_bugs.sh 03 07           # the patches whose names start so
#
# Budget per bug (the simulation's own variables; defaults: its CI run):
#   SLOTCRON_SIM_SEEDS, SLOTCRON_SIM_JOBS, SLOTCRON_SIM_SECONDS, SLOTCRON_SIM_THREADS
# PLANTED_PROFILE: the cargo profile (default `sim`, the simulation's optimised build; `dev`:
# the build `cargo test` runs, with the dev budget);
# PLANTED_CARGO_FLAGS: more cargo flags (e.g. `--all-features`, to reuse a build made so).
set -euo pipefail
cd "$(dirname "$0")/.."

profile="${PLANTED_PROFILE:-sim}"
read -r -a flags <<< "${PLANTED_CARGO_FLAGS:-}"
export CARGO_PROFILE_DEV_DEBUG="${CARGO_PROFILE_DEV_DEBUG:-0}"

mkdir -p target
if ! git diff --quiet -- src; then
    echo "planted_bugs: src/ has uncommitted changes; commit or drop them first" >&2
    exit 2
fi

applied=""
revert() {
    if [[ -n "$applied" ]]; then
        git apply -R "$applied"
        applied=""
    fi
}
trap revert EXIT
trap 'revert; exit 130' INT TERM

# Runs the simulation (every test of `--test sim`) into log $1; its verdict in $verdict and $by.
simulate() {
    local log="$1"
    if ! cargo test --profile "$profile" "${flags[@]}" --test sim --no-run > "$log" 2>&1; then
        verdict="build failed"; by="(see $log)"
    elif cargo test --profile "$profile" "${flags[@]}" --test sim -- --nocapture >> "$log" 2>&1; then
        verdict="MISSED"; by="-"
    elif grep -q "VIOLATION [a-z_]" "$log"; then
        verdict="caught"
        by="$(grep -o 'VIOLATION [a-z_]*' "$log" | awk '{print $2}' | sort | uniq -c \
            | sort -rn | awk '{printf "%s%s (%d)", sep, $2, $1; sep=", "}')"
    else
        verdict="failed without a violation"; by="(see $log)"
    fi
}

# The control: without a planted bug the simulation must pass, or no verdict below means much.
simulate target/planted-none.log
if [[ "$verdict" != "MISSED" ]]; then
    echo "planted_bugs: the simulation fails without any planted bug ($verdict: $by)" >&2
    exit 1
fi
echo "planted_bugs: control (no planted bug): passes"

patches=()
for p in tests/sim/planted/*.patch; do
    name="$(basename "$p" .patch)"
    if [[ $# -eq 0 ]] || printf '%s\n' "$@" | grep -q -e "^${name:0:2}" -e "^$name"; then
        patches+=("$p")
    fi
done

mkdir -p target
table="target/planted_bugs.md"
{
    echo "| planted bug | caught | by | wall s |"
    echo "|---|---|---|---|"
} > "$table"

caught=0
for p in "${patches[@]}"; do
    name="$(basename "$p" .patch)"
    git apply "$p"
    applied="$p"
    started=$(date +%s)
    simulate "target/planted-$name.log"
    [[ "$verdict" == "caught" ]] && caught=$((caught + 1))
    revert
    line="| $name | $verdict | $by | $(( $(date +%s) - started )) |"
    echo "$line" >> "$table"
    echo "planted_bugs: $line"
done

echo
cat "$table"
echo
echo "planted_bugs: caught=$caught of ${#patches[@]} (budget: seeds=${SLOTCRON_SIM_SEEDS:-default} jobs=${SLOTCRON_SIM_JOBS:-default} seconds=${SLOTCRON_SIM_SECONDS:-default}, profile $profile)"
