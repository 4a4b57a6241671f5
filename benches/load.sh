#!/usr/bin/env bash
# Pass-through load: wrk directly against a fixed-response upstream, through nginx as a reverse
# proxy, through cachekeeper and (when installed) through the peers a user would pick instead,
# side by side in one run (issue 12, "Targets"; the peers and the floor: issue 27, "Targets").
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
# - Peers, optional, installed outside git by benches/peers.sh (default target/peers; -p DIR);
#   one not installed is skipped, with how to install it:
#   - litellm: LiteLLM proxy (`litellm[proxy]==1.108.7`), `litellm --config FILE --host
#     127.0.0.1 --port PORT` (one uvicorn worker, its default), LITELLM_LOCAL_MODEL_COST_MAP=True
#     (no price-list download), a master key and no database. Measured on its Anthropic-compatible
#     `POST /v1/messages` (the client sends the master key as `x-api-key`; LiteLLM sends the
#     provider key from its config), not on its `/anthropic` pass-through: /v1/messages is the
#     endpoint LiteLLM's own setup for Anthropic clients (ANTHROPIC_BASE_URL at the proxy) uses,
#     and the one where what a user runs LiteLLM for (its keys, spend tracking, routing,
#     fallbacks) applies; the pass-through only forwards to one base URL. Its config has one
#     `anthropic/claude-sonnet-4-5` deployment per upstream location (`api_base`
#     http://127.0.0.1:UPSTREAM/json and .../sse); as this upstream picks the reply by path (it
#     cannot read the body), the client's `x-litellm-tags: json|sse` header picks the deployment
#     (`router_settings: enable_tag_filtering`), so every path gets the same body bytes. GET
#     /v1/models is not measured: LiteLLM answers it from its own model list, not upstream.
#   - portkey: Portkey's AI gateway (npm `@portkey-ai/gateway@1.15.2`), `node
#     .../build/start-server.js --port=PORT --headless` (it listens on every interface, its
#     default), headers `x-portkey-provider: anthropic` and `x-portkey-custom-host:
#     http://127.0.0.1:UPSTREAM/ROUTE/v1`, the Anthropic key forwarded as sent. Non-streaming
#     only: its Anthropic streaming answers 500 on this Node (v20): where the gateway hands the
#     upstream's fetch Response on as it is, it appends its x-portkey-* headers to that
#     Response's headers, which Node's fetch makes immutable ("TypeError: immutable", in its
#     log), so its SSE row says n/a. Its GET /v1/models (forwarded by its proxy route) fails
#     the same way; the check reports it.
# - Before measuring, every path is checked once per case: status 200 and the upstream's body
#   (the JSON, or the SSE events and their data, parsed and compared). A core path that fails
#   stops the script; a peer that fails is reported on its row and not measured.
# - Cases: POST /v1/messages with a 130-byte body; the same with `"stream":true` answered by
#   the 50-event SSE stream; GET /v1/models.
#
# Prints, per case and path: requests/s, p50 and p99 latency (ms, wrk's --latency), errors
# (wrk's socket errors and non-2xx answers), each proxy's added p50 / p99 over direct and its
# requests/s as a multiple of the floor's (with -f); then cachekeeper's (and the floor's)
# throughput as a multiple of nginx's.
#
# Usage: benches/load.sh [-c CONNECTIONS] [-d DURATION] [-t THREADS] [-b BINARY] [-f FLOOR_BIN]
#                        [-p PEERS_DIR]
#   defaults: -c 16 -d 8s -t 2 -b target/release/cachekeeper (build it: cargo build --release)
#   -f target/release/examples/floor_proxy adds the floor target (cargo build --release
#   --example floor_proxy); without -f it is not measured.
#   -p DIR: where benches/peers.sh installed the peers (default target/peers); -p none skips them.
#   PERF_OUT=FILE also records a `perf record --call-graph dwarf` profile of cachekeeper during
#   one case (PERF_CASE=post|sse|get, default post).
# Needs: nginx, wrk, python3 (free ports, the checks; node for portkey). Everything runs in a
# temporary directory, removed on exit with every process this script started.
set -euo pipefail

