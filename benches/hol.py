#!/usr/bin/env python3
"""Head-of-line blocking check: does a text-only request wait for other requests' image work?

Starts a fixed-response upstream (Debian nginx answering `return 200` with an Anthropic Messages
JSON, as benches/load.sh does; the Python mock in tests/e2e answers in two small writes, which
Nagle's algorithm and delayed ACKs turn into ~40 ms a request, hiding what the proxy does) and
a cachekeeper in front of it (a generated proxy.toml in a temporary directory, free ports),
then, in one run:

1. sends one text-only Anthropic request alone (the baseline latency);
2. sends six Anthropic requests at once, each under its own API key and each carrying one
   10000x10000 flat-colour PNG upload (about 290 KB of base64, 100 megapixels: over Anthropic's
   8000-px side, so the proxy must decode and repair it), and while they are being processed
   sends the text-only request again, several times;
3. prints the text request's latencies (alone, and during the image work), how many image
   requests were still in flight when the last text request finished, and (with --wait) how
   long the image requests took.

Target (issue 12): the text request completes in under 100 ms while the six image requests are
processed on a 2-core machine. This is a measurement run by hand, not a test.

With --wait it also prints the proxy's peak RSS (VmHWM): image decodes are charged to
`[server] max_buffered_bytes` (--budget BYTES sets it) by what they will allocate (issue 27).

Usage: python3 benches/hol.py [--bin target/release/cachekeeper] [--images 6] [--probes 10] [--wait]
                              [--budget BYTES]
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import os
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
REPLY = (
    '{"id":"msg_01","type":"message","role":"assistant","model":"claude-sonnet-4-5",'
    '"content":[{"type":"text","text":"Hello!"}],"stop_reason":"end_turn","stop_sequence":null,'
    '"usage":{"input_tokens":12,"output_tokens":3}}'
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def flat_png(side: int) -> bytes:
    """A side x side RGB PNG of one colour, compressed as far as zlib goes (~290 KB at 10000)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    # Filter 1 (Sub): every byte after the first pixel is 0, so rows compress to almost nothing.
    row = b"\x01" + bytes([200, 30, 30]) + bytes(3 * (side - 1))
    z = zlib.compressobj(9)
    parts = [z.compress(row) for _ in range(side)]
    parts.append(z.flush())
    ihdr = struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", b"".join(parts)) + chunk(b"IEND", b"")


