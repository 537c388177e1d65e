-- Schema 3: the bodies of schema 2's functions written as the Lua scripts are, with identical
-- behaviour. The functions keep their names and signatures (`<table>_claim_v2`, ...): instances
-- of the previous version, mid rolling deploy, call the same functions and get the same answers.
-- Only bodies change (CREATE OR REPLACE takes no lock on the table), and two helpers are added:
--
-- - `_holder_v2`, the twin of lib/transition.lua: locks the row, reads it and the clock, and
--   answers the refusal (`_check_v2`'s rules), used by every transition (through
--   `_transition_v2`) and by renew (the owner rule of `_check_v2`, rev not compared);
-- - `_hold_v2`, the twin of lib/record.lua's write_record for a claim: the one statement that
--   writes a new hold, whether it inserts the row (step 1 on an absent row), recreates an expired
--   one (step 1) or takes one over (step 6).
--
-- Schema 2's `_locked_v2` is left as it is, called by nothing once this is applied (a call of
-- schema 2's bodies still running while this commits finds it there).

-- The row of a transition or a renewal, locked (lock_timeout bounds the wait), the clock read
-- after the lock, and the refusal: `kind` NULL means apply it; else the answer, with the row's
-- rev for ALREADY and its state for WRONG_STATE. A renewal (`p_renewal`) compares no rev and
-- counts the later lease of the leases table for an EXECUTING row; it locks FOR KEY SHARE when
-- `p_key_share` (a run in a transaction: see the leases table in 002-functions.sql).
CREATE OR REPLACE FUNCTION {{schema}}.{{table}}_holder_v2(
  p_key text, p_owner text, p_attempt bigint, p_rev bigint, p_from text, p_to text, p_lock_timeout_ms integer,
  p_renewal boolean, p_key_share boolean,
  OUT at timestamptz, OUT row_rev bigint, OUT kind text, OUT rev bigint, OUT state text)
LANGUAGE plpgsql AS $$
DECLARE
  r {{schema}}.{{table}}%ROWTYPE;
  v_found boolean;
BEGIN
  PERFORM set_config('lock_timeout', p_lock_timeout_ms::text || 'ms', true);
  IF p_key_share THEN
    SELECT * INTO r FROM {{schema}}.{{table}} t WHERE t.key = p_key FOR KEY SHARE;
  ELSE
    SELECT * INTO r FROM {{schema}}.{{table}} t WHERE t.key = p_key FOR UPDATE;
  END IF;
  v_found := FOUND;
  IF p_renewal AND v_found AND r.state = 'EXECUTING' THEN
    SELECT h.lease_until, h.expires_at INTO r.lease_until, r.expires_at
    FROM {{schema}}.{{table}}_held_v2(p_key, r.attempt, r.lease_until, r.expires_at) h;
  END IF;
  at := date_trunc('milliseconds', clock_timestamp());
  kind := {{schema}}.{{table}}_check_v2(v_found, v_found AND {{schema}}.{{table}}_live_v2(r.state, r.replay_until, r.expires_at, at),
    r.state, r.owner, r.attempt, r.rev, p_owner, p_attempt, CASE WHEN p_renewal THEN r.rev ELSE p_rev END, p_from, p_to);
  row_rev := r.rev;
  rev := CASE WHEN kind = 'ALREADY' THEN r.rev END;
  state := CASE WHEN kind = 'WRONG_STATE' THEN r.state END;
END
$$;

-- A transition of the holder's row from `p_from` to `p_to` (NULL: release, which deletes it),
-- once `_holder_v2` found nothing to refuse: one write, rev + 1. EXECUTING gets a new lease and
-- lives `p_retention_ms` past it; COMPLETED stores `p_resp` and replays, and lives, for
-- `p_replay_ms`; a failure state lives `p_retention_ms` from now.
CREATE OR REPLACE FUNCTION {{schema}}.{{table}}_transition_v2(
  p_key text, p_owner text, p_attempt bigint, p_rev bigint, p_from text, p_to text, p_lock_timeout_ms integer,
  p_lease_ms bigint, p_retention_ms bigint, p_replay_ms bigint, p_resp bytea,
  OUT kind text, OUT rev bigint, OUT state text)