conns=16
duration=8s
threads=2
repo=$(cd "$(dirname "$0")/.." && pwd)
bin="$repo/target/release/cachekeeper"
floor_bin=
peers_dir="$repo/target/peers"
while getopts "c:d:t:b:f:p:h" opt; do
  case $opt in
    c) conns=$OPTARG ;;
    d) duration=$OPTARG ;;
    t) threads=$OPTARG ;;
    b) bin=$OPTARG ;;
    f) floor_bin=$OPTARG ;;
    p) peers_dir=$OPTARG ;;
    *) sed -n '2,61p' "$0"; exit 2 ;;
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

# --- the peers (benches/peers.sh installs them; pinned there) ---
litellm_bin="$peers_dir/litellm/bin/litellm"
portkey_js="$peers_dir/portkey/node_modules/@portkey-ai/gateway/build/start-server.js"
peer_notes=()
if [ "$peers_dir" = none ]; then
  peer_notes+=("peers: skipped (-p none)")
else
  if [ -x "$litellm_bin" ]; then
    targets="$targets litellm"
    litellm_version=$("$peers_dir/litellm/bin/python" -c 'import importlib.metadata as m; print(m.version("litellm"))' 2>/dev/null || echo '?')
  else
    peer_notes+=("litellm: not installed in $peers_dir, skipped (install: benches/peers.sh $peers_dir)")
  fi
  if [ -f "$portkey_js" ] && command -v node >/dev/null; then
    targets="$targets portkey"
    portkey_version=$(node -p "require(process.argv[1]).version" "$peers_dir/portkey/node_modules/@portkey-ai/gateway/package.json" 2>/dev/null || echo '?')
  elif [ -f "$portkey_js" ]; then
    peer_notes+=("portkey: node not found, skipped")
  else
    peer_notes+=("portkey: not installed in $peers_dir, skipped (install: benches/peers.sh $peers_dir)")
  fi
fi

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
wait_port() { # wait_port PORT WHAT [TRIES of 50 ms, default 200]
  local port=$1 what=$2
  for _ in $(seq 1 "${3:-200}"); do
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
litellm_port=$(free_port)
portkey_port=$(free_port)

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

# --- LiteLLM: one deployment per upstream location, picked by the x-litellm-tags header ---
litellm_key=sk-litellm-load-bench
cat >"$tmp/litellm.yaml" <<EOF
# written by benches/load.sh
model_list:
  - model_name: claude-sonnet-4-5
    litellm_params:
      model: anthropic/claude-sonnet-4-5
      api_base: http://127.0.0.1:$up_port/json
      api_key: sk-ant-load-bench
      tags: ["json"]
  - model_name: claude-sonnet-4-5
    litellm_params:
      model: anthropic/claude-sonnet-4-5
      api_base: http://127.0.0.1:$up_port/sse
      api_key: sk-ant-load-bench
      tags: ["sse"]
router_settings:
  enable_tag_filtering: true
general_settings:
  master_key: $litellm_key
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
case " $targets " in *" litellm "*)
  (cd "$tmp" && LITELLM_LOCAL_MODEL_COST_MAP=True exec "$litellm_bin" --config "$tmp/litellm.yaml" \
    --host 127.0.0.1 --port "$litellm_port") >"$tmp/litellm.log" 2>&1 &
  pids+=($!) ;;
esac
case " $targets " in *" portkey "*)
  (cd "$tmp" && exec node "$portkey_js" --port="$portkey_port" --headless) >"$tmp/portkey.log" 2>&1 &
  pids+=($!) ;;
