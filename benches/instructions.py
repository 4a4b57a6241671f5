#!/usr/bin/env python3
"""Per-request cost of each proxy on the pass-through cases of benches/load.sh, counted so that the
figure does not depend on how loaded the machine is (issue 12, "Targets").

Wall-clock requests/s on a 2-core machine shared with builds move 3x run to run; the CPU
instructions a proxy executes per request do not. This script starts the same fixed-response
upstream as benches/load.sh (Debian nginx `return 200` with Anthropic-shaped bodies), then for
nginx as a reverse proxy (the pinned config of load.sh, one process: `master_process off`,
`worker_processes 1`), for cachekeeper (the release binary, default log level, logging to a
file) and, with `--floor BIN`, for the floor (examples/floor_proxy.rs: a bare hyper 1 + tokio
reverse proxy doing nothing but forwarding, started as `BIN 127.0.0.1:PORT 127.0.0.1:UPSTREAM`),
each case (POST /v1/messages with a 130-byte body; the same with `"stream":true` answered
by a 50-event SSE stream; GET /v1/models) is measured twice:

1. natively: N requests over C keep-alive connections; from /proc, the proxy's CPU time
   (schedstat, ns) and context switches (voluntary + involuntary, every thread) per request;
2. under `valgrind --tool=callgrind`: the same N requests after a warm-up, the counters zeroed
   before and dumped after (`callgrind_control`); instructions (Ir) per request, every thread
   included. `--keep DIR` keeps the dumps for `callgrind_annotate`.

Usage: python3 benches/instructions.py [--bin target/release/cachekeeper] [-n 4000] [-c 16]
         [--cases post,sse,get] (also: sse-chat, sse-responses: a 50-event OpenAI Chat
         Completions / Responses stream for a streamed request of that dialect) [--targets nginx,cachekeeper] [--keep DIR] [--no-callgrind]
         [--floor target/release/examples/floor_proxy] (build it: cargo build --release
         --example floor_proxy; adds the `floor` target, and makes the default targets
         nginx,floor,cachekeeper)
Needs: nginx, valgrind (callgrind_control), python3. Runs in a temporary directory, removed on
exit with every process it started. A measurement run by hand, not a test.
"""

from __future__ import annotations

import argparse
import glob
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# The fixed responses of benches/load.sh (Anthropic Messages shapes).
JSON_REPLY = (
    '{"id":"msg_01XFDUDYJgAACzvnptvVoYEL","type":"message","role":"assistant",'
    '"model":"claude-sonnet-4-5","content":[{"type":"text","text":"Hello! How can I help you '
    'today?"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":21,'
    '"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":12}}'
)
MODELS_REPLY = (
    '{"data":[{"type":"model","id":"claude-sonnet-4-5","display_name":"Claude Sonnet 4.5",'
    '"created_at":"2025-09-29T00:00:00Z"}],"has_more":false,"first_id":"claude-sonnet-4-5",'
    '"last_id":"claude-sonnet-4-5"}'
)


def sse_reply() -> str:
    """50 events: message_start, content_block_start, 45 deltas, content_block_stop,
    message_delta, message_stop (as benches/load.sh)."""
    ev = [
        'event: message_start\ndata: {"type":"message_start","message":{"id":"msg_01",'
        '"type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],'
        '"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":21,'
        '"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":1}}}\n\n',
        'event: content_block_start\ndata: {"type":"content_block_start","index":0,'
        '"content_block":{"type":"text","text":""}}\n\n',
    ]
    for i in range(1, 46):
        ev.append(
            'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
            f'"delta":{{"type":"text_delta","text":"word{i} "}}}}\n\n'
        )
    ev.append('event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n')
    ev.append(
        'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn",'
        '"stop_sequence":null},"usage":{"output_tokens":45}}\n\n'
    )
    ev.append('event: message_stop\ndata: {"type":"message_stop"}\n\n')
    out = "".join(ev)
    assert out.count("event: ") == 50
    return out


