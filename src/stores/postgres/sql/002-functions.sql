-- Schema 2: the store's functions, every one named with the schema version (`<table>_claim_v2`,
-- ...). Each schema version adds functions of its own and never replaces an earlier version's,
-- so during a rolling deploy the instances of the old version keep calling theirs while the new
-- ones call these; a later migration drops a version's functions only once no instance of it is
-- left. Creates no index: applying it never waits for, or holds up, a transaction writing records.
--
-- Every operation is one function, called as one statement (one round trip), the twin of its
-- Lua script in src/stores/redis/scripts/ step for step. Every lease and expiry decision uses
-- one reading of clock_timestamp() taken after the row is locked (not now(): it is frozen for a
-- whole transaction), truncated to milliseconds, so times compare as the other stores' do.
-- Claim and inspect share the liveness rule ({{table}}_live_v2), so they cannot disagree.

-- Epoch milliseconds of a time the functions made (all truncated to milliseconds: exact). Only
-- immutable operations (an interval's epoch, not a timestamptz's, which is merely stable), so
-- the planner inlines it wherever it is called instead of running it as a function of its own.
CREATE OR REPLACE FUNCTION {{schema}}.{{table}}_ms_v2(t timestamptz) RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$ SELECT (extract(epoch FROM t - timestamptz 'epoch') * 1000)::bigint $$;

-- The liveness rule (lib/live.lua, rules.ts liveRecord): absent once expires_at <= now, and a
-- COMPLETED row once replay_until <= now.
CREATE OR REPLACE FUNCTION {{schema}}.{{table}}_live_v2(state text, replay_until timestamptz, expires_at timestamptz, now timestamptz)
RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
  SELECT expires_at > now AND (state <> 'COMPLETED' OR replay_until > now)
$$;

-- The transition check (lib/transition.lua, rules.ts transitionCheck): NULL means apply it;
-- else NOT_FOUND, NOT_OWNER, ALREADY (the target at rev + 1: a re-sent transition whose reply
-- was lost) or WRONG_STATE. `to_state` NULL (release) never answers ALREADY.
CREATE OR REPLACE FUNCTION {{schema}}.{{table}}_check_v2(
  found boolean, live boolean, state text, owner text, attempt bigint, rev bigint,
  p_owner text, p_attempt bigint, p_rev bigint, from_state text, to_state text)
RETURNS text LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE
    WHEN NOT found OR NOT live THEN 'NOT_FOUND'
    WHEN owner <> p_owner OR attempt <> p_attempt THEN 'NOT_OWNER'
    WHEN to_state IS NOT NULL AND state = to_state AND rev = p_rev + 1 THEN 'ALREADY'
    WHEN state <> from_state OR rev <> p_rev THEN 'WRONG_STATE'
  END
$$;

-- The leases of runs in a transaction (`transaction: true`). Such a run's renewals move the
-- lease here, not on the record's row: the run's own transaction writes that row at the end
-- (the completion's compare-and-set), and under REPEATABLE READ or SERIALIZABLE a row another
-- transaction updated after the run's snapshot cannot be updated by it (40001). A renewal only
-- takes a FOR KEY SHARE lock on the record's row (it waits for a takeover in progress, and a
-- takeover for it) and writes this table, which the completion never reads or writes. A row
-- here counts only for an EXECUTING record at the same attempt; the sweeper removes the others.
-- Updates touch no indexed column: HOT.
CREATE TABLE IF NOT EXISTS {{schema}}.{{table}}_leases (
  key text PRIMARY KEY,
  attempt bigint NOT NULL,
  lease_until timestamptz NOT NULL,
  expires_at timestamptz NOT NULL
) WITH (fillfactor = 70);

-- The lease and expiry of an EXECUTING record at `p_attempt`: its row's, or the later ones of a
-- renewal in the leases table.
CREATE OR REPLACE FUNCTION {{schema}}.{{table}}_held_v2(
  p_key text, p_attempt bigint, INOUT lease_until timestamptz, INOUT expires_at timestamptz)
LANGUAGE sql STABLE AS $$
  SELECT greatest($3, max(l.lease_until)), greatest($4, max(l.expires_at))
  FROM {{schema}}.{{table}}_leases l WHERE l.key = $1 AND l.attempt = $2
