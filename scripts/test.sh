#!/usr/bin/env bash
# The project's test command (README): Rust unit + integration tests, then the end-to-end suite
# that drives the real binary with the official anthropic / openai Python SDKs.
#
# The Python side needs tests/e2e/requirements.txt installed; .ci/run puts it in .venv:
#   python3 -m venv .venv && .venv/bin/pip install -r tests/e2e/requirements.txt
set -euo pipefail
cd "$(dirname "$0")/.."

echo "==> cargo test --all-targets"
cargo test --all-targets

# `cargo test` has already built the binary (integration tests run it), with the same
# feature set; a separate `cargo build` would resolve features without the dev-dependencies
# and recompile half the dependency tree.

target_dir="${CARGO_TARGET_DIR:-target}"
export CACHEKEEPER_BIN="${CACHEKEEPER_BIN:-$target_dir/debug/cachekeeper}"
if [[ ! -x "$CACHEKEEPER_BIN" ]]; then
  echo "==> cargo build (binary for the end-to-end tests)"
  cargo build --bin cachekeeper
fi

if [[ -x .venv/bin/python ]]; then
  py=.venv/bin/python
else
  py=python3
fi
if ! "$py" -c 'import anthropic, openai, pytest' 2>/dev/null; then
  echo "error: $py lacks the e2e dependencies; run:" >&2
  echo "  python3 -m venv .venv && .venv/bin/pip install -r tests/e2e/requirements.txt" >&2
  exit 1
fi

echo "==> end-to-end tests ($py -m pytest -q tests/e2e, binary $CACHEKEEPER_BIN)"
"$py" -m pytest -q tests/e2e
