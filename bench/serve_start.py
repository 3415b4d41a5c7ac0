#!/usr/bin/env python3
"""Start-up of `docqa serve`, timed for several binaries in turn: each start gets a fresh data directory
(SQLite, the CPU default) and is timed from the process's start to its `docqa listening on` line, beside
the `models loaded in` figure it prints. The binaries alternate, so a change in the machine's load falls on
all of them alike; the first binary given is the anchor.

    python3 bench/serve_start.py --runs 5 /tmp/docqa-before target/release/docqa

Only the standard library. The models directory is the default one (fetched by an earlier start).
"""

import argparse
import os
import re
import statistics
import subprocess
import tempfile
import time

ADMIN_KEY = "dq_bench_admin_key_0123456789abcdef"


def one_start(binary):
    """Seconds to `listening`, and the `models loaded in` seconds the server printed."""
    with tempfile.TemporaryDirectory() as data_dir:
        started = time.monotonic()
        server = subprocess.Popen(
            [binary, "serve", "--data-dir", data_dir, "--bind", "127.0.0.1:0", "--local-mode", "off"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=dict(os.environ, DOCQA_ADMIN_KEY=ADMIN_KEY),
        )
        loaded = None
        try:
            for line in server.stdout:
                found = re.search(r"models loaded in ([0-9.]+) s", line)
                if found:
                    loaded = float(found.group(1))
                if line.startswith("docqa listening on"):
                    return time.monotonic() - started, loaded
            raise SystemExit(f"{binary} exited before listening")
        finally:
            server.kill()
            server.wait()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="starts per binary")
    parser.add_argument("binaries", nargs="+", help="docqa binaries; the first is the anchor")
    args = parser.parse_args()
    with open("/proc/loadavg") as f:
        print(f"load average before: {f.read().split()[:3]}")
    times = {b: [] for b in args.binaries}
    for _ in range(args.runs):
        for binary in args.binaries:
            times[binary].append(one_start(binary))
    with open("/proc/loadavg") as f:
        print(f"load average after: {f.read().split()[:3]}")
    anchor = statistics.median(t for t, _ in times[args.binaries[0]])
    for binary, runs in times.items():
        to_listening = sorted(t for t, _ in runs)
        loaded = sorted(m for _, m in runs if m is not None)
        median = statistics.median(to_listening)
        print(
            f"{binary}: to listening {' '.join(f'{t:.2f}' for t in to_listening)} s "
            f"(median {median:.2f}, {median / anchor:.2f}x the anchor); "
            f"models loaded {' '.join(f'{m:.1f}' for m in loaded)} s"
        )


if __name__ == "__main__":
    main()
