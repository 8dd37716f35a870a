#!/usr/bin/env bash
# The README's first steps, as a new user takes them, timed (issue 33's "from reading the README
# to a reminder firing at a local receiver"): a fresh clone, `cargo run -- run` until the shipped
# heartbeat job has run a slot, the README's WeCom reminder saved as standup.toml, `check --next`,
# the stand-in robot and `trigger`, until the robot prints the reminder.
#
#   bash scripts/new_user_path.sh [REPO]      (REPO: a path or URL to clone; default: this checkout)
#
# Every command is the README's, run from the clone; the TOML is cut from the README itself, so
# the script follows the README rather than a copy of it. Reading time is not measured (people
# differ); BENCHMARKS.md gives what this script printed and on what machine. Needs Rust and
# python3, nothing else: no Redis (the README's first steps are standalone).
set -euo pipefail

repo="${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
work="$(mktemp -d)"
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT

start=$(date +%s)
step() { echo "new-user: $(( $(date +%s) - start )) s: $*"; }

# Waits (up to $3 seconds) for the file $1 to contain the text $2; the build runs first, so the
# limit is a build's time on a slow machine, not a measure.
wait_for() {
    local file="$1" text="$2" limit="$3" waited=0
    until grep -q -- "$text" "$file" 2>/dev/null; do
        sleep 1
        waited=$((waited + 1))
        if [ "$waited" -ge "$limit" ]; then
            echo "new-user: no '$text' in $file after ${limit}s:" >&2
            tail -n 20 "$file" >&2
            exit 1
        fi
    done
}

git clone --quiet "$repo" "$work/slotcron"
cd "$work/slotcron"
step "cloned"

# "Try it in 30 seconds": cargo run -- run, until the heartbeat has run a slot.
cargo run -- run >"$work/run.log" 2>&1 &
pids+=($!)
wait_for "$work/run.log" "outcome=done" 1800
kill "${pids[0]}"
step "cargo run -- run: built, and the heartbeat job ran a slot"

# "A WeCom reminder on Chinese workdays": the README's TOML block, saved as standup.toml.
python3 - <<'EOF'
import re
readme = open("README.md", encoding="utf-8").read()
section = readme.split("## A WeCom reminder on Chinese workdays", 1)[1]
block = re.search(r"```toml\n(.*?)```", section, re.S).group(1)
open("standup.toml", "w", encoding="utf-8").write(block)
EOF
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
python3 scripts/robot_receiver.py --port "$port" >"$work/robot.log" 2>&1 &
pids+=($!)
export WECOM_WEBHOOK="http://127.0.0.1:$port/cgi-bin/webhook/send?key=demo"
cargo run -- check --config standup.toml --next 6 >"$work/check.log" 2>&1
grep -q "schedule: 09:30 on workdays" "$work/check.log"
step "standup.toml saved; check --next shows the workdays"

cargo run -- trigger --config standup.toml standup
wait_for "$work/robot.log" "Stand-up in 5 minutes" 60
step "trigger: the robot printed the reminder"
grep "Stand-up in 5 minutes" "$work/robot.log"