$$;

-- The row of a transition, locked (lock_timeout bounds the wait), with the clock read after the
-- lock, its rev and the transition check (the helper above): `kind` NULL means apply it; else
-- the answer, with the row's rev for ALREADY and its state for WRONG_STATE.
CREATE OR REPLACE FUNCTION {{schema}}.{{table}}_locked_v2(
  p_key text, p_owner text, p_attempt bigint, p_rev bigint, p_lock_timeout_ms integer, p_from text, p_to text,
  OUT at timestamptz, OUT row_rev bigint, OUT kind text, OUT rev bigint, OUT state text)
LANGUAGE plpgsql AS $$
DECLARE
  r {{schema}}.{{table}}%ROWTYPE;
  v_found boolean;
BEGIN
  PERFORM set_config('lock_timeout', p_lock_timeout_ms::text || 'ms', true);
  SELECT * INTO r FROM {{schema}}.{{table}} t WHERE t.key = p_key FOR UPDATE;
  v_found := FOUND;
  at := date_trunc('milliseconds', clock_timestamp());
  kind := {{schema}}.{{table}}_check_v2(v_found, v_found AND {{schema}}.{{table}}_live_v2(r.state, r.replay_until, r.expires_at, at),
    r.state, r.owner, r.attempt, r.rev, p_owner, p_attempt, p_rev, p_from, p_to);
  row_rev := r.rev;
  rev := CASE WHEN kind = 'ALREADY' THEN r.rev END;
  state := CASE WHEN kind = 'WRONG_STATE' THEN r.state END;
END
$$;

-- Claim (claim.lua): the steps 1-8 of docs/design.md §3 in order, optionally starting in the same step.
--
-- The steps run at most twice. First on the row as last committed, read without a lock, with a
-- clock reading taken after it: the steps that change nothing (2, 3, 4, 5, 8) answer there, as
-- the row answered at that instant, and such a claim is a read-only transaction (no transaction
-- id, nothing written to the WAL): replays and in-flight answers cost a read. A claim that may
-- write (step 1 on an expired row, 6) or that depends on a lease having run out (6, 7) locks the
-- row (or inserts it: step 1 on an absent row) and runs the steps again with a clock reading
-- taken after the lock.
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
  v_lease_until timestamptz;
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
    v_lease_until := v_now + p_lease_ms * interval '1 millisecond';
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
          UPDATE {{schema}}.{{table}} t SET state = v_state, owner = p_owner, attempt = r.attempt + 1,
            rev = r.rev + 1, op = p_op, fp = p_fp, codec = p_codec, policy = p_policy,
            lease_until = v_lease_until, replay_until = NULL,
            expires_at = v_lease_until + p_retention_ms * interval '1 millisecond', resp = NULL, updated_at = v_now
          WHERE t.key = p_key;
          kind := 'TAKEN_OVER'; state := v_state; attempt := r.attempt + 1; rev := r.rev + 1;
          lease_until := {{schema}}.{{table}}_ms_v2(v_lease_until);
          RETURN;
        END IF;
        -- An EXECUTING row whose lease ran out: the effect may have happened; never run it again
        -- automatically.
        kind := 'RECOVERY_REQUIRED'; reason := 'EXPIRED_EXECUTION';
        RETURN;
      END IF;
    ELSIF v_locked THEN
      -- Step 1 on an expired row, in any state: created afresh, nothing of the old row survives.
      UPDATE {{schema}}.{{table}} t SET state = v_state, owner = p_owner, attempt = 1, rev = 1, op = p_op,
        fp = p_fp, codec = p_codec, policy = p_policy, lease_until = v_lease_until, replay_until = NULL,
        expires_at = v_lease_until + p_retention_ms * interval '1 millisecond', resp = NULL,
        created_at = v_now, updated_at = v_now
      WHERE t.key = p_key;
      kind := 'ACQUIRED'; state := v_state; attempt := 1; rev := 1;
      lease_until := {{schema}}.{{table}}_ms_v2(v_lease_until);
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
      -- wait, then do nothing).
      v_now := date_trunc('milliseconds', clock_timestamp());
      v_lease_until := v_now + p_lease_ms * interval '1 millisecond';
      INSERT INTO {{schema}}.{{table}} AS t
        (key, state, owner, attempt, rev, op, fp, codec, policy, lease_until, replay_until, expires_at, resp, created_at, updated_at)
      VALUES (p_key, v_state, p_owner, 1, 1, p_op, p_fp, p_codec, p_policy, v_lease_until, NULL,
        v_lease_until + p_retention_ms * interval '1 millisecond', NULL, v_now, v_now)
      ON CONFLICT (key) DO NOTHING;
      IF FOUND THEN
        kind := 'ACQUIRED'; state := v_state; attempt := 1; rev := 1;
        lease_until := {{schema}}.{{table}}_ms_v2(v_lease_until);
        RETURN;
      END IF;
    END LOOP;
    IF NOT v_locked THEN
      RAISE EXCEPTION 'claim of % could neither insert nor lock its row', p_key USING ERRCODE = '40001';
    END IF;
  END LOOP;