esac
wait_port "$up_port" "upstream nginx"
wait_port "$ngx_port" "nginx proxy"
wait_port "$ck_port" "cachekeeper"
[ -z "$floor_bin" ] || wait_port "$floor_port" "floor proxy"
# LiteLLM imports for several seconds before it listens (more on a busy machine): up to 120 s.
case " $targets " in *" litellm "*) wait_port "$litellm_port" "litellm" 2400 ;; esac
case " $targets " in *" portkey "*) wait_port "$portkey_port" "portkey" 600 ;; esac

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
# The headers each path gets: the Anthropic client's, plus what the peer needs to route it.
headers_for() { # headers_for TARGET ROUTE -> "name: value" lines
  echo "content-type: application/json"
  echo "anthropic-version: 2023-06-01"
  case $1 in
    litellm)
      echo "x-api-key: $litellm_key"
      echo "x-litellm-tags: $2" ;;
    portkey)
      echo "x-api-key: sk-ant-load-bench"
      echo "x-portkey-provider: anthropic"
      echo "x-portkey-custom-host: http://127.0.0.1:$up_port/$2/v1" ;;
    *)
      echo "x-api-key: sk-ant-load-bench" ;;
  esac
}
lua_escape() { local s=${1//\\/\\\\}; printf '%s' "${s//\"/\\\"}"; }
lua() { # lua METHOD BODY HEADER-LINES
  local name value
  echo "wrk.method = \"$1\""
  while IFS= read -r line; do
    [ -n "$line" ] || continue
    name=${line%%: *}
    value=${line#*: }
    echo "wrk.headers[\"$name\"] = \"$(lua_escape "$value")\""
  done <<<"$3"
  [ -z "$2" ] || echo "wrk.body = \"$(lua_escape "$2")\""
  cat <<'EOF'
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("RESULT %.0f %.3f %.3f %d\n", summary.requests / (summary.duration / 1e6),
    latency:percentile(50) / 1000, latency:percentile(99) / 1000,
    e.connect + e.read + e.write + e.timeout + e.status))
end
EOF
}

# What the upstream answers, to check every path against before measuring.
printf '%s' "$json_reply" >"$tmp/expect.post"
cp "$tmp/up/sse.events" "$tmp/expect.sse"
printf '%s' "$models_reply" >"$tmp/expect.get"
cat >"$tmp/check.py" <<'EOF'
# check.py URL METHOD BODY EXPECTED-FILE, headers "name: value" on stdin: exit 0 when the answer
# is a 200 with the expected body (JSON compared parsed; SSE as its list of (event, parsed data)),
# else prints what came back and exits 1.
import http.client, json, sys, urllib.parse

url, method, body, expected_file = sys.argv[1:5]
headers = dict(l.split(": ", 1) for l in sys.stdin.read().splitlines() if l)
if method == "GET":
    headers.pop("content-type", None)
u = urllib.parse.urlsplit(url)
conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
conn.request(method, u.path, body=body.encode() if body else None, headers=headers)
resp = conn.getresponse()
got = resp.read().decode("utf-8", "replace")
expected = open(expected_file).read()

def sse(text):
    events, name, data = [], None, []
    for line in text.replace("\r\n", "\n").split("\n"):
        if not line:
            if data:
                events.append((name, json.loads("\n".join(data))))
            name, data = None, []
        elif line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].strip())
    if data:
        events.append((name, json.loads("\n".join(data))))
    return events

try:
    same = resp.status == 200 and (
        sse(got) == sse(expected) if expected.startswith("event:") else json.loads(got) == json.loads(expected))
except ValueError:
    same = False
if not same:
    print(f"HTTP {resp.status}: {' '.join(got.split())[:200]}")
    sys.exit(1)
EOF
check() { # check URL METHOD BODY EXPECTED-FILE HEADER-LINES -> prints why when it fails
  python3 "$tmp/check.py" "$1" "$2" "$3" "$4" <<<"$5"
}

run_wrk() { # run_wrk LUA URL -> "rps p50 p99 errors"
  wrk -t"$threads" -c"$conns" -d1s -s "$1" "$2" >/dev/null 2>&1 || true # warm-up
  wrk -t"$threads" -c"$conns" -d"$duration" --latency -s "$1" "$2" 2>&1 | awk '/^RESULT/ { print $2, $3, $4, $5 }'
}

