#!/usr/bin/env python3
"""Soak: many concurrent streaming requests through cachekeeper for minutes (run by hand).

Starts the e2e mock upstream (tests/e2e/mock_upstream.py, in a child process) and cachekeeper in
front of it, then keeps ``--concurrency`` connections each sending streamed
``POST /anthropic/v1/messages`` requests back to back (keep-alive) for ``--minutes``. Every
response must be a 200 whose event stream ends with ``message_stop``; anything else (a status,
a broken stream, a refused connection) is an error. Every ``--every`` seconds it prints the
proxy's resident memory (``VmRSS``) and open file descriptors (``/proc/PID/fd``), so a leak
shows as a column that keeps growing after warm-up.

cachekeeper is started with this script's open-file limit (raised to the hard limit), or with
``--proxy-nofile N`` as its soft limit: 1,000 client connections plus their upstream
connections need about 2,000 descriptors, more than the usual default soft limit of 1024. The
first line printed gives the proxy's soft limit at start and a moment later.

    cargo build --release
    python3 benches/soak.py --bin target/release/cachekeeper --minutes 10

Linux only (reads /proc). Standard library only. Exit status 0 when there were no errors.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
MOCK = os.path.join(HERE, "..", "tests", "e2e", "mock_upstream.py")

# The mock, without its per-request log line and with its request list cleared as it goes
# (it keeps every request otherwise, which would grow the mock, not the proxy).
MOCK_MAIN = """
import sys, threading, time
sys.path.insert(0, {dir!r})
from mock_upstream import MockUpstream
mock = MockUpstream("127.0.0.1", {port}, sse_delay={delay})
mock.start()
print("ready", flush=True)
while True:
    time.sleep(5)
    mock.clear()
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def nofile_soft(pid: int) -> str:
    with open(f"/proc/{pid}/limits") as f:
        for line in f:
            if line.startswith("Max open files"):
                return line.split()[3]
    return "?"


class Stats:
    def __init__(self) -> None:
        self.ok = 0
        self.errors = 0
        self.kinds: dict[str, int] = {}

    def error(self, kind: str) -> None:
        self.errors += 1
        self.kinds[kind] = self.kinds.get(kind, 0) + 1


async def read_chunked(reader: asyncio.StreamReader) -> bytes:
    out = bytearray()
    while True:
        size_line = await reader.readline()
        if not size_line:
            raise ConnectionError("eof in chunked body")
        size = int(size_line.split(b";")[0].strip(), 16)
        if size == 0:
            await reader.readline()  # the final CRLF (no trailers expected)
            return bytes(out)
        out += await reader.readexactly(size)
        await reader.readexactly(2)


async def one_request(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, req: bytes) -> None:
    writer.write(req)
    await writer.drain()
    status = await reader.readline()
    if not status.startswith(b"HTTP/1.1 200"):
        raise ValueError("status " + status.decode(errors="replace").strip())
    length = None
    chunked = False
    while True:
        line = await reader.readline()
        if line in (b"\r\n", b""):
            break
        k, _, v = line.decode().partition(":")
        k = k.strip().lower()
        if k == "content-length":
            length = int(v.strip())
        elif k == "transfer-encoding" and "chunked" in v.lower():
            chunked = True
    if chunked:
        body = await read_chunked(reader)
    elif length is not None:
        body = await reader.readexactly(length)
    else:
        raise ValueError("no framing")
    if b"message_stop" not in body:
        raise ValueError("stream did not end with message_stop")


async def worker(port: int, req: bytes, end: float, stats: Stats) -> None:
    reader = writer = None
    while time.monotonic() < end:
        try:
            if writer is None:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
            await asyncio.wait_for(one_request(reader, writer, req), timeout=120)
            stats.ok += 1
        except (OSError, ValueError, asyncio.IncompleteReadError, asyncio.TimeoutError, ConnectionError) as e:
            stats.error(type(e).__name__ + (": " + str(e)[:60] if isinstance(e, ValueError) else ""))
            if writer is not None:
                writer.close()
            reader = writer = None
            await asyncio.sleep(0.5)
    if writer is not None:
        writer.close()