def chat_sse_reply() -> str:
    """50 OpenAI Chat Completions stream events (`stream_options.include_usage`): a role chunk,
    46 content deltas, the finish chunk, the usage chunk, `data: [DONE]`."""

    def chunk(delta: str, finish: str = "null", usage: str = "null", choices: str | None = None) -> str:
        if choices is None:
            choices = f'[{{"index":0,"delta":{delta},"logprobs":null,"finish_reason":{finish}}}]'
        return (
            'data: {"id":"chatcmpl-C1kX9","object":"chat.completion.chunk","created":1767225600,'
            '"model":"gpt-4.1-2025-04-14","service_tier":"default","system_fingerprint":"fp_7f1e2d",'
            f'"choices":{choices},"usage":{usage}}}\n\n'
        )

    ev = [chunk('{"role":"assistant","content":"","refusal":null}')]
    for i in range(1, 47):
        ev.append(chunk(f'{{"content":"word{i} "}}'))
    ev.append(chunk("{}", finish='"stop"'))
    ev.append(chunk("", choices="[]", usage='{"prompt_tokens":21,"completion_tokens":46,"total_tokens":67,'
                    '"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},'
                    '"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0}}'))
    ev.append("data: [DONE]\n\n")
    out = "".join(ev)
    assert out.count("data: ") == 50
    return out


def responses_sse_reply() -> str:
    """50 OpenAI Responses stream events: response.created, response.in_progress, the message
    item and its part added, 42 output_text deltas, the text, part and item done,
    response.completed."""
    resp = ('{{"id":"resp_68af402f","object":"response","created_at":1767225600,"status":"{status}",'
            '"model":"gpt-4.1-2025-04-14","output":{output},"usage":{usage}}}')
    text = "".join(f"word{i} " for i in range(1, 43))
    part = f'{{"type":"output_text","annotations":[],"logprobs":[],"text":"{text}"}}'
    item = f'{{"id":"msg_1","type":"message","status":"completed","content":[{part}],"role":"assistant"}}'
    usage = ('{"input_tokens":21,"input_tokens_details":{"cached_tokens":0},"output_tokens":42,'
             '"output_tokens_details":{"reasoning_tokens":0},"total_tokens":63}')
    datas = [
        ("response.created", f'"response":{resp.format(status="in_progress", output="[]", usage="null")}'),
        ("response.in_progress", f'"response":{resp.format(status="in_progress", output="[]", usage="null")}'),
        ("response.output_item.added", '"output_index":0,"item":{"id":"msg_1","type":"message",'
         '"status":"in_progress","content":[],"role":"assistant"}'),
        ("response.content_part.added", '"item_id":"msg_1","output_index":0,"content_index":0,'
         '"part":{"type":"output_text","annotations":[],"logprobs":[],"text":""}'),
    ]
    for i in range(1, 43):
        datas.append(("response.output_text.delta", '"item_id":"msg_1","output_index":0,"content_index":0,'
                      f'"delta":"word{i} ","logprobs":[],"obfuscation":"Xq{i}"'))
    datas += [
        ("response.output_text.done", f'"item_id":"msg_1","output_index":0,"content_index":0,"text":"{text}","logprobs":[]'),
        ("response.content_part.done", f'"item_id":"msg_1","output_index":0,"content_index":0,"part":{part}'),
        ("response.output_item.done", f'"output_index":0,"item":{item}'),
        ("response.completed", f'"response":{resp.format(status="completed", output="[" + item + "]", usage=usage)}'),
    ]
    out = "".join(
        f'event: {kind}\ndata: {{"type":"{kind}","sequence_number":{n},{rest}}}\n\n'
        for n, (kind, rest) in enumerate(datas)
    )
    assert out.count("event: ") == 50
    return out


def body_130(stream: bool) -> bytes:
    """The 130-byte request body of benches/load.sh."""
    base = {"model": "claude-sonnet-4-5", "max_tokens": 64, "messages": [{"role": "user", "content": ""}]}
    if stream:
        base["stream"] = True
    n = 130 - len(json.dumps(base, separators=(",", ":")))
    base["messages"][0]["content"] = ("Say hello in a few words, please. " * 8)[:n]
    out = json.dumps(base, separators=(",", ":")).encode()
    assert len(out) == 130, len(out)
    return out


