#!/usr/bin/env python3
"""Peak memory of cachekeeper under concurrent large request bodies (run by hand, not in CI).

Starts a local upstream (reads and discards each body, answers a small Anthropic-shaped JSON),
starts cachekeeper in front of it with ``[server] max_buffered_bytes`` set to ``--budget``,
sends ``--bodies`` concurrent POST /v1/messages of ``--size`` bytes each (one text block, so
every body is read and parsed by the passes), and reports the proxy's peak resident memory
(``VmHWM`` from ``/proc/PID/status``, Linux only) against the target
``budget + 2 x size + 50 MB`` from issue 12.

    cargo build --release
    python3 benches/memory.py --bin target/release/cachekeeper            # 50 x 20 MB, 200 MB budget
    python3 benches/memory.py --bin target/release/cachekeeper --budget 1073741824   # the default budget

Standard library only. Exit status 0 when every request got a 200 and the peak is under the
target, 1 otherwise.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MB = 1_000_000
MIB = 1024 * 1024

REPLY = json.dumps(
    {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-x",
        "content": [{"type": "text", "text": "ok"}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }
).encode()


class Upstream(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:  # quiet
        pass

    def do_POST(self) -> None:  # noqa: N802
        left = int(self.headers.get("content-length", "0"))
        while left > 0:
            got = self.rfile.read(min(left, 1 << 20))
            if not got:
                break
            left -= len(got)
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(REPLY)))
        self.end_headers()
        self.wfile.write(REPLY)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def status_kib(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def wait_healthy(port: int, proc: subprocess.Popen, timeout: float = 30.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise SystemExit(f"cachekeeper exited with {proc.returncode}")
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
            c.request("GET", "/healthz")
            if c.getresponse().status == 200:
                return
        except OSError:
            time.sleep(0.1)
    raise SystemExit("cachekeeper did not become healthy")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=os.environ.get("CACHEKEEPER_BIN", "target/release/cachekeeper"))
    ap.add_argument("--bodies", type=int, default=50, help="concurrent requests (default 50)")
    ap.add_argument("--size", type=int, default=20 * MB, help="body size, bytes (default 20 MB)")
    ap.add_argument("--budget", type=int, default=200 * MB, help="max_buffered_bytes (default 200 MB)")
    ap.add_argument("--wait-ms", type=int, default=120_000, help="buffer_wait_ms (default 120000)")
    args = ap.parse_args()

    up_port = free_port()
    upstream = ThreadingHTTPServer(("127.0.0.1", up_port), Upstream)
    upstream.daemon_threads = True
    threading.Thread(target=upstream.serve_forever, daemon=True).start()

    tmp = tempfile.mkdtemp(prefix="ck-memory-")
    port = free_port()
    cfg = os.path.join(tmp, "proxy.toml")
    max_rewrite = min(64 * MIB, args.budget)
    with open(cfg, "w") as f:
        f.write(
            f"""[server]
listen = "127.0.0.1:{port}"
max_rewrite_bytes = {max_rewrite}
max_buffered_bytes = {args.budget}
buffer_wait_ms = {args.wait_ms}

[state]
path = "{tmp}/state.db"

[[routes]]
name = "anthropic"
prefix = "/anthropic"
upstream = "http://127.0.0.1:{up_port}"
"""
        )
    env = dict(os.environ, RUST_LOG=os.environ.get("RUST_LOG", "warn"))
    log = open(os.path.join(tmp, "proxy.log"), "w")
    proc = subprocess.Popen([args.bin, "serve", "--config", cfg], stdout=log, stderr=log, env=env)
    try:
        wait_healthy(port, proc)
        idle_kib = status_kib(proc.pid, "VmRSS")
        head = b'{"model":"claude-x","max_tokens":1,"messages":[{"role":"user","content":"'
        tail = b'"}]}'
        body = head + b"a" * (args.size - len(head) - len(tail)) + tail
        results: list[tuple[int, str]] = []
        lock = threading.Lock()

        def one() -> None:
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
                c.request(
                    "POST",
                    "/anthropic/v1/messages",
                    body=body,
                    headers={"content-type": "application/json", "x-api-key": "sk-bench"},
                )
                r = c.getresponse()
                r.read()
                fate = r.getheader("x-cachekeeper-rewrites", "")
                out = (r.status, fate)
            except OSError as e:
                out = (0, str(e))
            with lock:
                results.append(out)

        samples: list[int] = []
        done = threading.Event()

        def sample() -> None:
            while not done.is_set():
                samples.append(status_kib(proc.pid, "VmRSS"))
                time.sleep(0.05)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        started = time.monotonic()
        threads = [threading.Thread(target=one) for _ in range(args.bodies)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.monotonic() - started
        done.set()
        sampler.join()
        peak_kib = status_kib(proc.pid, "VmHWM")
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        upstream.shutdown()

    ok = sum(1 for s, _ in results if s == 200)
    passed = sum(1 for s, f in results if s == 200 and "body=" in f)
    over = sum(1 for _, f in results if f == "over_budget")
    peak = peak_kib * 1024
    target = args.budget + 2 * args.size + 50 * MB
    print(f"bodies: {args.bodies} x {args.size / MB:.1f} MB, max_buffered_bytes {args.budget / MB:.0f} MB, buffer_wait_ms {args.wait_ms}")
    print(f"responses: {ok}/{args.bodies} 200 ({passed} read by the passes, {over} over_budget), {elapsed:.1f} s")
    print(f"RSS idle {idle_kib / 1024:.0f} MiB, peak {peak / MIB:.0f} MiB ({peak / MB:.0f} MB); target < {target / MB:.0f} MB")
    good = ok == args.bodies and peak < target
    print("PASS" if good else "FAIL")
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
