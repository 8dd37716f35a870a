#!/usr/bin/env python3
"""Soak test: a fleet of slotcron replicas against 3 Redis nodes, under random faults.

Runs R replicas x J jobs firing every second for DURATION seconds, all posting to one local
receiver that counts deliveries by Idempotency-Key, while a chaos loop SIGKILLs and restarts a
random Redis node (at most one down at a time, sometimes restarted empty) and a random replica
(at most two down at a time). B more replicas (--broken-egress, default 2) have a broken egress:
their HTTP_PROXY is a closed loopback port, so every slot they win must be handed off to a
healthy replica. Prints slots expected, run, duplicated and missed.

    cargo build --release
    python3 scripts/soak.py --duration 600            # 10 minutes, 5 replicas x 50 jobs

Not part of the test suite (it takes minutes); see the book's Testing chapter, "The soak", for the latest result.
Only loopback addresses are used.
"""

import argparse
import collections
import http.server
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Receiver(http.server.ThreadingHTTPServer):
    daemon_threads = True
    # Every job fires at the same instant: the default backlog of 5 would drop SYNs.
    request_queue_size = 4096

    def __init__(self):
        super().__init__(("127.0.0.1", free_port()), Handler)
        self.lock = threading.Lock()
        self.counts = collections.Counter()
        self.replicas = collections.Counter()

    def handle_error(self, request, client_address):
        # A replica SIGKILLed mid-request leaves a broken pipe: expected here, not a failure.
        if isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            return
        super().handle_error(request, client_address)


class Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        length = int(self.headers.get("Content-Length", 0))
        self.rfile.read(length)
        key = self.headers.get("Idempotency-Key", "")
        with self.server.lock:
            self.server.counts[key] += 1
            self.server.replicas[self.headers.get("X-Slotcron-Replica", "")] += 1
        body = b'{"errcode":0,"errmsg":"ok"}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class Node:
    def __init__(self, workdir, i):
        self.port = free_port()
        self.dir = os.path.join(workdir, f"redis-{i}")
        os.makedirs(self.dir)
        self.proc = None
        self.started = 0.0
        self.start()

    def start(self):
        self.started = time.time()
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", self.dir],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def kill(self):
        self.proc.kill()
        self.proc.wait()

    def up(self):
        return self.proc.poll() is None


class Replica:
    def __init__(self, binary, config, name, logdir, env=None):
        self.binary, self.config, self.name = binary, config, name
        self.env = env
        self.started = 0.0
        self.log = open(os.path.join(logdir, f"{name}.log"), "ab")
        self.proc = None
        self.start()

    def start(self):
        self.proc = subprocess.Popen(
            [self.binary, "run", "--config", self.config, "--replica-id", self.name, "--log-format", "json"],
            stdout=self.log, stderr=self.log, env=self.env)

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def up(self):
        return self.proc.poll() is None


def write_config(path, nodes, receiver_port, jobs, prefix, candidates):
    lines = [
        "[scheduler]", f'key_prefix = "{prefix}"', 'max_clock_skew = "2s"',
        f"candidates = {candidates}", "",
        "[redis]", "nodes = [" + ", ".join(f'"redis://127.0.0.1:{n.port}"' for n in nodes) + "]", "",
    ]
    for j in range(jobs):
        lines += [
            "[[job]]", f'name = "soak-{j:03d}"', 'schedule = "* * * * * *"', 'timeout = "5s"',
            'overlap = "allow"',
            "[job.action]", 'type = "http"', f'url = "http://127.0.0.1:{receiver_port}/hook"',
            'body = "{{ job }} {{ slot }}"', "",
        ]
    with open(path, "w") as f:
        f.write("\n".join(lines))