async def sampler(pid: int, started: float, end: float, every: float, stats: Stats, rows: list) -> None:
    print(f"{'t_s':>6} {'requests':>9} {'errors':>6} {'rss_mib':>8} {'fds':>6}", flush=True)
    while True:
        now = time.monotonic()
        row = (now - started, stats.ok, stats.errors, rss_mib(pid), open_fds(pid))
        rows.append(row)
        print(f"{row[0]:6.0f} {row[1]:9d} {row[2]:6d} {row[3]:8.1f} {row[4]:6d}", flush=True)
        if now >= end:
            return
        await asyncio.sleep(min(every, max(0.1, end - now)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=os.environ.get("CACHEKEEPER_BIN", "target/release/cachekeeper"))
    ap.add_argument("--concurrency", type=int, default=1000)
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--every", type=float, default=30.0, help="seconds between samples (default 30)")
    ap.add_argument("--sse-delay", type=float, default=0.05, help="the mock's pause between SSE events, s")
    ap.add_argument("--proxy-nofile", type=int, default=0, help="open-file soft limit cachekeeper starts with (0: the hard limit)")
    args = ap.parse_args()

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # this script and the mock

    tmp = tempfile.mkdtemp(prefix="ck-soak-")
    up_port = free_port()
    mock = subprocess.Popen(
        [sys.executable, "-c", MOCK_MAIN.format(dir=os.path.dirname(MOCK), port=up_port, delay=args.sse_delay)],
        stdout=subprocess.PIPE,
        stderr=open(os.path.join(tmp, "mock.log"), "w"),
    )
    assert mock.stdout is not None
    mock.stdout.readline()

    port = free_port()
    cfg = os.path.join(tmp, "proxy.toml")
    with open(cfg, "w") as f:
        f.write(
            f"""[server]
listen = "127.0.0.1:{port}"

[state]
path = "{tmp}/state.db"

[[routes]]
name = "anthropic"
prefix = "/anthropic"
upstream = "http://127.0.0.1:{up_port}"
"""
        )
    limit = min(args.proxy_nofile, hard) if args.proxy_nofile > 0 else hard
    proc = subprocess.Popen(
        [args.bin, "serve", "--config", cfg],
        stdout=open(os.path.join(tmp, "proxy.log"), "w"),
        stderr=subprocess.STDOUT,
        env=dict(os.environ, RUST_LOG=os.environ.get("RUST_LOG", "warn,cachekeeper::server=info")),
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard)),
    )
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        body = json.dumps(
            {
                "model": "claude-sonnet-4-5",
                "max_tokens": 64,
                "stream": True,
                "messages": [{"role": "user", "content": "soak"}],
            }
        ).encode()
        req = (
            b"POST /anthropic/v1/messages HTTP/1.1\r\nhost: soak\r\ncontent-type: application/json\r\n"
            b"x-api-key: sk-soak\r\nanthropic-version: 2023-06-01\r\n"
            + f"content-length: {len(body)}\r\n\r\n".encode()
            + body
        )
        print(
            f"cachekeeper pid {proc.pid}: open-file soft limit started at {limit}, now {nofile_soft(proc.pid)}; "
            f"{args.concurrency} concurrent streams for {args.minutes} min",
            flush=True,
        )
        stats = Stats()
        rows: list = []

        async def run() -> None:
            started = time.monotonic()
            end = started + args.minutes * 60
            workers = [asyncio.create_task(worker(port, req, end, stats)) for _ in range(args.concurrency)]
            await sampler(proc.pid, started, end, args.every, stats, rows)
            await asyncio.gather(*workers)

        asyncio.run(run())
        final = (rss_mib(proc.pid), open_fds(proc.pid))
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=40)
        except subprocess.TimeoutExpired:
            proc.kill()
        mock.kill()

    elapsed = rows[-1][0] if rows else 0.0
    warm = rows[min(1, len(rows) - 1)] if rows else (0, 0, 0, 0.0, 0)
    print(f"requests: {stats.ok} ok, {stats.errors} errors {stats.kinds or ''}; {stats.ok / max(elapsed, 1e-9):.0f} req/s")
    print(f"after warm-up (t={warm[0]:.0f} s): RSS {warm[3]:.1f} MiB, {warm[4]} fds; at the end: RSS {rows[-1][3]:.1f} MiB, {rows[-1][4]} fds")
    print(f"idle after the run: RSS {final[0]:.1f} MiB, {final[1]} fds")
    return 0 if stats.errors == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
