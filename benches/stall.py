#!/usr/bin/env python3
"""Stalls: does the proxy's own bookkeeping stall requests when what it writes to stops? (issue 27)

Two fault experiments, run by hand (not in CI), each against a cachekeeper binary and a mock
upstream this script starts itself (a stdlib HTTP server in a child process, answering every
POST with a fixed Anthropic Messages JSON that carries usage, in one write, TCP_NODELAY):

redis  Debian's `redis-server` on a free loopback port without persistence, the proxy on
       `[state] backend = "redis"`. Four client threads send 126-byte Anthropic POSTs
       (`x-api-key` set, one key per thread, keep-alive) and one thread probes `GET /healthz`
       every 10 ms. Phases: `/healthz` alone (its no-load figure), then --seconds with Redis
       up, then --seconds with redis-server stopped (`kill -STOP`); then `kill -CONT`.
       Prints POST p50 / p99 and `/healthz` p50 / p99 per phase.
       Target (issue 27): with Redis stopped, POST p50 within 5 ms of the Redis-up figure and
       `/healthz` p99 within 2x its no-load figure.

log    The proxy (SQLite state in a temporary directory) with stderr to a pipe that a reader
       thread in this script drains, and can pause. The same clients; requests/s for
       --normal-seconds, then the reader paused for --pause-seconds while requests completed
       per second are counted, then the reader resumes. Prints the rate ratio (paused / normal)
       and, after resuming, `cachekeeper_log_lines_dropped_total` from the proxy's
       `GET /metrics` ("absent" when the binary has no such counter).
       Target (issue 27): >= 0.8x the normal rate while the reader is stopped, dropped lines
       counted.

Every client request has a short timeout (--timeout, 5 s): a hung proxy shows as timeouts,
counted and printed, never as a hung script. Every process started is stopped at the end.

Usage:
    python3 benches/stall.py [--bin target/release/cachekeeper] [--only redis|log]
        [--seconds 10] [--normal-seconds 10] [--pause-seconds 30] [--threads 4] [--timeout 5]

Linux only (signals, pipes). Standard library only.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

REPLY = json.dumps(
    {
        "id": "msg_01",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": [{"type": "text", "text": "Hello!"}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 12, "output_tokens": 3},
    },
    separators=(",", ":"),
).encode()


def body_of(size: int) -> bytes:
    """An Anthropic Messages request of exactly `size` bytes (the user text padded)."""
    base = {"model": "claude-sonnet-4-5", "max_tokens": 16, "messages": [{"role": "user", "content": ""}]}
    pad = size - len(json.dumps(base, separators=(",", ":")))
    base["messages"][0]["content"] = "x" * pad
    out = json.dumps(base, separators=(",", ":")).encode()
    assert len(out) == size, len(out)
    return out


BODY = body_of(126)

# --- the mock upstream (run as a child process: `stall.py --serve-mock PORT`) ---


class Upstream(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, *args: object) -> None:  # quiet
        pass

    def do_POST(self) -> None:  # noqa: N802
        left = int(self.headers.get("content-length", "0"))
        while left > 0:
            got = self.rfile.read(min(left, 1 << 16))
            if not got:
                return
            left -= len(got)
        # Head and body in one write: two small writes meet Nagle's algorithm and the peer's
        # delayed ACK (~40 ms a request; see benches/hol.py).
        self.wfile.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
            + f"content-length: {len(REPLY)}\r\n\r\n".encode()
            + REPLY
        )

    do_GET = do_POST  # noqa: N815


def serve_mock(port: int) -> None:
    ThreadingHTTPServer.request_queue_size = 4096  # as tests/e2e/mock_upstream.py
    ThreadingHTTPServer.daemon_threads = True
    server = ThreadingHTTPServer(("127.0.0.1", port), Upstream)
    print("ready", flush=True)
    server.serve_forever()


# --- helpers ---


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, proc: subprocess.Popen, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{what} exited with code {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"{what} did not listen on port {port} within {timeout:.0f} s")


def pct(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1000:.1f}"


class Conn:
    """One keep-alive connection to the proxy, reopened after any failure."""

    def __init__(self, port: int, timeout: float) -> None:
        self.port, self.timeout, self.conn = port, timeout, None

    def request(self, method: str, path: str, body: bytes | None, headers: dict[str, str]) -> tuple[int, bytes]:
        if self.conn is None:
            self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout)
            self.conn.connect()
            self.conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            self.conn.request(method, path, body=body, headers=headers)
            resp = self.conn.getresponse()
            data = resp.read()
            if resp.getheader("connection", "").lower() == "close":
                self.close()
            return resp.status, data
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self.conn is not None:
            try:
                self.conn.close()
            except OSError:
                pass
            self.conn = None


class Sample:
    __slots__ = ("phase", "start", "end", "took", "result")

    def __init__(self, phase: str, start: float, end: float, result: str) -> None:
        self.phase, self.start, self.end, self.took, self.result = phase, start, end, end - start, result


class Load:
    """`threads` POST clients and one `/healthz` prober, each sample tagged with the phase in
    force when it started."""

    def __init__(self, port: int, threads: int, timeout: float, probe_interval: float, posts: bool = True) -> None:
        self.port, self.timeout, self.probe_interval = port, timeout, probe_interval
        self.phase = "warm-up"
        self.stop = threading.Event()
        self.posts: list[Sample] = []
        self.probes: list[Sample] = []
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._prober, daemon=True)]
        if posts:
            self.threads += [threading.Thread(target=self._poster, args=(i,), daemon=True) for i in range(threads)]

    def start(self) -> "Load":
        for t in self.threads:
            t.start()
        return self

    def finish(self) -> None:
        self.stop.set()
        deadline = time.monotonic() + self.timeout + 5
        for t in self.threads:
            t.join(timeout=max(0.1, deadline - time.monotonic()))

    def _one(self, conn: Conn, method: str, path: str, body: bytes | None, headers: dict[str, str]) -> Sample:
        phase = self.phase
        start = time.perf_counter()
        try:
            status, _ = conn.request(method, path, body, headers)
            result = "ok" if status == 200 else f"status {status}"
        except (socket.timeout, TimeoutError):
            result = "timeout"
        except (OSError, http.client.HTTPException) as e:
            result = f"error {type(e).__name__}"
        return Sample(phase, start, time.perf_counter(), result)

    def _poster(self, i: int) -> None:
        conn = Conn(self.port, self.timeout)
        headers = {
            "content-type": "application/json",
            "x-api-key": f"sk-stall-{i}",
            "anthropic-version": "2023-06-01",
        }
        while not self.stop.is_set():
            s = self._one(conn, "POST", "/anthropic/v1/messages", BODY, headers)
            with self.lock:
                self.posts.append(s)
            if s.result.startswith("error"):
                time.sleep(0.01)
        conn.close()

    def _prober(self) -> None:
        conn = Conn(self.port, self.timeout)
        while not self.stop.is_set():
            s = self._one(conn, "GET", "/healthz", None, {})
            with self.lock:
                self.probes.append(s)
            time.sleep(max(0.0, self.probe_interval - s.took))
        conn.close()

    def of(self, samples: list[Sample], phase: str) -> list[Sample]:
        with self.lock:
            return [s for s in samples if s.phase == phase]


def counts(samples: list[Sample]) -> tuple[list[float], int, int]:
    """(latencies of the 200s, timeouts, other failures)."""
    ok = [s.took for s in samples if s.result == "ok"]
    timeouts = sum(s.result == "timeout" for s in samples)
    return ok, timeouts, len(samples) - len(ok) - timeouts


def failures(samples: list[Sample]) -> str:
    kinds: dict[str, int] = {}
    for s in samples:
        if s.result != "ok":
            kinds[s.result] = kinds.get(s.result, 0) + 1
    return ", ".join(f"{k}: {v}" for k, v in sorted(kinds.items()))


def metric(port: int, name: str, timeout: float) -> str:
    """The value of `name` on the proxy's /metrics, "absent", or what went wrong."""
    try:
        status, data = Conn(port, timeout).request("GET", "/metrics", None, {})
    except (OSError, http.client.HTTPException) as e:
        return f"/metrics failed: {type(e).__name__}"
    if status != 200:
        return f"/metrics answered {status}"
    values = [
        line.split()[-1]
        for line in data.decode(errors="replace").splitlines()
        if line.startswith(name) and not line.startswith("#")
    ]
    return ", ".join(values) if values else "absent"


