#!/usr/bin/env bash
# Installs the peers benches/load.sh measures beside cachekeeper (issue 27, "Targets"), pinned,
# into a directory outside git: nothing of their code is committed.
#
# - LiteLLM proxy: `litellm[proxy]==1.108.7` in a Python venv, DIR/litellm (pip, PyPI).
# - Portkey's AI gateway: `@portkey-ai/gateway@1.15.2` under an npm prefix, DIR/portkey (npm).
#
# Usage: benches/peers.sh [DIR]      default DIR: target/peers (ignored by git, like target/)
#   PYTHON=python3.11 picks the interpreter for the venv (default python3; LiteLLM 1.108.7
#   needs Python >= 3.9).
# Then: benches/load.sh -f target/release/examples/floor_proxy -p DIR (load.sh looks in
# target/peers by default).
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-$repo/target/peers}
python=${PYTHON:-python3}
litellm_version=1.108.7
portkey_version=1.15.2

for tool in "$python" npm; do
  command -v "$tool" >/dev/null || { echo "peers.sh: $tool not found" >&2; exit 1; }
done
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)

echo "peers.sh: litellm[proxy]==$litellm_version -> $dir/litellm"
[ -x "$dir/litellm/bin/python" ] || "$python" -m venv "$dir/litellm"
"$dir/litellm/bin/python" -m pip install --quiet --upgrade pip
"$dir/litellm/bin/python" -m pip install --quiet "litellm[proxy]==$litellm_version"

echo "peers.sh: @portkey-ai/gateway@$portkey_version -> $dir/portkey"
npm install --silent --no-fund --no-audit --prefix "$dir/portkey" "@portkey-ai/gateway@$portkey_version"

echo "peers.sh: installed:"
echo "  litellm $("$dir/litellm/bin/python" -c 'import importlib.metadata as m; print(m.version("litellm"))')"
echo "  @portkey-ai/gateway $(node -p "require('$dir/portkey/node_modules/@portkey-ai/gateway/package.json').version")"
