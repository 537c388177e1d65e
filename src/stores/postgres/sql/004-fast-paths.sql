-- Schema 4: the claim and the completion as the calls of a first execution and of a replay need
-- them, under new names (`<table>_claim_v3`, `<table>_complete_v3`), beside schema 2's functions,
-- which are left as they are: instances of schema 3, mid rolling deploy, keep calling theirs on
-- the same rows, with the same answers. The record's layout does not change. The other calls
-- (inspect, start, renew, mark failed, release, sweep) stay schema 2's functions.
--
-- What changes, with the same behaviour (docs/postgresql.md "One round trip per operation"):
--
-- - claim writes a new key's row itself, one INSERT ... ON CONFLICT DO NOTHING inline after the
--   one read that finds no row, instead of through `_hold_v2` (a function call of its own);
--   `lock_timeout` is set only on the paths that can wait for a row (the insert, the lock), not
--   before a replay, a mismatch or an answer in flight, which are decided from that one read;
-- - the completion is one function: it locks the row, reads the clock after the lock, checks
--   (`_check_v2`) and writes, without the calls of `_transition_v2` and `_holder_v2`;
-- - both answer in the few columns the caller reads: claim a packed text (the outcome and its
--   numbers, space separated), the response, its codec and policy; the completion one packed text.

-- Claim (claim.lua), the steps 1-8 of docs/design.md §3. The answer `r`:
--   ACQUIRED | TAKEN_OVER | REPLAYED_ACQUIRE <state> <attempt> <rev> <lease_until ms>
--   COMPLETED_REPLAY <replay_until ms> (and resp, codec, policy)
--   IN_PROGRESS <retry_after_ms>
--   RECOVERY_REQUIRED <ABANDONED | EXPIRED_EXECUTION>
--   FINGERPRINT_MISMATCH
CREATE OR REPLACE FUNCTION {{schema}}.{{table}}_claim_v3(
  p_key text, p_owner text, p_fp text, p_op text, p_codec text, p_policy text, p_start boolean,
  p_takeover boolean, p_lease_ms bigint, p_retention_ms bigint, p_legacy text[], p_lock_timeout_ms integer,
  OUT r text, OUT resp bytea, OUT codec text, OUT policy text)
LANGUAGE plpgsql AS $$
DECLARE
  x {{schema}}.{{table}}%ROWTYPE;
  v_now timestamptz;
  v_state text := CASE WHEN p_start THEN 'EXECUTING' ELSE 'CLAIMED' END;
  v_found boolean;
  v_locked boolean := false;