END
$$;

-- Inspect (inspect.lua): read-only, the same liveness rule and the same kind of clock reading.
CREATE OR REPLACE FUNCTION {{schema}}.{{table}}_inspect_v2(
  p_key text, p_owner text,
  OUT kind text, OUT mine boolean, OUT attempt bigint, OUT rev bigint, OUT fp text, OUT op text,
  OUT lease_until bigint, OUT lease_left_ms bigint, OUT resp bytea, OUT codec text, OUT policy text,
  OUT replay_until bigint)
LANGUAGE plpgsql AS $$
DECLARE
  r {{schema}}.{{table}}%ROWTYPE;
  v_found boolean;
  v_now timestamptz;
BEGIN
  SELECT * INTO r FROM {{schema}}.{{table}} t WHERE t.key = p_key;
  v_found := FOUND;
  IF FOUND AND r.state = 'EXECUTING' THEN
    SELECT h.lease_until, h.expires_at INTO r.lease_until, r.expires_at
    FROM {{schema}}.{{table}}_held_v2(p_key, r.attempt, r.lease_until, r.expires_at) h;
  END IF;
  v_now := date_trunc('milliseconds', clock_timestamp());
  IF NOT v_found OR NOT {{schema}}.{{table}}_live_v2(r.state, r.replay_until, r.expires_at, v_now) THEN
    kind := 'ABSENT';
    RETURN;
  END IF;
  kind := r.state; mine := r.owner = p_owner; attempt := r.attempt; rev := r.rev; fp := r.fp; op := r.op;
  lease_until := {{schema}}.{{table}}_ms_v2(r.lease_until);
  lease_left_ms := greatest(0, lease_until - {{schema}}.{{table}}_ms_v2(v_now));
  IF r.state = 'COMPLETED' THEN
    resp := r.resp; codec := r.codec; policy := r.policy;
    replay_until := {{schema}}.{{table}}_ms_v2(r.replay_until);
  END IF;
END
$$;

-- Start (start.lua): CLAIMED -> EXECUTING for the holder, with a new lease.
CREATE OR REPLACE FUNCTION {{schema}}.{{table}}_start_v2(
  p_key text, p_owner text, p_attempt bigint, p_rev bigint, p_lease_ms bigint, p_retention_ms bigint,
  p_lock_timeout_ms integer, OUT kind text, OUT rev bigint, OUT state text)
LANGUAGE plpgsql AS $$
DECLARE
  v_rev bigint;
  v_now timestamptz;
  v_lease_until timestamptz;
BEGIN
  SELECT l.at, l.row_rev, l.kind, l.rev, l.state INTO v_now, v_rev, kind, rev, state
  FROM {{schema}}.{{table}}_locked_v2(p_key, p_owner, p_attempt, p_rev, p_lock_timeout_ms, 'CLAIMED', 'EXECUTING') l;
  IF kind IS NOT NULL THEN
    RETURN;
  END IF;
  v_lease_until := v_now + p_lease_ms * interval '1 millisecond';
  UPDATE {{schema}}.{{table}} t SET state = 'EXECUTING', rev = v_rev + 1, lease_until = v_lease_until,
    expires_at = v_lease_until + p_retention_ms * interval '1 millisecond', updated_at = v_now
  WHERE t.key = p_key;
  kind := 'OK'; rev := v_rev + 1;