echo "benches/load.sh — $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, wrk -t$threads -c$conns -d$duration"
echo "cachekeeper: $bin ($("$bin" --version 2>/dev/null || echo '?')), $(nginx -v 2>&1 | sed 's/.*: //')"
[ -z "$floor_bin" ] || echo "floor: $floor_bin"
case " $targets " in *" litellm "*) echo "litellm: $litellm_version ($litellm_bin)" ;; esac
case " $targets " in *" portkey "*) echo "portkey: @portkey-ai/gateway $portkey_version, node $(node --version)" ;; esac
for note in "${peer_notes[@]}"; do echo "$note"; done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-28s %-12s %10s %9s %9s %7s %9s %9s %8s\n' case path rps p50_ms p99_ms errors "+p50_ms" "+p99_ms" "x_floor"
for c in post sse get; do
  case $c in
    post) name="POST /v1/messages 130 B"; route=json; path=/v1/messages; body=$(pad_to_130 0); method=POST ;;
    sse) name="POST /v1/messages SSE x50"; route=sse; path=/v1/messages; body=$(pad_to_130 1); method=POST ;;
    get) name="GET /v1/models"; route=json; path=/v1/models; body=""; method=GET ;;
  esac
  declare -A res=() why=()
  for target in $targets; do
    case $target in
      direct) url="http://127.0.0.1:$up_port/$route$path" ;;
      nginx) url="http://127.0.0.1:$ngx_port/$route$path" ;;
      floor) url="http://127.0.0.1:$floor_port/$route$path" ;;
      cachekeeper) url="http://127.0.0.1:$ck_port/$route$path" ;;
      litellm) url="http://127.0.0.1:$litellm_port$path" ;;
      portkey) url="http://127.0.0.1:$portkey_port$path" ;;
    esac
    if [ "$target" = litellm ] && [ "$c" = get ]; then
      why[$target]="n/a: LiteLLM answers /v1/models from its own model list, not upstream"; continue
    fi
    if [ "$target" = portkey ] && [ "$c" = sse ]; then
      why[$target]="n/a: Portkey 1.15.2's Anthropic streaming answers 500 here (TypeError: immutable)"; continue
    fi
    hdrs=$(headers_for "$target" "$route")
    lua "$method" "$body" "$hdrs" >"$tmp/$target.$c.lua"
    if ! bad=$(check "$url" "$method" "$body" "$tmp/expect.$c" "$hdrs"); then
      case $target in
        litellm | portkey) why[$target]="error, not measured: $bad"; continue ;;
        *) echo "load.sh: $target ($url) answered: $bad" >&2; exit 1 ;;
      esac
    fi
    if [ "$target" = cachekeeper ] && [ "$c" = "${PERF_CASE:-post}" ] && [ -n "${PERF_OUT:-}" ]; then
      perf record -e cpu-clock -F 499 --call-graph dwarf,16384 -p "$ck_pid" -o "$PERF_OUT" -- sleep 5 >/dev/null 2>&1 &
      perf_pid=$!
      res[$target]=$(run_wrk "$tmp/$target.$c.lua" "$url")
      wait "$perf_pid" || true
    else
      res[$target]=$(run_wrk "$tmp/$target.$c.lua" "$url")
    fi
  done
  read -r d_rps d_p50 d_p99 d_err <<<"${res[direct]}"
  f_rps=
  [ -z "$floor_bin" ] || read -r f_rps _ _ _ <<<"${res[floor]}"
  for target in $targets; do
    if [ -n "${why[$target]:-}" ]; then
      printf '%-28s %-12s %s\n' "$name" "$target" "${why[$target]}"
      continue
    fi
    read -r rps p50 p99 err <<<"${res[$target]}"
    if [ "$target" = direct ]; then
      add50=-; add99=-; xf=-
    else
      add50=$(awk -v a="$p50" -v b="$d_p50" 'BEGIN { printf "%.3f", a - b }')
      add99=$(awk -v a="$p99" -v b="$d_p99" 'BEGIN { printf "%.3f", a - b }')
      if [ -n "$f_rps" ]; then xf=$(awk -v a="$rps" -v f="$f_rps" 'BEGIN { printf "%.3gx", a / f }'); else xf=-; fi
    fi
    printf '%-28s %-12s %10s %9s %9s %7s %9s %9s %8s\n' "$name" "$target" "$rps" "$p50" "$p99" "$err" "$add50" "$add99" "$xf"
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
  unset res why
done