class Procs:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.procs: list[subprocess.Popen] = []
        self.stopped: set[int] = set()

    def start(self, argv: list[str], **kw) -> subprocess.Popen:
        env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy") and k != "RUST_LOG"}
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, env=env, **kw)
        self.procs.append(p)
        return p

    def mock(self) -> int:
        port = free_port()
        p = self.start([sys.executable, __file__, "--serve-mock", str(port)], stdout=subprocess.DEVNULL)
        wait_port(port, p, "mock upstream")
        return port

    def proxy(self, binary: Path, state: str, mock_port: int, stderr) -> tuple[int, subprocess.Popen]:
        port = free_port()
        config = self.tmp / f"proxy-{port}.toml"
        config.write_text(
            f'[server]\nlisten = "127.0.0.1:{port}"\n\n[state]\n{state}\n\n'
            f'[[routes]]\nname = "anthropic"\nprefix = "/anthropic"\nupstream = "http://127.0.0.1:{mock_port}"\n'
        )
        p = self.start([str(binary), "serve", "--config", str(config)], stdout=subprocess.DEVNULL, stderr=stderr)
        wait_port(port, p, "cachekeeper")
        return port, p

    def signal(self, p: subprocess.Popen, sig: int) -> None:
        os.kill(p.pid, sig)
        if sig == signal.SIGSTOP:
            self.stopped.add(p.pid)
        elif sig == signal.SIGCONT:
            self.stopped.discard(p.pid)

    def cleanup(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is not None:
                continue
            if p.pid in self.stopped:
                os.kill(p.pid, signal.SIGCONT)
            p.terminate()
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=10)