LANGUAGE plpgsql AS $$
DECLARE
  v_rev bigint;
  v_now timestamptz;
BEGIN
  SELECT h.at, h.row_rev, h.kind, h.rev, h.state INTO v_now, v_rev, kind, rev, state
  FROM {{schema}}.{{table}}_holder_v2(p_key, p_owner, p_attempt, p_rev, p_from, p_to, p_lock_timeout_ms, false, false) h;
  IF kind IS NOT NULL THEN
    RETURN;
  END IF;
  IF p_to IS NULL THEN
    DELETE FROM {{schema}}.{{table}} t WHERE t.key = p_key;
    kind := 'OK'; rev := 0;
    RETURN;
  END IF;
  UPDATE {{schema}}.{{table}} t SET state = p_to, rev = v_rev + 1,
    lease_until = CASE WHEN p_to = 'EXECUTING' THEN v_now + p_lease_ms * interval '1 millisecond' ELSE t.lease_until END,
    replay_until = CASE WHEN p_to = 'COMPLETED' THEN v_now + p_replay_ms * interval '1 millisecond' ELSE t.replay_until END,
    expires_at = CASE p_to
      WHEN 'EXECUTING' THEN v_now + p_lease_ms * interval '1 millisecond' + p_retention_ms * interval '1 millisecond'
      WHEN 'COMPLETED' THEN v_now + p_replay_ms * interval '1 millisecond'
      ELSE v_now + p_retention_ms * interval '1 millisecond' END,
    resp = CASE WHEN p_to = 'COMPLETED' THEN p_resp ELSE t.resp END,
    updated_at = v_now
  WHERE t.key = p_key;
  kind := 'OK'; rev := v_rev + 1;
END
$$;

-- A new hold on the scope (write_record of claim.lua): the row as the claim brings it, in
-- `p_state`, leased `p_lease_ms` from `p_now` and living `p_retention_ms` past the lease, with no
-- response. Inserts it; a row already there is replaced only when `p_replace` (the caller holds
-- its lock: an expired row, or a takeover), else left as it is (a concurrent claim inserted it
-- first). Returns whether it wrote.
CREATE OR REPLACE FUNCTION {{schema}}.{{table}}_hold_v2(
  p_key text, p_state text, p_owner text, p_attempt bigint, p_rev bigint, p_op text, p_fp text, p_codec text,
  p_policy text, p_now timestamptz, p_lease_ms bigint, p_retention_ms bigint, p_created_at timestamptz,
  p_replace boolean)
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO {{schema}}.{{table}} AS t
    (key, state, owner, attempt, rev, op, fp, codec, policy, lease_until, replay_until, expires_at, resp, created_at, updated_at)
  VALUES (p_key, p_state, p_owner, p_attempt, p_rev, p_op, p_fp, p_codec, p_policy,
    p_now + p_lease_ms * interval '1 millisecond', NULL,
    p_now + p_lease_ms * interval '1 millisecond' + p_retention_ms * interval '1 millisecond', NULL, p_created_at, p_now)
  ON CONFLICT (key) DO UPDATE SET state = excluded.state, owner = excluded.owner, attempt = excluded.attempt,
    rev = excluded.rev, op = excluded.op, fp = excluded.fp, codec = excluded.codec, policy = excluded.policy,
    lease_until = excluded.lease_until, replay_until = NULL, expires_at = excluded.expires_at, resp = NULL,
    created_at = excluded.created_at, updated_at = excluded.updated_at
  WHERE p_replace;
  RETURN FOUND;
END
$$;