def count_handoffs(logdir):
    """Slots handed off and taken over, from the replicas' JSON logs."""
    handed, taken = 0, 0
    for name in os.listdir(logdir):
        if not name.endswith(".log"):
            continue
        with open(os.path.join(logdir, name), errors="replace") as f:
            for line in f:
                if '"handed_off"' in line:
                    handed += 1
                elif '"trigger":"handoff"' in line and '"outcome":"done"' in line:
                    taken += 1
    return {"handed_off": handed, "taken_over_and_done": taken}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=int, default=600, help="seconds of chaos (default 600)")
    parser.add_argument("--replicas", type=int, default=5)
    parser.add_argument("--jobs", type=int, default=50)
    parser.add_argument("--broken-egress", type=int, default=2,
                        help="extra replicas whose HTTP proxy is a closed port (default 2)")
    parser.add_argument("--fault-every", type=float, default=7.0, help="mean seconds between faults")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--candidates", default="2",
                        help='[scheduler] candidates: a count or \'"all"\' (default 2)')
    parser.add_argument("--binary", default=os.path.join(ROOT, "target", "release", "slotcron"))
    args = parser.parse_args()
    rng = random.Random(args.seed)
    if not os.path.exists(args.binary):
        sys.exit(f"{args.binary} not found: run `cargo build --release` first")

    workdir = tempfile.mkdtemp(prefix="slotcron-soak-")
    receiver = Receiver()
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    nodes = [Node(workdir, i) for i in range(3)]
    time.sleep(0.5)
    config = os.path.join(workdir, "jobs.toml")
    write_config(config, nodes, receiver.server_address[1], args.jobs, f"soak{os.getpid()}",
                 args.candidates)
    replicas = [Replica(args.binary, config, f"replica-{i}", workdir) for i in range(args.replicas)]
    dead_proxy = f"http://127.0.0.1:{free_port()}"
    broken_env = dict(os.environ, HTTP_PROXY=dead_proxy, http_proxy=dead_proxy, NO_PROXY="", no_proxy="")
    replicas += [Replica(args.binary, config, f"broken-{i}", workdir, broken_env)
                 for i in range(args.broken_egress)]
    fleet = len(replicas)
    time.sleep(3)  # every replica up and connected

    start = int(time.time()) + 1
    end = start + args.duration
    faults = collections.Counter()
    down_since = {}
    print(f"soak: {args.replicas} replicas (+{args.broken_egress} with broken egress) x {args.jobs} jobs/s "
          f"for {args.duration}s, workdir {workdir}", flush=True)
    while time.time() < end:
        time.sleep(rng.expovariate(1.0 / args.fault_every))
        now = time.time()
        # Bring back what has been down for a few seconds.
        for thing, since in list(down_since.items()):
            if now - since > rng.uniform(2, 6):
                thing.start()
                del down_since[thing]
                faults["restart"] += 1
        choice = rng.random()
        # A node counts as up once it has served for a while: one node down at a time.
        up_nodes = [n for n in nodes if n.up() and now - n.started > 5]
        up_replicas = [r for r in replicas if r.up()]
        if choice < 0.45 and len(up_nodes) == 3:
            node = rng.choice(up_nodes)
            node.kill()
            down_since[node] = now
            faults["node SIGKILL (restarted empty)"] += 1
        elif len(up_replicas) > fleet - 2:
            replica = rng.choice(up_replicas)
            replica.kill()
            down_since[replica] = now
            faults["replica SIGKILL"] += 1
    for thing in list(down_since):
        thing.start()
    time.sleep(4)  # the last slots finish

    for r in replicas:
        r.proc.send_signal(signal.SIGTERM)
    for r in replicas:
        try:
            r.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            r.kill()
    for n in nodes:
        n.kill()
    receiver.shutdown()

    expected = set()
    for second in range(start, end):
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(second))
        for j in range(args.jobs):
            expected.add(f"soak-{j:03d}/{stamp}")
    counts = receiver.counts
    run = sum(1 for k in expected if counts.get(k, 0) >= 1)
    duplicated = sum(1 for k in expected if counts.get(k, 0) > 1)
    missed = len(expected) - run
    result = {
        "duration_s": args.duration, "replicas": args.replicas, "broken_egress": args.broken_egress,
        "jobs": args.jobs, "candidates": args.candidates,
        "faults": dict(faults), "slots_expected": len(expected), "slots_run": run,
        "slots_duplicated": duplicated, "slots_missed": missed,
        "missed_pct": round(100.0 * missed / max(1, len(expected)), 4),
        # The missed slots themselves, to look up in the replicas' logs in the workdir.
        "missed_slots": sorted(k for k in expected if counts.get(k, 0) == 0)[:20],
        "sends_by_replica": dict(receiver.replicas),
        "handoffs": count_handoffs(workdir),
    }
    print(json.dumps(result, indent=2))
    return 1 if duplicated else 0


if __name__ == "__main__":
    sys.exit(main())
