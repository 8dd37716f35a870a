#!/usr/bin/env python3
"""What the `otel` feature costs while the OTLP endpoint is unset (BENCHMARKS.md, "Traces' cost").

Runs one replica of each of two `slotcron` binaries, the same source built with and without the
feature (`cargo build --release --no-default-features --features cli` and `cargo build --release`), in turn,
each for `--seconds` with `--jobs` http jobs every second against a local receiver and one
local `redis-server`; no `[telemetry]` section. Per run: each slot's `lateness_ms` (from the
`done` log lines) and the replica's CPU time (utime + stime from /proc, from its
`slotcron started` line to the end) per slot run. The binaries alternate, `--rounds` times each,
so a change in the machine's load falls on both.

    python3 scripts/bench_otel_cost.py --without target/nootel/slotcron --with target/otel/slotcron
"""

import argparse
import datetime
import http.server
import json
import os
import shutil
import socket
import statistics
import subprocess
import tempfile
import threading
import time

CLK_TCK = os.sysconf("SC_CLK_TCK")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Receiver(http.server.BaseHTTPRequestHandler):
    """Answers every POST `200 {}` at once (the http action's default success)."""

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        try:
            self.wfile.write(b"{}")
        except (BrokenPipeError, ConnectionResetError):
            pass  # a replica stopped at the end of its run, its request in flight

    def log_message(self, *args):
        pass


def config(redis_port, receiver_port, prefix, jobs):
    lines = [
        "[scheduler]",
        f'key_prefix = "{prefix}"',
        "[redis]",
        f'nodes = ["redis://127.0.0.1:{redis_port}"]',
    ]
    for j in range(jobs):
        lines += [
            "[[job]]",
            f'name = "j{j}"',
            'schedule = "* * * * * *"',
            "overlap = \"allow\"",
            "[job.action]",
            'type = "http"',
            f'url = "http://127.0.0.1:{receiver_port}/hook"',
        ]
    return "\n".join(lines) + "\n"


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def run_once(binary, path, seconds):
    """One replica for `seconds` after its start line: the lateness of each slot of that window
    done, and its CPU time over the window per such slot (lines still in the pipe at the end
    are read after it, so a reader that lags undercounts nothing)."""
    proc = subprocess.Popen(
        [binary, "run", "--log-format", "json", "--replica-id", "bench", "--config", path],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "RUST_LOG": "info"},
    )
    for line in proc.stdout:
        if '"slotcron started"' in line:
            break
    cpu0, start = cpu_seconds(proc.pid), datetime.datetime.now(datetime.timezone.utc)
    lines = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    time.sleep(seconds)
    cpu, end = cpu_seconds(proc.pid) - cpu0, datetime.datetime.now(datetime.timezone.utc)
    proc.terminate()
    proc.wait(timeout=30)
    reader.join(timeout=30)
    lateness = []
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if event.get("outcome") != "done" or "lateness_ms" not in event:
            continue
        slot = datetime.datetime.fromisoformat(event["slot"].replace("Z", "+00:00"))
        if start <= slot < end:
            lateness.append(event["lateness_ms"])
    return lateness, cpu


def quantile(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--without", required=True, help="slotcron built --no-default-features --features cli")
    parser.add_argument("--with", dest="with_", required=True, help="slotcron built with otel")
    parser.add_argument("--jobs", type=int, default=50)
    parser.add_argument("--seconds", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()

    redis_port, receiver_port = free_port(), free_port()
    workdir = tempfile.mkdtemp(prefix="otel-cost-")
    redis = subprocess.Popen(
        [shutil.which("redis-server") or "redis-server", "--port", str(redis_port),
         "--save", "", "--appendonly", "no", "--dir", workdir],
        stdout=subprocess.DEVNULL,
    )
    server = http.server.ThreadingHTTPServer(("127.0.0.1", receiver_port), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    time.sleep(0.5)
    results = {"without": [], "with": []}
    try:
        for r in range(args.rounds):
            for name, binary in (("without", args.without), ("with", args.with_)):
                path = os.path.join(workdir, f"{name}-{r}.toml")
                with open(path, "w") as f:
                    f.write(config(redis_port, receiver_port, f"otelcost-{name}-{r}", args.jobs))
                lateness, cpu = run_once(binary, path, args.seconds)
                per_slot_us = cpu / max(1, len(lateness)) * 1e6
                results[name].append((lateness, cpu, per_slot_us))
                print(f"round {r} {name:>7}: {len(lateness)} slots, lateness p50 "
                      f"{quantile(lateness, 0.5)} ms p99 {quantile(lateness, 0.99)} ms, "
                      f"CPU {cpu:.2f} s = {per_slot_us:.0f} µs per slot", flush=True)
    finally:
        server.shutdown()
        redis.terminate()
        redis.wait(timeout=10)
        shutil.rmtree(workdir, ignore_errors=True)
    summary = {}
    for name, runs in results.items():
        lateness = [x for run in runs for x in run[0]]
        summary[name] = (
            len(lateness),
            statistics.median(lateness),
            quantile(lateness, 0.99),
            sum(run[1] for run in runs) / len(lateness) * 1e6,
        )
        n, p50, p99, cpu = summary[name]
        print(f"{name:>7}: {n} slots, lateness p50 {p50} ms, p99 {p99} ms, CPU {cpu:.0f} µs/slot")
    (_, p50a, p99a, cpua), (_, p50b, p99b, cpub) = summary["without"], summary["with"]
    print(f"ratio with/without: lateness p50 {p50b / max(p50a, 1e-9):.2f}, "
          f"p99 {p99b / max(p99a, 1e-9):.2f}, CPU per slot {cpub / cpua:.2f}")


if __name__ == "__main__":
    main()