def wait_port(port: int, proc: subprocess.Popen[bytes], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"{what} exited with code {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    sys.exit(f"{what} did not listen on port {port} within {timeout:.0f} s")


def post(port: int, key: str, body: bytes) -> tuple[float, int, str]:
    """POST /anthropic/v1/messages; (seconds, status, x-cachekeeper-rewrites)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    conn.connect()
    # http.client writes the head and the body apart: without this, Nagle's algorithm and the
    # peer's delayed ACK add ~40 ms to every request.
    conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    started = time.perf_counter()
    conn.request(
        "POST",
        "/anthropic/v1/messages",
        body=body,
        headers={"content-type": "application/json", "x-api-key": key, "anthropic-version": "2023-06-01"},
    )
    resp = conn.getresponse()
    resp.read()
    took = time.perf_counter() - started
    conn.close()
    return took, resp.status, resp.getheader("x-cachekeeper-rewrites") or ""


def peak_rss_kb(pid: int) -> int:
    """The process's peak resident set size (`VmHWM` of /proc/PID/status), kB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=None, help="cachekeeper binary (default: target/release, else target/debug)")
    ap.add_argument("--images", type=int, default=6, help="concurrent image requests (default 6)")
    ap.add_argument("--side", type=int, default=10000, help="PNG side in px (default 10000)")
    ap.add_argument("--probes", type=int, default=10, help="text requests sent during the image work (default 10)")
    ap.add_argument("--wait", action="store_true", help="wait for the image requests to finish (minutes on 2 cores)")
    ap.add_argument(
        "--budget",
        type=int,
        default=None,
        help="[server] max_buffered_bytes (default: the proxy's, 1 GiB); the proxy's peak RSS (VmHWM) is printed either way",
    )
    args = ap.parse_args()

    binary = Path(args.bin) if args.bin else REPO / "target" / "release" / "cachekeeper"
    if not args.bin and not binary.is_file():
        binary = REPO / "target" / "debug" / "cachekeeper"
    if not binary.is_file():
        sys.exit(f"no cachekeeper binary at {binary}: build it (cargo build --release) or pass --bin")

    tmp = Path(tempfile.mkdtemp(prefix="cachekeeper-hol-"))
    procs: list[subprocess.Popen[bytes]] = []
    try:
        mock_port, proxy_port = free_port(), free_port()
        if not shutil.which("nginx"):
            sys.exit("nginx not found (apt-get install nginx)")
        (tmp / "nginx.conf").write_text(
            f"worker_processes 1;\ndaemon off;\npid {tmp}/nginx.pid;\nerror_log {tmp}/nginx-error.log warn;\n"
            "events { worker_connections 1024; }\n"
            f"http {{ access_log off; client_body_temp_path {tmp}/body; client_max_body_size 64m;\n"
            f"  server {{ listen 127.0.0.1:{mock_port};\n"
            f"    location / {{ default_type application/json; return 200 '{REPLY}'; }} }} }}\n"
        )
        procs.append(
            subprocess.Popen(
                ["nginx", "-c", str(tmp / "nginx.conf"), "-p", str(tmp), "-e", str(tmp / "nginx-error.log")],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        wait_port(mock_port, procs[-1], "nginx upstream")
        config = tmp / "proxy.toml"
        config.write_text(
            f'[server]\nlisten = "127.0.0.1:{proxy_port}"\n'
            + (f"max_buffered_bytes = {args.budget}\n" if args.budget else "")
            + f'\n[state]\npath = "{tmp / "state.db"}"\n\n'
            f'[[routes]]\nname = "anthropic"\nprefix = "/anthropic"\nupstream = "http://127.0.0.1:{mock_port}"\n'
        )
        env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
        proxy_log = open(tmp / "proxy.log", "wb")
        procs.append(
            subprocess.Popen(
                [str(binary), "serve", "--config", str(config)],
                stdout=proxy_log,
                stderr=proxy_log,
                stdin=subprocess.DEVNULL,
                env=env,
            )
        )
        wait_port(proxy_port, procs[-1], "cachekeeper")

        png = flat_png(args.side)
        b64 = base64.b64encode(png).decode()
        text = json.dumps(
            {"model": "claude-sonnet-4-5", "max_tokens": 16, "messages": [{"role": "user", "content": "hello"}]}
        ).encode()
        image = json.dumps(
            {
                "model": "claude-sonnet-4-5",
                "max_tokens": 16,
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64}},
                            {"type": "text", "text": "what is this?"},
                        ],
                    }
                ],
            }
        ).encode()
        print(f"machine: {os.cpu_count()} CPUs; binary: {binary}")
        print(f"text body: {len(text)} bytes; image body: {len(image)} bytes ({args.side}x{args.side} PNG, {len(png)} bytes)")

        # Warm-up and the baseline: the text request alone.
        alone = [post(proxy_port, "sk-text", text)[0] for _ in range(5)]

        results: list[tuple[float, int, str]] = [None] * args.images  # type: ignore[list-item]

        def send_image(i: int) -> None:
            try:
                results[i] = post(proxy_port, f"sk-image-{i}", image)
            except OSError as e:
                results[i] = (0.0, 0, f"error: {e}")

        started = time.perf_counter()
        threads = [threading.Thread(target=send_image, args=(i,), daemon=True) for i in range(args.images)]
        for t in threads:
            t.start()
        time.sleep(0.3)  # the image requests are in and decoding
        during = []
        for _ in range(args.probes):
            took, status, _ = post(proxy_port, "sk-text", text)
            if status != 200:
                print(f"text request answered {status}")
            during.append(took)
            time.sleep(0.1)
        in_flight = sum(t.is_alive() for t in threads)
        if args.wait:
            for t in threads:
                t.join()
        images_took = time.perf_counter() - started

        ms = lambda xs: ", ".join(f"{x * 1000:.1f}" for x in xs)  # noqa: E731
        print(f"text request alone (ms): {ms(alone)}")
        print(f"text request during {args.images} image requests (ms): {ms(during)}")
        print(f"  median {statistics.median(during) * 1000:.1f} ms, max {max(during) * 1000:.1f} ms (target < 100 ms)")
        print(f"image requests still in flight after the last text request: {in_flight} of {args.images}")
        if args.wait:
            statuses = sorted({r[1] for r in results})
            repaired = sum("images_repaired=1" in r[2] for r in results)
            print(f"{args.images} image requests: all done after {images_took:.1f} s, statuses {statuses}, {repaired} repaired")
        hwm = peak_rss_kb(procs[-1].pid)
        budget = args.budget or 1 << 30
        print(f"proxy peak RSS (VmHWM): {hwm} kB = {hwm * 1024 / 1e6:.0f} MB; max_buffered_bytes {budget / 1e6:.0f} MB")
        return 0
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