END
$$;

-- Complete (complete.lua): EXECUTING -> COMPLETED for the holder, storing the response; the row
-- then replays, and lives, for the replay window.
CREATE OR REPLACE FUNCTION {{schema}}.{{table}}_complete_v2(
  p_key text, p_owner text, p_attempt bigint, p_rev bigint, p_replay_ms bigint, p_resp bytea,
  p_lock_timeout_ms integer, OUT kind text, OUT rev bigint, OUT state text)
LANGUAGE plpgsql AS $$
DECLARE
  v_rev bigint;
  v_now timestamptz;
BEGIN
  SELECT l.at, l.row_rev, l.kind, l.rev, l.state INTO v_now, v_rev, kind, rev, state
  FROM {{schema}}.{{table}}_locked_v2(p_key, p_owner, p_attempt, p_rev, p_lock_timeout_ms, 'EXECUTING', 'COMPLETED') l;
  IF kind IS NOT NULL THEN
    RETURN;
  END IF;
  UPDATE {{schema}}.{{table}} t SET state = 'COMPLETED', rev = v_rev + 1,
    replay_until = v_now + p_replay_ms * interval '1 millisecond',
    expires_at = v_now + p_replay_ms * interval '1 millisecond', resp = p_resp, updated_at = v_now
  WHERE t.key = p_key;
  kind := 'OK'; rev := v_rev + 1;
END
$$;

-- Mark failed (mark-failed.lua): EXECUTING -> FAILED_RETRYABLE or ABANDONED for the holder.
CREATE OR REPLACE FUNCTION {{schema}}.{{table}}_mark_failed_v2(
  p_key text, p_owner text, p_attempt bigint, p_rev bigint, p_retryable boolean, p_retention_ms bigint,
  p_lock_timeout_ms integer, OUT kind text, OUT rev bigint, OUT state text)
LANGUAGE plpgsql AS $$
DECLARE
  v_rev bigint;
  v_now timestamptz;
  v_target text := CASE WHEN p_retryable THEN 'FAILED_RETRYABLE' ELSE 'ABANDONED' END;
BEGIN
  SELECT l.at, l.row_rev, l.kind, l.rev, l.state INTO v_now, v_rev, kind, rev, state
  FROM {{schema}}.{{table}}_locked_v2(p_key, p_owner, p_attempt, p_rev, p_lock_timeout_ms, 'EXECUTING', v_target) l;
  IF kind IS NOT NULL THEN
    RETURN;
  END IF;
  UPDATE {{schema}}.{{table}} t SET state = v_target, rev = v_rev + 1,
    expires_at = v_now + p_retention_ms * interval '1 millisecond', updated_at = v_now
  WHERE t.key = p_key;
  kind := 'OK'; rev := v_rev + 1;
END
$$;

-- Release (release.lua): deletes only a CLAIMED row held by the caller.
CREATE OR REPLACE FUNCTION {{schema}}.{{table}}_release_v2(
  p_key text, p_owner text, p_attempt bigint, p_rev bigint, p_lock_timeout_ms integer,
  OUT kind text, OUT rev bigint, OUT state text)
LANGUAGE plpgsql AS $$
DECLARE
  v_rev bigint;
  v_now timestamptz;
BEGIN
  SELECT l.at, l.row_rev, l.kind, l.rev, l.state INTO v_now, v_rev, kind, rev, state
  FROM {{schema}}.{{table}}_locked_v2(p_key, p_owner, p_attempt, p_rev, p_lock_timeout_ms, 'CLAIMED', NULL) l;
  IF kind IS NOT NULL THEN
    RETURN;
  END IF;
  DELETE FROM {{schema}}.{{table}} t WHERE t.key = p_key;
  kind := 'OK'; rev := 0;
END
$$;