-- Claim (claim.lua): as in 002-functions.sql, step for step; every new hold is written by
-- `_hold_v2`.
CREATE OR REPLACE FUNCTION {{schema}}.{{table}}_claim_v2(
  p_key text, p_owner text, p_fp text, p_op text, p_codec text, p_policy text, p_start boolean,
  p_takeover boolean, p_lease_ms bigint, p_retention_ms bigint, p_legacy text[], p_lock_timeout_ms integer,
  OUT kind text, OUT state text, OUT attempt bigint, OUT rev bigint, OUT lease_until bigint,
  OUT retry_after_ms bigint, OUT reason text, OUT resp bytea, OUT codec text, OUT policy text,
  OUT replay_until bigint)
LANGUAGE plpgsql AS $$
DECLARE
  r {{schema}}.{{table}}%ROWTYPE;
  v_now timestamptz;
  v_state text := CASE WHEN p_start THEN 'EXECUTING' ELSE 'CLAIMED' END;
  v_found boolean;
  v_locked boolean := false;
BEGIN
  SELECT * INTO r FROM {{schema}}.{{table}} t WHERE t.key = p_key;
  v_found := FOUND;
  IF FOUND AND r.state = 'EXECUTING' THEN
    SELECT h.lease_until, h.expires_at INTO r.lease_until, r.expires_at
    FROM {{schema}}.{{table}}_held_v2(p_key, r.attempt, r.lease_until, r.expires_at) h;
  END IF;
  LOOP
    -- One clock reading per pass, after the row was read (and, on the second pass, locked).
    v_now := date_trunc('milliseconds', clock_timestamp());
    IF v_found AND {{schema}}.{{table}}_live_v2(r.state, r.replay_until, r.expires_at, v_now) THEN
      -- Step 2: before any mutation, in every state. A legacy fingerprint counts as a match.
      IF r.fp <> p_fp AND NOT (r.fp = ANY(p_legacy)) THEN
        kind := 'FINGERPRINT_MISMATCH';
        RETURN;
      END IF;
      -- Step 3.
      IF r.state = 'COMPLETED' THEN
        kind := 'COMPLETED_REPLAY'; resp := r.resp; codec := r.codec; policy := r.policy;
        replay_until := {{schema}}.{{table}}_ms_v2(r.replay_until);
        RETURN;
      END IF;
      -- Step 4.
      IF r.state = 'ABANDONED' THEN
        kind := 'RECOVERY_REQUIRED'; reason := 'ABANDONED';
        RETURN;
      END IF;
      -- Step 5: the caller's own earlier claim landed; only a record it can still hold.
      IF r.owner = p_owner AND r.state IN ('CLAIMED', 'EXECUTING') THEN
        kind := 'REPLAYED_ACQUIRE'; state := r.state; attempt := r.attempt; rev := r.rev;
        lease_until := {{schema}}.{{table}}_ms_v2(r.lease_until);
        RETURN;
      END IF;
      -- Step 8 (disjoint from 6 and 7, which need a lease run out or FAILED_RETRYABLE).
      IF r.state IN ('CLAIMED', 'EXECUTING') AND r.lease_until > v_now THEN
        kind := 'IN_PROGRESS';
        retry_after_ms := greatest(1, {{schema}}.{{table}}_ms_v2(r.lease_until) - {{schema}}.{{table}}_ms_v2(v_now));
        RETURN;
      END IF;
      IF v_locked THEN
        -- Steps 6 and 7.
        IF r.state = 'FAILED_RETRYABLE' OR r.state = 'CLAIMED' OR p_takeover THEN
          PERFORM {{schema}}.{{table}}_hold_v2(p_key, v_state, p_owner, r.attempt + 1, r.rev + 1, p_op, p_fp,
            p_codec, p_policy, v_now, p_lease_ms, p_retention_ms, r.created_at, true);
          kind := 'TAKEN_OVER'; state := v_state; attempt := r.attempt + 1; rev := r.rev + 1;
          lease_until := {{schema}}.{{table}}_ms_v2(v_now + p_lease_ms * interval '1 millisecond');
          RETURN;
        END IF;
        -- An EXECUTING row whose lease ran out: the effect may have happened; never run it again
        -- automatically.
        kind := 'RECOVERY_REQUIRED'; reason := 'EXPIRED_EXECUTION';
        RETURN;
      END IF;
    ELSIF v_locked THEN
      -- Step 1 on an expired row, in any state: created afresh, nothing of the old row survives.
      PERFORM {{schema}}.{{table}}_hold_v2(p_key, v_state, p_owner, 1, 1, p_op, p_fp, p_codec, p_policy, v_now,
        p_lease_ms, p_retention_ms, v_now, true);
      kind := 'ACQUIRED'; state := v_state; attempt := 1; rev := 1;
      lease_until := {{schema}}.{{table}}_ms_v2(v_now + p_lease_ms * interval '1 millisecond');
      RETURN;
    END IF;

    -- Not decided without the lock. From here every wait for the row is bounded, and concurrent
    -- claims on one key serialise on its row: the first inserts it, the others wait for that row
    -- and decide under its lock.
    PERFORM set_config('lock_timeout', p_lock_timeout_ms::text || 'ms', true);
    FOR i IN 1..3 LOOP
      IF v_found OR i > 1 THEN
        SELECT * INTO r FROM {{schema}}.{{table}} t WHERE t.key = p_key FOR UPDATE;
        IF FOUND THEN
          IF r.state = 'EXECUTING' THEN
            SELECT h.lease_until, h.expires_at INTO r.lease_until, r.expires_at
            FROM {{schema}}.{{table}}_held_v2(p_key, r.attempt, r.lease_until, r.expires_at) h;
          END IF;
          v_found := true;
          v_locked := true;
          EXIT;
        END IF;
      END IF;
      -- Step 1 on an absent row: the insert is the lock (a concurrent insert of the key makes it
      -- wait, then write nothing).
      v_now := date_trunc('milliseconds', clock_timestamp());
      IF {{schema}}.{{table}}_hold_v2(p_key, v_state, p_owner, 1, 1, p_op, p_fp, p_codec, p_policy, v_now,
          p_lease_ms, p_retention_ms, v_now, false) THEN
        kind := 'ACQUIRED'; state := v_state; attempt := 1; rev := 1;
        lease_until := {{schema}}.{{table}}_ms_v2(v_now + p_lease_ms * interval '1 millisecond');
        RETURN;
      END IF;
    END LOOP;
    IF NOT v_locked THEN
      RAISE EXCEPTION 'claim of % could neither insert nor lock its row', p_key USING ERRCODE = '40001';
    END IF;
  END LOOP;