BEGIN
  -- The row as last committed, read without a lock: a key that is there is decided from this one
  -- read when the answer changes nothing (a replay, a mismatch, a request in flight).
  SELECT * INTO x FROM {{schema}}.{{table}} t WHERE t.key = p_key;
  v_found := FOUND;
  IF NOT v_found THEN
    -- Step 1 on an absent row: the insert is the lock (a concurrent insert of the key makes it
    -- wait, at most lock_timeout, then write nothing).
    PERFORM set_config('lock_timeout', p_lock_timeout_ms::text || 'ms', true);
    v_now := date_trunc('milliseconds', clock_timestamp());
    INSERT INTO {{schema}}.{{table}} AS t
      (key, state, owner, attempt, rev, op, fp, codec, policy, lease_until, replay_until, expires_at, resp, created_at, updated_at)
    VALUES (p_key, v_state, p_owner, 1, 1, p_op, p_fp, p_codec, p_policy, v_now + p_lease_ms * interval '1 millisecond', NULL,
      v_now + p_lease_ms * interval '1 millisecond' + p_retention_ms * interval '1 millisecond', NULL, v_now, v_now)
    ON CONFLICT (key) DO NOTHING;
    IF FOUND THEN
      r := 'ACQUIRED ' || v_state || ' 1 1 ' || {{schema}}.{{table}}_ms_v2(v_now + p_lease_ms * interval '1 millisecond');
      RETURN;
    END IF;
    -- A concurrent claim inserted it first: decided under its lock, below.
  ELSIF x.state = 'EXECUTING' THEN
    SELECT h.lease_until, h.expires_at INTO x.lease_until, x.expires_at
    FROM {{schema}}.{{table}}_held_v2(p_key, x.attempt, x.lease_until, x.expires_at) h;
  END IF;
  -- From here on as schema 3's claim (003-holder.sql), step for step.
  LOOP
    -- One clock reading per pass, after the row was read (and, on the second pass, locked).
    v_now := date_trunc('milliseconds', clock_timestamp());
    IF v_found AND {{schema}}.{{table}}_live_v2(x.state, x.replay_until, x.expires_at, v_now) THEN
      -- Step 2: before any mutation, in every state. A legacy fingerprint counts as a match.
      IF x.fp <> p_fp AND NOT (x.fp = ANY(p_legacy)) THEN
        r := 'FINGERPRINT_MISMATCH';
        RETURN;
      END IF;
      -- Step 3.
      IF x.state = 'COMPLETED' THEN
        r := 'COMPLETED_REPLAY ' || {{schema}}.{{table}}_ms_v2(x.replay_until);
        resp := x.resp; codec := x.codec; policy := x.policy;
        RETURN;
      END IF;
      -- Step 4.
      IF x.state = 'ABANDONED' THEN
        r := 'RECOVERY_REQUIRED ABANDONED';
        RETURN;
      END IF;
      -- Step 5: the caller's own earlier claim landed; only a record it can still hold.
      IF x.owner = p_owner AND x.state IN ('CLAIMED', 'EXECUTING') THEN
        r := 'REPLAYED_ACQUIRE ' || x.state || ' ' || x.attempt || ' ' || x.rev || ' ' || {{schema}}.{{table}}_ms_v2(x.lease_until);
        RETURN;
      END IF;
      -- Step 8 (disjoint from 6 and 7, which need a lease run out or FAILED_RETRYABLE).
      IF x.state IN ('CLAIMED', 'EXECUTING') AND x.lease_until > v_now THEN
        r := 'IN_PROGRESS ' || greatest(1, {{schema}}.{{table}}_ms_v2(x.lease_until) - {{schema}}.{{table}}_ms_v2(v_now));
        RETURN;
      END IF;
      IF v_locked THEN
        -- Steps 6 and 7.
        IF x.state = 'FAILED_RETRYABLE' OR x.state = 'CLAIMED' OR p_takeover THEN
          PERFORM {{schema}}.{{table}}_hold_v2(p_key, v_state, p_owner, x.attempt + 1, x.rev + 1, p_op, p_fp,
            p_codec, p_policy, v_now, p_lease_ms, p_retention_ms, x.created_at, true);
          r := 'TAKEN_OVER ' || v_state || ' ' || (x.attempt + 1) || ' ' || (x.rev + 1) || ' '
            || {{schema}}.{{table}}_ms_v2(v_now + p_lease_ms * interval '1 millisecond');
          RETURN;
        END IF;
        -- An EXECUTING row whose lease ran out: the effect may have happened; never run it again
        -- automatically.
        r := 'RECOVERY_REQUIRED EXPIRED_EXECUTION';
        RETURN;
      END IF;
    ELSIF v_locked THEN
      -- Step 1 on an expired row, in any state: created afresh, nothing of the old row survives.
      PERFORM {{schema}}.{{table}}_hold_v2(p_key, v_state, p_owner, 1, 1, p_op, p_fp, p_codec, p_policy, v_now,
        p_lease_ms, p_retention_ms, v_now, true);
      r := 'ACQUIRED ' || v_state || ' 1 1 ' || {{schema}}.{{table}}_ms_v2(v_now + p_lease_ms * interval '1 millisecond');
      RETURN;
    END IF;

    -- Not decided without the lock: concurrent claims on one key serialise on its row, and every
    -- wait for it is bounded.
    PERFORM set_config('lock_timeout', p_lock_timeout_ms::text || 'ms', true);
    FOR i IN 1..3 LOOP
      IF v_found OR i > 1 THEN
        SELECT * INTO x FROM {{schema}}.{{table}} t WHERE t.key = p_key FOR UPDATE;
        IF FOUND THEN
          IF x.state = 'EXECUTING' THEN
            SELECT h.lease_until, h.expires_at INTO x.lease_until, x.expires_at
            FROM {{schema}}.{{table}}_held_v2(p_key, x.attempt, x.lease_until, x.expires_at) h;
          END IF;
          v_found := true;
          v_locked := true;
          EXIT;
        END IF;
      END IF;
      -- Step 1 on an absent row (the row went, a release or the sweeper, after it was read).
      v_now := date_trunc('milliseconds', clock_timestamp());
      IF {{schema}}.{{table}}_hold_v2(p_key, v_state, p_owner, 1, 1, p_op, p_fp, p_codec, p_policy, v_now,
          p_lease_ms, p_retention_ms, v_now, false) THEN
        r := 'ACQUIRED ' || v_state || ' 1 1 ' || {{schema}}.{{table}}_ms_v2(v_now + p_lease_ms * interval '1 millisecond');
        RETURN;
      END IF;
    END LOOP;
    IF NOT v_locked THEN
      RAISE EXCEPTION 'claim of % could neither insert nor lock its row', p_key USING ERRCODE = '40001';
    END IF;
  END LOOP;
