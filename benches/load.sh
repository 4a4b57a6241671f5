#!/usr/bin/env bash
# Pass-through load: wrk directly against a fixed-response upstream, through nginx as a reverse
# proxy, and through cachekeeper, side by side in one run (issue 12, "Targets").
#
# - Upstream: Debian nginx answering `return 200` with Anthropic-shaped bodies: a Messages JSON
#   (POST .../json/v1/messages), a 50-event Messages SSE stream (POST .../sse/v1/messages, a
#   file with content-type text/event-stream), a
#   model list (GET .../json/v1/models).
# - nginx as a reverse proxy, pinned config: upstream keepalive (64 idle connections),
#   `proxy_http_version 1.1`, `proxy_buffering off`, access log off.
# - cachekeeper: the release binary, default log level (RUST_LOG unset; logs to a file), a
#   generated proxy.toml routing /json and /sse to the upstream.
# - floor (with -f): examples/floor_proxy.rs, a bare hyper 1 + tokio reverse proxy doing nothing
#   but forwarding, started as `FLOOR_BIN 127.0.0.1:PORT 127.0.0.1:UPSTREAM_PORT`: what the
#   stack costs before cachekeeper does anything of its own.
# - Cases: POST /v1/messages with a 130-byte body; the same with `"stream":true` answered by
#   the 50-event SSE stream; GET /v1/models.
#
# Prints, per case and path: requests/s, p50 and p99 latency (ms, wrk's --latency), errors,
# each proxy's added latency over direct, and cachekeeper's (and the floor's) throughput as a
# multiple of nginx's.
#
# Usage: benches/load.sh [-c CONNECTIONS] [-d DURATION] [-t THREADS] [-b BINARY] [-f FLOOR_BIN]
#   defaults: -c 16 -d 8s -t 2 -b target/release/cachekeeper (build it: cargo build --release)
#   -f target/release/examples/floor_proxy adds the floor target (cargo build --release
#   --example floor_proxy); without -f it is not measured.
#   PERF_OUT=FILE also records a `perf record --call-graph dwarf` profile of cachekeeper during
#   one case (PERF_CASE=post|sse|get, default post).
# Needs: nginx, wrk, python3 (free ports). Everything runs in a temporary directory, removed on
# exit with every process this script started.
set -euo pipefail

conns=16
duration=8s
threads=2
repo=$(cd "$(dirname "$0")/.." && pwd)
bin="$repo/target/release/cachekeeper"
floor_bin=
while getopts "c:d:t:b:f:h" opt; do
  case $opt in
    c) conns=$OPTARG ;;
    d) duration=$OPTARG ;;
    t) threads=$OPTARG ;;
    b) bin=$OPTARG ;;
    f) floor_bin=$OPTARG ;;
    *) sed -n '2,30p' "$0"; exit 2 ;;
  esac
done
for tool in nginx wrk python3; do
  command -v "$tool" >/dev/null || { echo "load.sh: $tool not found" >&2; exit 1; }
done
[ -x "$bin" ] || { echo "load.sh: no cachekeeper binary at $bin (cargo build --release)" >&2; exit 1; }
if [ -n "$floor_bin" ] && [ ! -x "$floor_bin" ]; then
  echo "load.sh: no floor binary at $floor_bin (cargo build --release --example floor_proxy)" >&2
  exit 1
fi
targets="direct nginx${floor_bin:+ floor} cachekeeper"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/cachekeeper-load.XXXXXX")
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  if [ -n "${KEEP_TMP:-}" ]; then echo "kept $tmp" >&2; else rm -rf "$tmp"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
wait_port() {
  local port=$1 what=$2
  for _ in $(seq 1 200); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then return 0; fi
    sleep 0.05
  done
  echo "load.sh: $what did not listen on $port" >&2
  exit 1
}

up_port=$(free_port)
ngx_port=$(free_port)
ck_port=$(free_port)
floor_port=$(free_port)

# --- the fixed responses (Anthropic Messages shapes) ---
json_reply='{"id":"msg_01XFDUDYJgAACzvnptvVoYEL","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":"Hello! How can I help you today?"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":21,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":12}}'
models_reply='{"data":[{"type":"model","id":"claude-sonnet-4-5","display_name":"Claude Sonnet 4.5","created_at":"2025-09-29T00:00:00Z"}],"has_more":false,"first_id":"claude-sonnet-4-5","last_id":"claude-sonnet-4-5"}'
# 50 events: message_start, content_block_start, 45 deltas, content_block_stop, message_delta,
# message_stop.
sse_reply=$(
  printf 'event: message_start\ndata: {"type":"message_start","message":{"id":"msg_01","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":21,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":1}}}\n\n'
  printf 'event: content_block_start\ndata: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}\n\n'
  for i in $(seq 1 45); do
    printf 'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"word%d "}}\n\n' "$i"
  done
  printf 'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n'
  printf 'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":45}}\n\n'
  printf 'event: message_stop\ndata: {"type":"message_stop"}\n\n'
)
sse_events=$(printf '%s' "$sse_reply" | grep -c '^event: ')
[ "$sse_events" = 50 ] || { echo "load.sh: SSE reply has $sse_events events, not 50" >&2; exit 1; }