def chat_body() -> bytes:
    """A Chat Completions request of about the same size, streamed with usage."""
    return json.dumps({"model": "gpt-4.1", "max_tokens": 64, "stream": True,
                       "stream_options": {"include_usage": True},
                       "messages": [{"role": "user", "content": "Say hello in a few words, please."}]},
                      separators=(",", ":")).encode()


def responses_body() -> bytes:
    """A Responses request of about the same size, streamed."""
    return json.dumps({"model": "gpt-4.1", "max_output_tokens": 64, "stream": True,
                       "input": "Say hello in a few words, please."}, separators=(",", ":")).encode()


CASES = {
    # name: (method, route, path, body, what the answer contains)
    "post": ("POST", "json", "/v1/messages", body_130(False), b'"type":"message"'),
    "sse": ("POST", "sse", "/v1/messages", body_130(True), b"message_stop"),
    "get": ("GET", "json", "/v1/models", None, b'"has_more":false'),
    # Not in the default set (the cases of benches/load.sh): the other dialects' streams.
    "sse-chat": ("POST", "sse", "/v1/chat/completions", chat_body(), b"data: [DONE]"),
    "sse-responses": ("POST", "sse", "/v1/responses", responses_body(), b"response.completed"),
}
HEADERS = {
    "content-type": "application/json",
    "x-api-key": "sk-ant-load-bench",
    "anthropic-version": "2023-06-01",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, what: str, seconds: float = 60.0) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    sys.exit(f"instructions.py: {what} did not listen on {port}")