# --- experiment a: Redis stopped ---


def redis_experiment(args: argparse.Namespace, binary: Path, procs: Procs) -> None:
    if not shutil.which("redis-server"):
        raise SystemExit("redis-server not found (apt-get install redis-server)")
    mock_port = procs.mock()
    redis_port = free_port()
    rdir = procs.tmp / "redis"
    rdir.mkdir()
    redis = procs.start(
        ["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--daemonize", "no", "--dir", str(rdir)],
        stdout=subprocess.DEVNULL,
    )
    wait_port(redis_port, redis, "redis-server")
    log = open(procs.tmp / "proxy-redis.log", "wb")
    port, proxy = procs.proxy(
        binary, f'backend = "redis"\nurl = "redis://127.0.0.1:{redis_port}/0"', mock_port, log
    )

    phases = [("/healthz alone", False), ("redis up", True), ("redis stopped", True)]
    # The no-load /healthz figure first, with no POST client running.
    idle = Load(port, args.threads, args.timeout, args.probe_ms / 1000, posts=False)
    idle.phase = phases[0][0]
    idle.start()
    time.sleep(args.idle_seconds)
    idle.finish()

    load = Load(port, args.threads, args.timeout, args.probe_ms / 1000).start()
    time.sleep(args.warmup)
    load.phase = "redis up"
    time.sleep(args.seconds)
    procs.signal(redis, signal.SIGSTOP)
    load.phase = "redis stopped"
    time.sleep(args.seconds)
    load.phase = "after"
    procs.signal(redis, signal.SIGCONT)
    load.finish()
    if proxy.poll() is not None:
        print(f"cachekeeper exited with code {proxy.returncode} (log: {log.name})")

    print(f"\nredis stopped (kill -STOP redis-server): {args.threads} POST clients (126-byte body) + "
          f"GET /healthz every {args.probe_ms:g} ms; {args.seconds:g} s a phase; timeout {args.timeout:g} s")
    head = ("phase", "POST n", "p50 ms", "p99 ms", "timeouts", "other", "healthz n", "p50 ms", "p99 ms", "failed")
    rows = []
    for name, posts in phases:
        src = idle if not posts else load
        p_ok, p_to, p_err = counts(src.of(src.posts, name))
        h_ok, h_to, h_err = counts(src.of(src.probes, name))
        rows.append(
            (name, str(len(p_ok)) if posts else "-", ms(pct(p_ok, 0.5)), ms(pct(p_ok, 0.99)),
             str(p_to) if posts else "-", str(p_err) if posts else "-",
             str(len(h_ok)), ms(pct(h_ok, 0.5)), ms(pct(h_ok, 0.99)), str(h_to + h_err))
        )
    table(head, rows)
    bad = failures(load.posts + load.probes + idle.probes)
    if bad:
        print(f"failures: {bad}")
    up = counts(load.of(load.posts, "redis up"))[0]
    down = counts(load.of(load.posts, "redis stopped"))[0]
    hz_idle = counts(idle.of(idle.probes, phases[0][0]))[0]
    hz_down = counts(load.of(load.probes, "redis stopped"))[0]
    if up and down and hz_idle and hz_down:
        d50 = (pct(down, 0.5) - pct(up, 0.5)) * 1000
        r99 = pct(hz_down, 0.99) / pct(hz_idle, 0.99)
        print(f"POST p50 with Redis stopped - with Redis up: {d50:+.1f} ms (target <= 5 ms); "
              f"/healthz p99 stopped / alone: {r99:.1f}x (target <= 2x)")