# --- upstream: nginx, fixed responses ---
mkdir -p "$tmp/up" "$tmp/ngx"
printf '%s\n\n' "$sse_reply" >"$tmp/up/sse.events"
# nginx's workers run as an unprivileged user: they must be able to read the file.
chmod 755 "$tmp" "$tmp/up"
chmod 644 "$tmp/up/sse.events"
cat >"$tmp/up/nginx.conf" <<EOF
worker_processes auto;
daemon off;
pid $tmp/up/nginx.pid;
error_log $tmp/up/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $tmp/up/body;
  keepalive_requests 1000000;
  server {
    listen 127.0.0.1:$up_port;
    location = /json/v1/messages { default_type application/json; return 200 '$json_reply'; }
    # A reply this long does not fit an nginx config token: a file, served to a POST through
    # error_page (which re-issues the request as a GET).
    location = /sse/v1/messages { error_page 405 =200 /sse.events; return 405; }
    location = /sse.events { internal; root $tmp/up; types { } default_type text/event-stream; }
    location = /json/v1/models { default_type application/json; return 200 '$models_reply'; }
  }
}
EOF
# --- nginx as a reverse proxy, pinned config ---
cat >"$tmp/ngx/nginx.conf" <<EOF
worker_processes auto;
daemon off;
pid $tmp/ngx/nginx.pid;
error_log $tmp/ngx/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $tmp/ngx/body;
  proxy_temp_path $tmp/ngx/proxy;
  keepalive_requests 1000000;
  upstream fixed { server 127.0.0.1:$up_port; keepalive 64; keepalive_requests 1000000; }
  server {
    listen 127.0.0.1:$ngx_port;
    location / {
      proxy_pass http://fixed;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
    }
  }
}
EOF
# --- cachekeeper ---
cat >"$tmp/proxy.toml" <<EOF
# written by benches/load.sh
[server]
listen = "127.0.0.1:$ck_port"

[state]
path = "$tmp/state.db"

[[routes]]
name = "json"
prefix = "/json"
upstream = "http://127.0.0.1:$up_port/json"

[[routes]]
name = "sse"
prefix = "/sse"
upstream = "http://127.0.0.1:$up_port/sse"
EOF

nginx -c "$tmp/up/nginx.conf" -p "$tmp/up" -e "$tmp/up/error.log" 2>>"$tmp/up/error.log" &
pids+=($!)
nginx -c "$tmp/ngx/nginx.conf" -p "$tmp/ngx" -e "$tmp/ngx/error.log" 2>>"$tmp/ngx/error.log" &
pids+=($!)
(unset RUST_LOG; exec "$bin" serve --config "$tmp/proxy.toml") >"$tmp/cachekeeper.log" 2>&1 &
ck_pid=$!
pids+=("$ck_pid")
if [ -n "$floor_bin" ]; then
  "$floor_bin" "127.0.0.1:$floor_port" "127.0.0.1:$up_port" >"$tmp/floor.log" 2>&1 &
  pids+=($!)
fi
wait_port "$up_port" "upstream nginx"
wait_port "$ngx_port" "nginx proxy"
wait_port "$ck_port" "cachekeeper"
[ -z "$floor_bin" ] || wait_port "$floor_port" "floor proxy"

# --- the request bodies: 130 bytes exactly ---
pad_to_130() {
  python3 -c '
import json, sys
stream = sys.argv[1] == "1"
base = {"model": "claude-sonnet-4-5", "max_tokens": 64, "messages": [{"role": "user", "content": ""}]}
if stream:
    base["stream"] = True
n = 130 - len(json.dumps(base, separators=(",", ":")))
base["messages"][0]["content"] = ("Say hello in a few words, please. " * 8)[:n]
out = json.dumps(base, separators=(",", ":"))
assert len(out) == 130, len(out)
print(out, end="")' "$1"
}
lua() { # lua METHOD BODY
  local body=${2//\\/\\\\}
  body=${body//\"/\\\"}
  cat <<EOF
wrk.method = "$1"
wrk.headers["content-type"] = "application/json"
wrk.headers["x-api-key"] = "sk-ant-load-bench"
wrk.headers["anthropic-version"] = "2023-06-01"
$( [ -n "$2" ] && echo "wrk.body = \"$body\"" )
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("RESULT %.0f %.3f %.3f %d\n", summary.requests / (summary.duration / 1e6),
    latency:percentile(50) / 1000, latency:percentile(99) / 1000,
    e.connect + e.read + e.write + e.timeout + e.status))
end
EOF
}
lua POST "$(pad_to_130 0)" >"$tmp/post.lua"
lua POST "$(pad_to_130 1)" >"$tmp/sse.lua"
lua GET "" >"$tmp/get.lua"

# A check that every path answers what the upstream sends, before measuring.
check() { # check URL LUA-METHOD
  local out
  if [ "$2" = GET ]; then
    out=$(curl -sS -H 'x-api-key: sk-ant-load-bench' "$1")
  else
    out=$(curl -sS -H 'x-api-key: sk-ant-load-bench' -H 'content-type: application/json' --data-binary "$3" "$1")
  fi
  case $out in
    *'"type":"message"'* | *'"has_more":false'* | *message_stop*) ;;
    *) echo "load.sh: $1 answered: ${out:0:300}" >&2; exit 1 ;;
  esac
}

