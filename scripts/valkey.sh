#!/usr/bin/env bash
# The suites that start a redis-server of their own, run again on a Valkey line:
#
# - 8.0, the server line after Redis 7.0 that Debian 12 ships (bookworm-backports), built from
#   Redis 7.2, so it follows 7.2's rules where they differ from 7.0's (the offset WAIT counts,
#   TIME inside a script);
# - 8.1, Debian 13's package (8.1.1): the first line with `SET ... IFEQ` (a compare-and-set Redis
#   runs itself, which Redis has from 8.4), and a MONITOR that leaves quotes unescaped
#   (test/helpers/redis-monitor.ts reads it).
#
# The binaries come from Debian's valkey-tools package, unpacked under .server-lines/ (nothing is
# installed or started as a service); `redis-server`, `redis-cli` and `redis-sentinel` there name
# Valkey's programs, first on the PATH, so the tests start Valkey where they start Redis. Debian
# 13's build needs its own C library: it is unpacked beside it and the programs run under its
# loader (`exec`, so the PID a test holds is the server's).
#
# Runs the store contract, the Redis store's tests (test/stores/redis), the HTTP table and the
# in-flight tests on the Redis store, the admin tests and the regressions that start Redis, then
# the fault suite's Redis faults (1-14, 20, 21), and on 8.1 the nemesis's Redis seeds; writes
# .test-results/valkey-<line>-main.json and .test-results/valkey-<line>-faults.json for the
# closing summary.
#
#   scripts/valkey.sh 8.0|8.1
set -euo pipefail
cd "$(dirname "$0")/.."

line="${1:?the Valkey line: 8.0 or 8.1}"
case "$line" in
  8.0) suite=bookworm-backports packages=(valkey-tools) ;;
  8.1)
    suite=trixie
    packages=(valkey-tools libc6 libssl3t64 libjemalloc2 liblzf1 libatomic1 libsystemd0 libcap2 libgcrypt20
      libgpg-error0 liblz4-1 liblzma5 libzstd1)
    ;;
  *) echo "unknown Valkey line: $line (8.0 or 8.1)" >&2 && exit 2 ;;
esac

dir="$PWD/.server-lines/valkey-$line"
if [ ! -x "$dir/usr/bin/valkey-check-rdb" ]; then
  rm -rf "$dir" && mkdir -p "$dir/apt/lists/partial" "$dir/apt/archives/partial"
  echo "deb http://deb.debian.org/debian $suite main" >"$dir/apt/sources.list"
  apt=(-o Dir::Etc::sourcelist="$dir/apt/sources.list" -o Dir::Etc::sourceparts=- -o Dir::State::Lists="$dir/apt/lists" -o APT::Sandbox::User=root
    -o Dir::Cache::archives="$dir/apt/archives" -o APT::Get::List-Cleanup=0)
  apt-get "${apt[@]}" update
  (cd "$dir/apt" && apt-get "${apt[@]}" download "${packages[@]}")
  for deb in "$dir"/apt/*.deb; do dpkg-deb -x "$deb" "$dir"; done
fi
mkdir -p "$dir/bin" .test-results
# valkey-server is a link to valkey-check-rdb: the program chooses its part by the name it runs under.
if [ "$line" = 8.0 ]; then
  ln -sf "$dir/usr/bin/valkey-check-rdb" "$dir/bin/redis-server"
  ln -sf "$dir/usr/bin/valkey-check-rdb" "$dir/bin/redis-sentinel"
  ln -sf "$dir/usr/bin/valkey-cli" "$dir/bin/redis-cli"
else
  libs="$dir/usr/lib/x86_64-linux-gnu"
  for name in redis-server redis-sentinel redis-cli; do
    program=valkey-check-rdb
    [ "$name" = redis-cli ] && program=valkey-cli
    printf '#!/bin/sh\nexec "%s/ld-linux-x86-64.so.2" --library-path "%s" --argv0 %s "%s/usr/bin/%s" "$@"\n' \
      "$libs" "$libs" "$name" "$dir" "$program" >"$dir/bin/$name"
    chmod +x "$dir/bin/$name"
  done
fi
export PATH="$dir/bin:$PATH"
version=$(redis-server --version)
case "$version" in
  "Valkey server v=$line."*) echo "$version: the Redis suites" ;;
  *) echo "expected Valkey $line as redis-server, found: $version" >&2 && exit 1 ;;
esac

# The HTTP table and the in-flight tests on the Redis store only (the other stores' rows do not
# touch Valkey); the regressions that start a Redis server.
npx vitest run test/contract/redis.test.ts test/stores/redis test/http test/admin \
  test/regressions/issue-10-example-practises-readme.test.ts test/regressions/issue-22-example-cli-hint.test.ts \
  test/regressions/issue-24-cli.test.ts test/regressions/issue-24-give-back.test.ts \
  test/regressions/issue-24-store-call-deadlines.test.ts \
  --testNamePattern '^(?!HTTP table on|inFlight waiting on).*|^(HTTP table|inFlight waiting) on \S+ with (the redis store|Redis only)' \
  --typecheck.enabled=false \
  --reporter=default --reporter=json --outputFile.json=".test-results/valkey-$line-main.json"
FAULTS_RESULT=".test-results/valkey-$line-faults.json" npx vitest run --config vitest.faults.config.ts \
  test/faults/0[1-9]-*.test.ts test/faults/1[0-4]-*.test.ts test/faults/2[01]-*.test.ts

# On 8.1, the newest line, the nemesis's real-build Redis seeds too (test/nemesis/seeds.test.ts):
# Fastify on one server (one seed with steps of the store's clock), Express on a Cluster with a
# reshard, Fastify on Sentinel with durability and a failover. The broken builds are Redis 7.0's.
if [ "$line" = 8.1 ]; then
  npx vitest run --config vitest.nemesis.config.ts test/nemesis/seeds.test.ts \
    --testNamePattern '^nemesis: the short seed set (redis|cluster|sentinel)'
fi
