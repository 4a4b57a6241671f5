#!/usr/bin/env bash
# The project's one test command (docs/dev/testing.md#the-test-command, and what .ci/run calls): installs what the
# tests need, then runs everything.
#
#   1. system packages (Debian names, SYSTEM_PACKAGES below): installed with apt-get when run
#      as root (as CI does); otherwise the command stops and names the ones to install. A
#      missing package never skips its tests silently;
#   2. the Python venv for the end-to-end suite: `.venv`, created if missing, and
#      tests/e2e/requirements.txt installed into it when it changed since the last install;
#   3. `cargo test --workspace --all-targets` (Rust unit, integration and property tests of
#      every crate of the workspace);
#   4. the end-to-end suite (`pytest tests/e2e`): the real binary driven by the official
#      anthropic / openai / google-genai Python SDKs against a mock provider.
#
# Environment: CARGO_TARGET_DIR (as cargo), CACHEKEEPER_BIN (the binary the e2e suite runs;
# default <target dir>/debug/cachekeeper), PYTHON (the interpreter that makes the venv;
# default python3).
set -euo pipefail
cd "$(dirname "$0")/.."

# System packages the tests need: "debian-package|shell check that succeeds when it is present".
# python3-venv: Debian's python3 needs it for `python3 -m venv` (ensurepip); other Pythons
# (pyenv, python.org builds) have it built in, so the check passes there without it.
# chromium + chromium-driver: the dashboard test (tests/e2e/test_dashboard.py) drives Debian's
# browser headless through Debian's driver, so nothing downloads a browser or a driver.
# redis-server: the Redis state backend's tests start it on a free loopback port (no
# persistence) and kill it at the end; without it those tests fail, naming it.
SYSTEM_PACKAGES=(
  "python3-venv|${PYTHON:-python3} -c 'import ensurepip, venv'"
  "chromium|command -v chromium"
  "chromium-driver|command -v chromedriver"
  "redis-server|command -v redis-server"
)

echo "==> system packages"
missing=()
for entry in "${SYSTEM_PACKAGES[@]}"; do
  pkg="${entry%%|*}"
  check="${entry#*|}"
  if ! bash -c "$check" >/dev/null 2>&1; then
    missing+=("$pkg")
  fi
done
if ((${#missing[@]} > 0)); then
  if [[ "$(id -u)" -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
    echo "installing with apt-get: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}"
    still=()
    for entry in "${SYSTEM_PACKAGES[@]}"; do
      if ! bash -c "${entry#*|}" >/dev/null 2>&1; then
        still+=("${entry%%|*}")
      fi
    done
    if ((${#still[@]} > 0)); then
      echo "error: still missing after apt-get install: ${still[*]}" >&2
      exit 1
    fi
  else
    echo "error: the tests need these system packages, which are not installed:" >&2
    echo "  ${missing[*]}" >&2
    echo "install them (Debian/Ubuntu: sudo apt-get install ${missing[*]}) and run again," >&2
    echo "or run this command as root to have it install them." >&2
    exit 1
  fi
fi
echo "ok"

echo "==> python venv for the end-to-end tests (.venv)"
req=tests/e2e/requirements.txt
stamp=.venv/.requirements.sha256
want="$(sha256sum "$req" | cut -d' ' -f1)"
# A venv whose creation was interrupted has a python but no pip: made again.
if [[ ! -x .venv/bin/python ]] || ! .venv/bin/python -c 'import pip' >/dev/null 2>&1; then
  rm -rf .venv
  "${PYTHON:-python3}" -m venv .venv
fi
if [[ "$(cat "$stamp" 2>/dev/null)" != "$want" ]]; then
  .venv/bin/python -m pip install --disable-pip-version-check --quiet -r "$req"
  echo "$want" >"$stamp"
  echo "installed $req"
else
  echo "up to date"
fi

echo "==> cargo test --workspace --all-targets"
cargo test --workspace --all-targets

# `cargo test` has already built the binary (integration tests run it), with the same
# feature set; a separate `cargo build` would resolve features without the dev-dependencies
# and recompile half the dependency tree.
target_dir="${CARGO_TARGET_DIR:-target}"
export CACHEKEEPER_BIN="${CACHEKEEPER_BIN:-$target_dir/debug/cachekeeper}"
if [[ ! -x "$CACHEKEEPER_BIN" ]]; then
  echo "==> cargo build (binary for the end-to-end tests)"
  cargo build --bin cachekeeper
fi

echo "==> end-to-end tests (pytest tests/e2e, binary $CACHEKEEPER_BIN)"
.venv/bin/python -m pytest -q tests/e2e