run_wrk() { # run_wrk LUA URL -> "rps p50 p99 errors"
  wrk -t"$threads" -c"$conns" -d1s -s "$1" "$2" >/dev/null 2>&1 || true # warm-up
  wrk -t"$threads" -c"$conns" -d"$duration" --latency -s "$1" "$2" 2>&1 | awk '/^RESULT/ { print $2, $3, $4, $5 }'
}

echo "benches/load.sh — $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, wrk -t$threads -c$conns -d$duration"
echo "cachekeeper: $bin ($("$bin" --version 2>/dev/null || echo '?')), $(nginx -v 2>&1 | sed 's/.*: //')"
[ -z "$floor_bin" ] || echo "floor: $floor_bin"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-28s %-12s %10s %9s %9s %7s %12s %12s\n' case path rps p50_ms p99_ms errors "+p50_ms" "+p99_ms"
for c in post sse get; do
  case $c in
    post) name="POST /v1/messages 130 B"; lua_file=$tmp/post.lua; route=json; path=/v1/messages; body=$(pad_to_130 0); method=POST ;;
    sse) name="POST /v1/messages SSE x50"; lua_file=$tmp/sse.lua; route=sse; path=/v1/messages; body=$(pad_to_130 1); method=POST ;;
    get) name="GET /v1/models"; lua_file=$tmp/get.lua; route=json; path=/v1/models; body=""; method=GET ;;
  esac
  declare -A res=()
  for target in $targets; do
    case $target in
      direct) port=$up_port ;;
      nginx) port=$ngx_port ;;
      floor) port=$floor_port ;;
      cachekeeper) port=$ck_port ;;
    esac
    url="http://127.0.0.1:$port/$route$path"
    check "$url" "$method" "$body"
    if [ "$target" = cachekeeper ] && [ "$c" = "${PERF_CASE:-post}" ] && [ -n "${PERF_OUT:-}" ]; then
      perf record -e cpu-clock -F 499 --call-graph dwarf,16384 -p "$ck_pid" -o "$PERF_OUT" -- sleep 5 >/dev/null 2>&1 &
      perf_pid=$!
      res[$target]=$(run_wrk "$lua_file" "$url")
      wait "$perf_pid" || true
    else
      res[$target]=$(run_wrk "$lua_file" "$url")
    fi
  done
  read -r d_rps d_p50 d_p99 d_err <<<"${res[direct]}"
  for target in $targets; do
    read -r rps p50 p99 err <<<"${res[$target]}"
    if [ "$target" = direct ]; then
      add50=-; add99=-
    else
      add50=$(awk -v a="$p50" -v b="$d_p50" 'BEGIN { printf "%.3f", a - b }')
      add99=$(awk -v a="$p99" -v b="$d_p99" 'BEGIN { printf "%.3f", a - b }')
    fi
    printf '%-28s %-12s %10s %9s %9s %7s %12s %12s\n' "$name" "$target" "$rps" "$p50" "$p99" "$err" "$add50" "$add99"
  done
  read -r n_rps _ n_p99 _ <<<"${res[nginx]}"
  read -r k_rps _ k_p99 _ <<<"${res[cachekeeper]}"
  awk -v k="$k_rps" -v n="$n_rps" -v kp="$k_p99" -v np="$n_p99" -v dp="$d_p99" -v name="$name" 'BEGIN {
    printf "%-28s cachekeeper/nginx throughput %.2fx; added p99 %.3f ms vs nginx %.3f ms\n", name, k / n, kp - dp, np - dp }'
  if [ -n "$floor_bin" ]; then
    read -r f_rps _ f_p99 _ <<<"${res[floor]}"
    awk -v f="$f_rps" -v n="$n_rps" -v k="$k_rps" -v fp="$f_p99" -v dp="$d_p99" -v name="$name" 'BEGIN {
      printf "%-28s floor/nginx throughput %.2fx; cachekeeper/floor %.2fx; floor added p99 %.3f ms\n", name, f / n, k / f, fp - dp }'
  fi
  unset res
done
