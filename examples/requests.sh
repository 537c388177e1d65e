#!/usr/bin/env bash
# A curl walk-through of the example API: first call, replay, different body (422),
# concurrent retry (409) and missing key (400). Start the app first (npm run example, or
# npm run example:express), then: bash examples/requests.sh   [BASE=http://127.0.0.1:3000]
set -euo pipefail
BASE=${BASE:-http://127.0.0.1:3000}
USER_NAME=${USER_NAME:-alice-$RANDOM}
KEY="order-$(date +%s)-$RANDOM"

show() { # prints the status line, the headers that matter and the body
  sed -n -e '1p' -e '/^[Ll]ocation:/p' -e '/^[Ii]dempotent-[Rr]eplayed:/p' -e '/^[Rr]etry-[Aa]fter:/p' \
    -e '/^[Cc]ontent-[Tt]ype:/p' -e '$p' | tr -d '\r'
  echo
}
post() { # post <key or -> <json>
  local key_header=()
  [ "$1" != "-" ] && key_header=(-H "Idempotency-Key: $1")
  curl -sS -i -X POST "$BASE/orders" -H "Authorization: Bearer $USER_NAME" \
    -H 'Content-Type: application/json' "${key_header[@]}" -d "$2"
}

echo "== 1. first call: runs the handler, 201"
post "$KEY" '{"item":"book","qty":1}' | show

echo "== 2. the same request again: the stored answer, Idempotent-Replayed: true"
post "$KEY" '{"item":"book","qty":1}' | show

echo "== 3. the same key with a different body: 422"
post "$KEY" '{"item":"pen","qty":2}' | show

echo "== 4. a retry while the first is still running: 409 with Retry-After"
SLOW="slow-$KEY"
post "$SLOW" '{"item":"lamp","qty":1,"delayMs":1500}' > /tmp/idemkit-first.$$ &
FIRST=$!
sleep 0.3
post "$SLOW" '{"item":"lamp","qty":1,"delayMs":1500}' | show
wait "$FIRST"
echo "   (the first one answered:)"
show < /tmp/idemkit-first.$$
rm -f /tmp/idemkit-first.$$

echo "== 5. no Idempotency-Key: 400"
post - '{"item":"book","qty":1}' | show

echo "== orders created for $USER_NAME (expect 2: book and lamp)"
curl -sS "$BASE/orders" -H "Authorization: Bearer $USER_NAME"
echo