END
$$;

-- Start (start.lua): CLAIMED -> EXECUTING for the holder, with a new lease.
CREATE OR REPLACE FUNCTION {{schema}}.{{table}}_start_v2(
  p_key text, p_owner text, p_attempt bigint, p_rev bigint, p_lease_ms bigint, p_retention_ms bigint,
  p_lock_timeout_ms integer, OUT kind text, OUT rev bigint, OUT state text)
LANGUAGE plpgsql AS $$
BEGIN
  SELECT x.kind, x.rev, x.state INTO kind, rev, state FROM {{schema}}.{{table}}_transition_v2(
    p_key, p_owner, p_attempt, p_rev, 'CLAIMED', 'EXECUTING', p_lock_timeout_ms, p_lease_ms, p_retention_ms, NULL, NULL) x;
END
$$;

-- Complete (complete.lua): EXECUTING -> COMPLETED for the holder, storing the response.
CREATE OR REPLACE FUNCTION {{schema}}.{{table}}_complete_v2(
  p_key text, p_owner text, p_attempt bigint, p_rev bigint, p_replay_ms bigint, p_resp bytea,
  p_lock_timeout_ms integer, OUT kind text, OUT rev bigint, OUT state text)
LANGUAGE plpgsql AS $$
BEGIN
  SELECT x.kind, x.rev, x.state INTO kind, rev, state FROM {{schema}}.{{table}}_transition_v2(
    p_key, p_owner, p_attempt, p_rev, 'EXECUTING', 'COMPLETED', p_lock_timeout_ms, NULL, NULL, p_replay_ms, p_resp) x;