def drive(port: int, case: str, n: int, conns: int) -> int:
    """Send `n` requests of `case` over `conns` keep-alive connections; returns the errors."""
    method, route, path, body, expect = CASES[case]
    url = f"/{route}{path}"
    errors = [0]
    lock = threading.Lock()
    counts = [n // conns + (1 if i < n % conns else 0) for i in range(conns)]

    def worker(k: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        bad = 0
        for _ in range(k):
            try:
                conn.request(method, url, body=body, headers=HEADERS)
                resp = conn.getresponse()
                data = resp.read()
                if resp.status != 200 or expect not in data:
                    bad += 1
            except (OSError, http.client.HTTPException):
                bad += 1
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        conn.close()
        with lock:
            errors[0] += bad

    threads = [threading.Thread(target=worker, args=(k,)) for k in counts if k]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors[0]


def proc_cost(pid: int) -> tuple[int, int]:
    """(CPU ns, context switches) summed over every thread of `pid`."""
    ns = 0
    switches = 0
    for task in glob.glob(f"/proc/{pid}/task/*"):
        try:
            ns += int(Path(task, "schedstat").read_text().split()[0])
            for line in Path(task, "status").read_text().splitlines():
                if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                    switches += int(line.split()[1])
        except (OSError, ValueError, IndexError):
            pass  # a thread that ended meanwhile
    return ns, switches


def nginx_confs(tmp: Path, up_port: int, ngx_port: int) -> tuple[Path, Path]:
    up = tmp / "up"
    ngx = tmp / "ngx"
    up.mkdir()
    ngx.mkdir()
    (up / "sse.events").write_text(sse_reply() + "\n\n")
    (up / "chat.events").write_text(chat_sse_reply())
    (up / "responses.events").write_text(responses_sse_reply())
    os.chmod(tmp, 0o755)
    os.chmod(up, 0o755)
    for name in ("sse.events", "chat.events", "responses.events"):
        os.chmod(up / name, 0o644)
    (up / "nginx.conf").write_text(f"""
worker_processes auto;
daemon off;
pid {up}/nginx.pid;
error_log {up}/error.log warn;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  client_body_temp_path {up}/body;
  keepalive_requests 1000000;
  server {{
    listen 127.0.0.1:{up_port};
    location = /json/v1/messages {{ default_type application/json; return 200 '{JSON_REPLY}'; }}
    location = /sse/v1/messages {{ error_page 405 =200 /sse.events; return 405; }}
    location = /sse.events {{ internal; root {up}; types {{ }} default_type text/event-stream; }}
    location = /sse/v1/chat/completions {{ error_page 405 =200 /chat.events; return 405; }}
    location = /chat.events {{ internal; root {up}; types {{ }} default_type text/event-stream; }}
    location = /sse/v1/responses {{ error_page 405 =200 /responses.events; return 405; }}
    location = /responses.events {{ internal; root {up}; types {{ }} default_type text/event-stream; }}
    location = /json/v1/models {{ default_type application/json; return 200 '{MODELS_REPLY}'; }}
  }}
}}
""")
    # benches/load.sh's pinned reverse-proxy config, in one process so one pid holds its cost.
    (ngx / "nginx.conf").write_text(f"""
master_process off;
worker_processes 1;
daemon off;
pid {ngx}/nginx.pid;
error_log {ngx}/error.log warn;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  client_body_temp_path {ngx}/body;
  proxy_temp_path {ngx}/proxy;
  keepalive_requests 1000000;
  upstream fixed {{ server 127.0.0.1:{up_port}; keepalive 64; keepalive_requests 1000000; }}
  server {{
    listen 127.0.0.1:{ngx_port};
    location / {{
      proxy_pass http://fixed;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
    }}
  }}
}}
""")
    return up / "nginx.conf", ngx / "nginx.conf"


def ck_conf(tmp: Path, ck_port: int, up_port: int) -> Path:
    p = tmp / "proxy.toml"
    p.write_text(f"""# written by benches/instructions.py
[server]
listen = "127.0.0.1:{ck_port}"

[state]
path = "{tmp}/state.db"

[[routes]]
name = "json"
prefix = "/json"
upstream = "http://127.0.0.1:{up_port}/json"

[[routes]]
name = "sse"
prefix = "/sse"
upstream = "http://127.0.0.1:{up_port}/sse"
""")
    return p


def totals(path: Path) -> int:
    """The `totals:` (or `summary:`) Ir of a callgrind dump."""
    for line in path.read_text(errors="replace").splitlines():
        m = re.match(r"(?:totals|summary):\s+(\d+)", line)
        if m:
            return int(m.group(1))
    raise ValueError(f"no totals in {path}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=str(REPO / "target/release/cachekeeper"))
    ap.add_argument("-n", "--requests", type=int, default=4000)
    ap.add_argument("-c", "--conns", type=int, default=16)
    ap.add_argument("--warmup", type=int, default=300)
    ap.add_argument("--cases", default="post,sse,get")
    ap.add_argument("--targets", help="default: nginx,cachekeeper (nginx,floor,cachekeeper with --floor)")
    ap.add_argument("--floor", help="the floor proxy binary (examples/floor_proxy.rs), for the floor target")
    ap.add_argument("--keep", help="copy the callgrind dumps here (callgrind_annotate FILE)")
    ap.add_argument("--no-callgrind", action="store_true", help="native figures only")
    args = ap.parse_args()
    cases = [c for c in args.cases.split(",") if c]
    if args.targets is None:
        args.targets = "nginx,floor,cachekeeper" if args.floor else "nginx,cachekeeper"
    targets = [t for t in args.targets.split(",") if t]
    for t in targets:
        if t not in ("nginx", "floor", "cachekeeper"):
            sys.exit(f"instructions.py: unknown target {t}")
    if "floor" in targets and not (args.floor and os.access(args.floor, os.X_OK)):
        sys.exit("instructions.py: the floor target needs --floor BIN (cargo build --release --example floor_proxy)")
    for c in cases:
        if c not in CASES:
            sys.exit(f"instructions.py: unknown case {c}")
    need = ["nginx"] + ([] if args.no_callgrind else ["valgrind", "callgrind_control"])
    for tool in need:
        if not shutil.which(tool):
            sys.exit(f"instructions.py: {tool} not found")
    if "cachekeeper" in targets and not os.access(args.bin, os.X_OK):
        sys.exit(f"instructions.py: no cachekeeper binary at {args.bin} (cargo build --release)")

    tmp = Path(tempfile.mkdtemp(prefix="cachekeeper-instr."))
    procs: list[subprocess.Popen] = []

    def stop(p: subprocess.Popen) -> None:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    try:
        up_port, ngx_port, ck_port, floor_port = free_port(), free_port(), free_port(), free_port()
        up_conf, ngx_conf = nginx_confs(tmp, up_port, ngx_port)
        conf = ck_conf(tmp, ck_port, up_port)
        up = subprocess.Popen(["nginx", "-c", str(up_conf), "-p", str(tmp / "up"), "-e", str(tmp / "up/error.log")])
        procs.append(up)
        wait_port(up_port, "upstream nginx")
        env = {k: v for k, v in os.environ.items() if k != "RUST_LOG"}

        def start(target: str, wrap: list[str], tag: str) -> tuple[subprocess.Popen, int]:
            if target == "nginx":
                cmd = ["nginx", "-c", str(ngx_conf), "-p", str(tmp / "ngx"), "-e", str(tmp / "ngx/error.log")]
                port = ngx_port
            elif target == "floor":
                cmd = [args.floor, f"127.0.0.1:{floor_port}", f"127.0.0.1:{up_port}"]
                port = floor_port
            else:
                cmd = [args.bin, "serve", "--config", str(conf)]
                port = ck_port
            log = open(tmp / f"{target}-{tag}.log", "wb")
            p = subprocess.Popen(wrap + cmd, stdout=log, stderr=log, env=env, cwd=tmp)
            procs.append(p)
            wait_port(port, target, 120)
            return p, port

        print(f"benches/instructions.py — {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
              f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}, "
              f"{args.requests} requests per case over {args.conns} connections")
        print(f"{'case':<13} {'target':<12} {'cpu_us/req':>11} {'ctxsw/req':>10} {'Ir/req':>10} {'errors':>7}")
        results: dict[tuple[str, str], dict[str, float]] = {}
        for target in targets:
            p, port = start(target, [], "native")
            for case in cases:
                drive(port, case, args.warmup, args.conns)
                ns0, sw0 = proc_cost(p.pid)
                err = drive(port, case, args.requests, args.conns)
                ns1, sw1 = proc_cost(p.pid)
                results[(target, case)] = {
                    "cpu_us": (ns1 - ns0) / 1000 / args.requests,
                    "ctxsw": (sw1 - sw0) / args.requests,
                    "errors": err,
                }
            stop(p)
            if args.no_callgrind:
                continue
            out = tmp / f"callgrind.{target}"
            p, port = start(
                target,
                ["valgrind", "--tool=callgrind", "--compress-strings=no", "--compress-pos=no", f"--callgrind-out-file={out}.%p"],
                "callgrind",
            )
            for case in cases:
                drive(port, case, args.warmup, args.conns)
                subprocess.run(["callgrind_control", "-z", str(p.pid)], check=True, capture_output=True)
                err = drive(port, case, args.requests, args.conns)
                before = set(glob.glob(f"{out}.{p.pid}*"))
                subprocess.run(["callgrind_control", "-d", f"{case}", str(p.pid)], check=True, capture_output=True)
                # The dump is written asynchronously by the traced process.
                dump = None
                for _ in range(600):
                    new = set(glob.glob(f"{out}.{p.pid}*")) - before
                    if new:
                        dump = Path(sorted(new)[-1])
                        break
                    time.sleep(0.1)
                if dump is None:
                    sys.exit("instructions.py: callgrind wrote no dump")
                time.sleep(0.5)
                results[(target, case)]["ir"] = totals(dump) / args.requests
                results[(target, case)]["errors"] += err
                if args.keep:
                    Path(args.keep).mkdir(parents=True, exist_ok=True)
                    shutil.copy(dump, Path(args.keep) / f"callgrind.{target}.{case}")
            stop(p)
        for case in cases:
            for target in targets:
                r = results[(target, case)]
                ir = f"{r['ir']:.0f}" if "ir" in r else "-"
                print(f"{case:<13} {target:<12} {r['cpu_us']:>11.1f} {r['ctxsw']:>10.2f} {ir:>10} {r['errors']:>7}")
        for a, b in (("cachekeeper", "nginx"), ("floor", "nginx"), ("cachekeeper", "floor")):
            if not {a, b} <= set(targets):
                continue
            for case in cases:
                x, y = results[(a, case)], results[(b, case)]
                line = f"{case:<13} {a}/{b}: cpu {x['cpu_us'] / y['cpu_us']:.2f}x"
                if "ir" in x and "ir" in y:
                    line += f", instructions {x['ir'] / y['ir']:.2f}x"
                print(line)
    finally:
        for p in reversed(procs):
            stop(p)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