# --- experiment b: the log reader stopped ---


class Reader(threading.Thread):
    """Drains the proxy's stderr; `paused` set = stops reading (the pipe fills)."""

    def __init__(self, fd: int) -> None:
        super().__init__(daemon=True)
        self.fd = fd
        self.paused = threading.Event()
        self.lines = 0
        self.done = False

    def run(self) -> None:
        while True:
            while self.paused.is_set():
                time.sleep(0.01)
            try:
                chunk = os.read(self.fd, 1 << 16)
            except OSError:
                break
            if not chunk:
                break
            self.lines += chunk.count(b"\n")
        self.done = True


def log_experiment(args: argparse.Namespace, binary: Path, procs: Procs) -> None:
    mock_port = procs.mock()
    r, w = os.pipe()
    try:
        port, proxy = procs.proxy(binary, f'path = "{procs.tmp / "state.db"}"', mock_port, w)
    finally:
        os.close(w)
    reader = Reader(r)
    reader.start()

    load = Load(port, args.threads, args.timeout, args.probe_ms / 1000).start()
    try:
        time.sleep(args.warmup)
        t0 = time.perf_counter()
        load.phase = "normal"
        time.sleep(args.normal_seconds)
        t1 = time.perf_counter()
        load.phase = "reader paused"
        reader.paused.set()
        time.sleep(args.pause_seconds)
        t2 = time.perf_counter()
        load.phase = "resumed"
    finally:
        reader.paused.clear()  # never leave the proxy blocked on a full pipe
    time.sleep(args.resume_seconds)
    t3 = time.perf_counter()
    load.phase = "after"
    load.finish()
    time.sleep(0.5)
    dropped = metric(port, "cachekeeper_log_lines_dropped_total", args.timeout)
    if proxy.poll() is not None:
        print(f"cachekeeper exited with code {proxy.returncode}")

    def completed(a: float, b: float) -> list[Sample]:
        with load.lock:
            return [s for s in load.posts if s.result == "ok" and a <= s.end < b]

    print(f"\nlog reader stopped (the proxy's stderr a pipe this script stops reading): {args.threads} POST "
          f"clients (126-byte body) + GET /healthz every {args.probe_ms:g} ms; timeout {args.timeout:g} s")
    head = ("phase", "s", "POST done", "per s", "timeouts", "other", "healthz ok", "p99 ms", "healthz failed")
    rows = []
    rates = {}
    for name, a, b in (("normal", t0, t1), ("reader paused", t1, t2), ("resumed", t2, t3)):
        done = completed(a, b)
        started = load.of(load.posts, name)
        _, p_to, p_err = counts(started)
        h_ok, h_to, h_err = counts(load.of(load.probes, name))
        rates[name] = len(done) / (b - a)
        rows.append((name, f"{b - a:.0f}", str(len(done)), f"{rates[name]:.0f}", str(p_to), str(p_err),
                     str(len(h_ok)), ms(pct(h_ok, 0.99)), str(h_to + h_err)))
    table(head, rows)
    print("(POST done: 200s that completed within the phase; timeouts / other: of the requests started in it)")
    per_second = [len(completed(t1 + i, t1 + i + 1)) for i in range(int(args.pause_seconds))]
    print(f"POSTs completed each second while paused: {' '.join(map(str, per_second))}")
    bad = failures(load.posts + load.probes)
    if bad:
        print(f"failures: {bad}")
    ratio = rates["reader paused"] / rates["normal"] if rates["normal"] else 0.0
    print(f"rate paused / normal: {ratio:.2f} (target >= 0.8)")
    print(f"log lines read: {reader.lines}")
    print(f"cachekeeper_log_lines_dropped_total: {dropped}")