END
$$;

-- Mark failed (mark-failed.lua): EXECUTING -> FAILED_RETRYABLE or ABANDONED for the holder.
CREATE OR REPLACE FUNCTION {{schema}}.{{table}}_mark_failed_v2(
  p_key text, p_owner text, p_attempt bigint, p_rev bigint, p_retryable boolean, p_retention_ms bigint,
  p_lock_timeout_ms integer, OUT kind text, OUT rev bigint, OUT state text)
LANGUAGE plpgsql AS $$
BEGIN
  SELECT x.kind, x.rev, x.state INTO kind, rev, state FROM {{schema}}.{{table}}_transition_v2(
    p_key, p_owner, p_attempt, p_rev, 'EXECUTING', CASE WHEN p_retryable THEN 'FAILED_RETRYABLE' ELSE 'ABANDONED' END,
    p_lock_timeout_ms, NULL, p_retention_ms, NULL, NULL) x;
END
$$;

-- Release (release.lua): deletes only a CLAIMED row held by the caller.
CREATE OR REPLACE FUNCTION {{schema}}.{{table}}_release_v2(
  p_key text, p_owner text, p_attempt bigint, p_rev bigint, p_lock_timeout_ms integer,
  OUT kind text, OUT rev bigint, OUT state text)
LANGUAGE plpgsql AS $$
BEGIN
  SELECT x.kind, x.rev, x.state INTO kind, rev, state FROM {{schema}}.{{table}}_transition_v2(
    p_key, p_owner, p_attempt, p_rev, 'CLAIMED', NULL, p_lock_timeout_ms, NULL, NULL, NULL, NULL) x;
END
$$;

-- Renew (renew.lua): moves the lease of an EXECUTING row held by (owner, attempt); rev is
-- neither compared nor changed; always writes. For a run in a transaction (`p_held_elsewhere`),
-- the lease moves in the leases table and the record's row is only locked FOR KEY SHARE;
-- otherwise on the row, locked FOR UPDATE.
CREATE OR REPLACE FUNCTION {{schema}}.{{table}}_renew_v2(
  p_key text, p_owner text, p_attempt bigint, p_lease_ms bigint, p_retention_ms bigint,
  p_lock_timeout_ms integer, p_held_elsewhere boolean, OUT kind text, OUT lease_until bigint, OUT state text)
LANGUAGE plpgsql AS $$
DECLARE
  v_now timestamptz;
  v_lease_until timestamptz;
BEGIN
  SELECT h.at, h.kind, h.state INTO v_now, kind, state
  FROM {{schema}}.{{table}}_holder_v2(p_key, p_owner, p_attempt, NULL, 'EXECUTING', NULL, p_lock_timeout_ms, true,
    p_held_elsewhere) h;
  IF kind IS NOT NULL THEN
    RETURN;
  END IF;
  v_lease_until := v_now + p_lease_ms * interval '1 millisecond';
  IF p_held_elsewhere THEN
    INSERT INTO {{schema}}.{{table}}_leases AS l (key, attempt, lease_until, expires_at)
    VALUES (p_key, p_attempt, v_lease_until, v_lease_until + p_retention_ms * interval '1 millisecond')
    ON CONFLICT (key) DO UPDATE SET attempt = excluded.attempt, lease_until = excluded.lease_until,
      expires_at = excluded.expires_at;
  ELSE
    UPDATE {{schema}}.{{table}} t SET lease_until = v_lease_until,
      expires_at = v_lease_until + p_retention_ms * interval '1 millisecond', updated_at = v_now
    WHERE t.key = p_key;
  END IF;
  kind := 'OK'; lease_until := {{schema}}.{{table}}_ms_v2(v_lease_until);
END
$$;

COMMENT ON TABLE {{schema}}.{{table}} IS 'idemkit records, schema 3';