-- Renew (renew.lua): moves the lease of an EXECUTING row held by (owner, attempt); rev is
-- neither compared nor changed; always writes. For a run in a transaction (`p_held_elsewhere`),
-- the lease moves in the leases table and the record's row is only locked FOR KEY SHARE (see
-- the leases table); otherwise on the row, locked FOR UPDATE.
CREATE OR REPLACE FUNCTION {{schema}}.{{table}}_renew_v2(
  p_key text, p_owner text, p_attempt bigint, p_lease_ms bigint, p_retention_ms bigint,
  p_lock_timeout_ms integer, p_held_elsewhere boolean, OUT kind text, OUT lease_until bigint, OUT state text)
LANGUAGE plpgsql AS $$
DECLARE
  r {{schema}}.{{table}}%ROWTYPE;
  v_found boolean;
  v_now timestamptz;
  v_lease_until timestamptz;
BEGIN
  PERFORM set_config('lock_timeout', p_lock_timeout_ms::text || 'ms', true);
  IF p_held_elsewhere THEN
    SELECT * INTO r FROM {{schema}}.{{table}} t WHERE t.key = p_key FOR KEY SHARE;
  ELSE
    SELECT * INTO r FROM {{schema}}.{{table}} t WHERE t.key = p_key FOR UPDATE;
  END IF;
  v_found := FOUND;
  IF v_found AND r.state = 'EXECUTING' THEN
    SELECT h.lease_until, h.expires_at INTO r.lease_until, r.expires_at
    FROM {{schema}}.{{table}}_held_v2(p_key, r.attempt, r.lease_until, r.expires_at) h;
  END IF;
  v_now := date_trunc('milliseconds', clock_timestamp());
  IF NOT v_found OR NOT {{schema}}.{{table}}_live_v2(r.state, r.replay_until, r.expires_at, v_now) THEN
    kind := 'NOT_FOUND';
    RETURN;
  END IF;
  IF r.owner <> p_owner OR r.attempt <> p_attempt THEN
    kind := 'NOT_OWNER';
    RETURN;
  END IF;
  IF r.state <> 'EXECUTING' THEN
    kind := 'WRONG_STATE'; state := r.state;
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

-- The sweeper's step: when this instance holds the sweep lock for the statement, deletes up to
-- p_limit rows past expires_at (rows claim already treats as absent; a row another session has
-- locked, a claim renewing it, is skipped; an EXECUTING row whose lease a renewal in the leases
-- table extended is kept), then the leases that no longer count. -1 when another instance
-- holds the lock.
CREATE OR REPLACE FUNCTION {{schema}}.{{table}}_sweep_v2(p_limit integer, p_lock bigint) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
  n integer;
BEGIN
  IF NOT pg_try_advisory_xact_lock(p_lock) THEN
    RETURN -1;
  END IF;
  DELETE FROM {{schema}}.{{table}} t WHERE t.key IN (
    SELECT s.key FROM {{schema}}.{{table}} s WHERE s.expires_at <= clock_timestamp()
      AND NOT (s.state = 'EXECUTING' AND EXISTS (SELECT 1 FROM {{schema}}.{{table}}_leases l
        WHERE l.key = s.key AND l.attempt = s.attempt AND l.expires_at > clock_timestamp()))
    ORDER BY s.expires_at LIMIT p_limit FOR UPDATE SKIP LOCKED);
  GET DIAGNOSTICS n = ROW_COUNT;
  -- Leases that no longer count: run out, or of a record no longer EXECUTING at their attempt.
  DELETE FROM {{schema}}.{{table}}_leases l WHERE l.key IN (
    SELECT x.key FROM {{schema}}.{{table}}_leases x
    WHERE x.expires_at <= clock_timestamp() OR NOT EXISTS (SELECT 1 FROM {{schema}}.{{table}} t
      WHERE t.key = x.key AND t.attempt = x.attempt AND t.state = 'EXECUTING')
    LIMIT p_limit FOR UPDATE SKIP LOCKED);
  RETURN n;
END
$$;

-- The version, where migrate() and the startup report read it (the catalog: no lock). COMMENT
-- takes a SHARE UPDATE EXCLUSIVE lock, which writers of records never wait for.
COMMENT ON TABLE {{schema}}.{{table}} IS 'idemkit records, schema 2';
