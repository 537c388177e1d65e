-- Schema 9: a burst of claims of one new key decided without queueing. Until this, a claim that
-- found no row and whose insert met a concurrent claim's (the insert waits until that claim
-- commits, then does nothing) went straight to the row's lock, so a burst of N claims of one new
-- key (a client's retries fanned out, a queue redelivering to many consumers) passed the lock
-- from one session to the next, N times in a row: on a loaded machine the last ones waited past
-- lockTimeoutMs and answered 503. Now such a claim reads the committed row again without a lock
-- and decides from it as a claim that found the row at once does (a request in flight, a replay,
-- a mismatch); only what that read leaves undecided waits for the lock. The answers are the same
-- ones; only `_claim_v4`'s body changes (CREATE OR REPLACE keeps the function, its grants, and
-- takes no lock on the table), so the instances of schemas 5 to 8 get the change through it.

CREATE OR REPLACE FUNCTION {{schema}}.{{table}}_claim_v4(
  p_key text, p_owner text, p_fp text, p_op text, p_codec text, p_policy text, p_start boolean,
  p_expired text, p_lease_ms bigint, p_retention_ms bigint, p_legacy text[], p_lock_timeout_ms integer,
  OUT r text, OUT resp bytea, OUT codec text, OUT policy text)
LANGUAGE plpgsql AS $$
DECLARE
  x {{schema}}.{{table}}%ROWTYPE;
  v_now timestamptz;
  v_state text := CASE WHEN p_start THEN 'EXECUTING' ELSE 'CLAIMED' END;
  v_found boolean;
  v_locked boolean := false;
  v_resume boolean := p_expired = 'resume';
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
    -- A concurrent claim inserted it first, and the insert waited until that claim committed: the
    -- row it committed is read again without a lock (the statement's own snapshot) and decided
    -- from that read when it can be, as a key found at once is. Only what this read leaves
    -- undecided queues for the row's lock, below.
    SELECT * INTO x FROM {{schema}}.{{table}} t WHERE t.key = p_key;
    v_found := FOUND;
  END IF;
  IF v_found AND x.state = 'EXECUTING' THEN
    SELECT h.lease_until, h.expires_at INTO x.lease_until, x.expires_at
    FROM {{schema}}.{{table}}_held_v2(p_key, x.attempt, x.lease_until, x.expires_at) h;
  END IF;
  -- From here on as schema 4's claim, step for step, but for step 4 under 'resume'.
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
      -- Step 4; a resumed claim takes an ABANDONED row over (below, under the lock).
      IF x.state = 'ABANDONED' AND NOT v_resume THEN
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
        -- Steps 6 and 7 (and 4 when resumed): only a row the steps above left is here, so an
        -- EXECUTING one has its lease run out.
        IF x.state IN ('FAILED_RETRYABLE', 'CLAIMED', 'ABANDONED') OR p_expired IN ('takeover', 'resume') THEN
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

COMMENT ON TABLE {{schema}}.{{table}} IS 'idemkit records, schema 9';
