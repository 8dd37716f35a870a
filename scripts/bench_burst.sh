#!/usr/bin/env bash
# The 09:00 burst (BENCHMARKS.md, "09:00 burst"): every job due in the same second, raced by
# replica processes over 3 redis-server nodes, delivered to a local receiver. Prints the table.
#
#   scripts/bench_burst.sh            # release replicas: 2000 x 9 and 5000 x 1, without and with jitter
#   scripts/bench_burst.sh --debug    # debug replicas (no release build to wait for)
#   SLOTCRON_BURST=500x3 SLOTCRON_BURST_JITTER=none scripts/bench_burst.sh --debug
#
# SLOTCRON_BURST: sizes, JOBSxREPLICAS, comma-separated (default 2000x9,5000x1).
# SLOTCRON_BURST_JITTER: the jobs' `jitter`, comma-separated, `none` for no key (default none,60s).
# SLOTCRON_BURST_LEAD: seconds from the replicas' spawn to the burst's instant (default 40).
# SLOTCRON_BURST_BINARY: the replica binary (default: target/release/slotcron, or the debug one).
# SLOTCRON_BURST_KEEP_LOGS=DIR: keeps each replica's log lines in DIR/JOBSxREPLICAS-JITTER/.
# About 2 minutes a burst without jitter, 3 with 60 s of it, after the build.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_PROFILE_DEV_DEBUG="${CARGO_PROFILE_DEV_DEBUG:-0}"
build=release
if [[ "${1:-}" == "--debug" ]]; then
    build=debug
    shift
fi
# The replicas are the release binary (the shipping profile: fat LTO, one codegen unit); the
# harness (nodes, receiver, sampler) is the test binary of the dev profile, so no release build
# of the test dependencies is needed.
if [[ "$build" == release ]]; then
    cargo build --release --bin slotcron
    export SLOTCRON_BURST_BINARY="${SLOTCRON_BURST_BINARY:-${CARGO_TARGET_DIR:-target}/release/slotcron}"
fi
export SLOTCRON_BURST="${SLOTCRON_BURST:-2000x9,5000x1}"
export SLOTCRON_BURST_JITTER="${SLOTCRON_BURST_JITTER:-none,60s}"
echo "bench_burst: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg), $build replicas" >&2
exec cargo test --all-features --test it burst::burst_benchmark -- --ignored --nocapture "$@"