def table(head: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    for r in (head, *rows):
        print("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))))


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--serve-mock":
        serve_mock(int(sys.argv[2]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=str(REPO / "target" / "release" / "cachekeeper"), help="cachekeeper binary")
    ap.add_argument("--only", choices=["redis", "log"], help="run one experiment (default both)")
    ap.add_argument("--threads", type=int, default=4, help="POST client threads (default 4)")
    ap.add_argument("--probe-ms", type=float, default=10, help="interval of the /healthz probe (default 10 ms)")
    ap.add_argument("--timeout", type=float, default=5, help="client request timeout, s (default 5)")
    ap.add_argument("--warmup", type=float, default=2, help="load before the first measured phase, s (default 2)")
    ap.add_argument("--idle-seconds", type=float, default=3, help="redis: /healthz alone, s (default 3)")
    ap.add_argument("--seconds", type=float, default=10, help="redis: each of Redis up / stopped, s (default 10)")
    ap.add_argument("--normal-seconds", type=float, default=10, help="log: reader reading, s (default 10)")
    ap.add_argument("--pause-seconds", type=float, default=30, help="log: reader paused, s (default 30)")
    ap.add_argument("--resume-seconds", type=float, default=5, help="log: after the reader resumes, s (default 5)")
    args = ap.parse_args()

    binary = Path(args.bin)
    if not binary.is_file():
        raise SystemExit(f"no cachekeeper binary at {binary}: build it (cargo build --release) or pass --bin")
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    print(f"benches/stall.py - {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} CPUs, "
          f"binary {binary} (repository at {commit.stdout.strip() or '?'})")

    tmp = Path(tempfile.mkdtemp(prefix="cachekeeper-stall-"))
    try:
        if args.only in (None, "redis"):
            procs = Procs(tmp)
            try:
                redis_experiment(args, binary, procs)
            finally:
                procs.cleanup()
        if args.only in (None, "log"):
            procs = Procs(tmp)
            try:
                log_experiment(args, binary, procs)
            finally:
                procs.cleanup()
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
