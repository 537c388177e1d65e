#!/usr/bin/env bash
# The suites that start a redis-server of their own, run again on Valkey 8.0: the server line
# after Redis 7.0 that Debian 12 ships (bookworm-backports), built from Redis 7.2, so it follows
# 7.2's rules where they differ from 7.0's (the offset WAIT counts, TIME inside a script). The
# binary comes from Debian's valkey-tools package, unpacked under .server-lines/ (nothing is
# installed or started as a service); `redis-server`, `redis-cli` and `redis-sentinel` there name
# Valkey's programs, first on the PATH, so the tests start Valkey where they start Redis.
#
# Runs the store contract, the Redis store's tests (test/stores/redis), the HTTP table and the
# in-flight tests on the Redis store, the admin tests and the regressions that start Redis, then
# the fault suite's Redis faults (1-14, 20, 21); writes .test-results/valkey-main.json and
# .test-results/valkey-faults.json for the closing summary.
#
#   scripts/valkey.sh
set -euo pipefail
cd "$(dirname "$0")/.."

dir="$PWD/.server-lines/valkey-8.0"
if [ ! -x "$dir/usr/bin/valkey-check-rdb" ]; then
  rm -rf "$dir" && mkdir -p "$dir/apt/lists/partial" "$dir/apt/archives/partial"
  echo 'deb http://deb.debian.org/debian bookworm-backports main' >"$dir/apt/sources.list"
  apt=(-o Dir::Etc::sourcelist="$dir/apt/sources.list" -o Dir::Etc::sourceparts=- -o Dir::State::Lists="$dir/apt/lists" -o APT::Sandbox::User=root
    -o Dir::Cache::archives="$dir/apt/archives" -o APT::Get::List-Cleanup=0)
  apt-get "${apt[@]}" update
  (cd "$dir/apt" && apt-get "${apt[@]}" download valkey-tools valkey-server)
  for deb in "$dir"/apt/*.deb; do dpkg-deb -x "$deb" "$dir"; done
fi
mkdir -p "$dir/bin" .test-results
# valkey-server is a link to valkey-check-rdb: the program chooses its part by the name it runs under.
ln -sf "$dir/usr/bin/valkey-check-rdb" "$dir/bin/redis-server"
ln -sf "$dir/usr/bin/valkey-check-rdb" "$dir/bin/redis-sentinel"
ln -sf "$dir/usr/bin/valkey-cli" "$dir/bin/redis-cli"
export PATH="$dir/bin:$PATH"
version=$(redis-server --version)
case "$version" in
  "Valkey server v=8."*) echo "$version: the Redis suites" ;;
  *) echo "expected Valkey 8 as redis-server, found: $version" >&2 && exit 1 ;;
esac

# The HTTP table and the in-flight tests on the Redis store only (the other stores' rows do not
# touch Valkey); the regressions that start a Redis server.
npx vitest run test/contract/redis.test.ts test/stores/redis test/http test/admin \
  test/regressions/issue-10-example-practises-readme.test.ts test/regressions/issue-22-example-cli-hint.test.ts \
  test/regressions/issue-24-cli.test.ts test/regressions/issue-24-give-back.test.ts \
  test/regressions/issue-24-store-call-deadlines.test.ts \
  --testNamePattern '^(?!HTTP table on|inFlight waiting on).*|^(HTTP table|inFlight waiting) on \S+ with (the redis store|Redis only)' \
  --typecheck.enabled=false \
  --reporter=default --reporter=json --outputFile.json=.test-results/valkey-main.json
FAULTS_RESULT=.test-results/valkey-faults.json npx vitest run --config vitest.faults.config.ts \
  test/faults/0[1-9]-*.test.ts test/faults/1[0-4]-*.test.ts test/faults/2[01]-*.test.ts
