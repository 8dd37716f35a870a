#!/usr/bin/env bash
# The 09:00 burst (BENCHMARKS.md, "09:00 burst"): every job due in the same second, raced by
# replica processes over 3 redis-server nodes, delivered to a local receiver. Prints the table.
#
#   scripts/bench_burst.sh            # release build: 2000 x 9 and 5000 x 1, without and with jitter
#   scripts/bench_burst.sh --debug    # the debug build (no release build to wait for)
#   SLOTCRON_BURST=500x3 SLOTCRON_BURST_JITTER=none scripts/bench_burst.sh --debug
#
# SLOTCRON_BURST: sizes, JOBSxREPLICAS, comma-separated (default 2000x9,5000x1).
# SLOTCRON_BURST_JITTER: the jobs' `jitter`, comma-separated, `none` for no key (default none,60s).
# SLOTCRON_BURST_LEAD: seconds from the replicas' spawn to the burst's instant (default 60).
# SLOTCRON_BURST_BINARY: the replica binary (default: the one cargo builds for the profile).
# SLOTCRON_BURST_KEEP_LOGS=DIR: keeps each replica's log lines in DIR.
# About 2 minutes a burst without jitter, 3 with 60 s of it, after the build.
set -euo pipefail
cd "$(dirname "$0")/.."
profile=(--release)
if [[ "${1:-}" == "--debug" ]]; then
    profile=()
    shift
fi
export SLOTCRON_BURST="${SLOTCRON_BURST:-2000x9,5000x1}"
export SLOTCRON_BURST_JITTER="${SLOTCRON_BURST_JITTER:-none,60s}"
echo "bench_burst: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg), ${profile[*]:-debug} build" >&2
exec cargo test "${profile[@]}" --all-features --test test_burst burst_benchmark -- --ignored --nocapture "$@"