END
$$;

-- Complete (complete.lua): EXECUTING -> COMPLETED for the holder, storing the response; the row
-- then replays, and lives, for `p_replay_ms`. The row locked (lock_timeout bounds the wait), the
-- clock read after the lock, the check of every transition (`_check_v2`), one write, rev + 1.
-- The answer `r`: OK <rev> | ALREADY <rev> | NOT_FOUND | NOT_OWNER | WRONG_STATE <state>.
CREATE OR REPLACE FUNCTION {{schema}}.{{table}}_complete_v3(
  p_key text, p_owner text, p_attempt bigint, p_rev bigint, p_replay_ms bigint, p_resp bytea,
  p_lock_timeout_ms integer, OUT r text)
LANGUAGE plpgsql AS $$
DECLARE
  v_state text;
  v_owner text;
  v_attempt bigint;
  v_rev bigint;
  v_replay_until timestamptz;
  v_expires_at timestamptz;
  v_now timestamptz;
  v_found boolean;
  v_kind text;
BEGIN
  PERFORM set_config('lock_timeout', p_lock_timeout_ms::text || 'ms', true);
  SELECT t.state, t.owner, t.attempt, t.rev, t.replay_until, t.expires_at
    INTO v_state, v_owner, v_attempt, v_rev, v_replay_until, v_expires_at
  FROM {{schema}}.{{table}} t WHERE t.key = p_key FOR UPDATE;
  v_found := FOUND;
  v_now := date_trunc('milliseconds', clock_timestamp());
  v_kind := {{schema}}.{{table}}_check_v2(v_found, v_found AND {{schema}}.{{table}}_live_v2(v_state, v_replay_until, v_expires_at, v_now),
    v_state, v_owner, v_attempt, v_rev, p_owner, p_attempt, p_rev, 'EXECUTING', 'COMPLETED');
  IF v_kind IS NOT NULL THEN
    r := v_kind || CASE v_kind WHEN 'ALREADY' THEN ' ' || v_rev WHEN 'WRONG_STATE' THEN ' ' || v_state ELSE '' END;
    RETURN;
  END IF;
  UPDATE {{schema}}.{{table}} t SET state = 'COMPLETED', rev = v_rev + 1,
    replay_until = v_now + p_replay_ms * interval '1 millisecond',
    expires_at = v_now + p_replay_ms * interval '1 millisecond', resp = p_resp, updated_at = v_now
  WHERE t.key = p_key;
  r := 'OK ' || (v_rev + 1);
END
$$;

COMMENT ON TABLE {{schema}}.{{table}} IS 'idemkit records, schema 4';
