-- The PostgreSQL store's functions, second of three files: what the store of this version calls,
-- one function per operation, each the twin of its Lua script in src/stores/redis/scripts/. They
-- use the shared rules of 1-rules.sql (whose header says how the functions are kept: CREATE OR
-- REPLACE, version suffixes, one clock reading); 3-earlier-versions.sql, applied after this
-- file, keeps the entry points of earlier schema versions, some of which call the ones here.
--
-- What the store of this version calls:
--
-- | operation | function |
-- | --- | --- |
-- | claim | `_claim_v4` |
-- | complete | `_complete_v3` |
-- | mark failed | `_mark_failed_v3` |
-- | inspect, start, renew, release | `_inspect_v2`, `_start_v2`, `_renew_v2`, `_release_v2` |
-- | sweep | `_sweep_v3` |
-- | a step's recovery point | `_step_v1` |

-- Claim: the one PL/pgSQL decision of a claim, the steps 1-8 of docs/design.md §3, for the store
-- of this version and, through `_claim_v3` and `_claim_v2` (3-earlier-versions.sql), for the
-- instances of earlier ones. The claim rule's other copies (the map is src/core/rules.ts's
-- header): `claimStep` in src/core/rules.ts (the memory store, the executor); `foundAnswer` and
-- `runningAnswer` there, the Redis claim without a script (src/stores/redis/fast-claim.ts);
-- src/stores/redis/scripts/claim.lua.
-- `p_expired` is the claim's `expiredExecution`: 'recover', 'takeover' or 'resume' (which takes
-- over an ABANDONED row as well, step 4). The answer `r`:
--   ACQUIRED | TAKEN_OVER | REPLAYED_ACQUIRE <state> <attempt> <rev> <lease_until ms>
--   COMPLETED_REPLAY <replay_until ms> (and resp, codec, policy)
--   IN_PROGRESS <retry_after_ms>
--   RECOVERY_REQUIRED <ABANDONED | EXPIRED_EXECUTION>
--   FINGERPRINT_MISMATCH
-- A key that is there is decided from one read without a lock when the answer changes nothing
-- (a replay, a mismatch, a request in flight): such a claim writes nothing. A claim that may
-- write, or that depends on a lease having run out, locks the row (or inserts it) and runs the
-- steps again with a clock reading taken after the lock. A claim whose insert of a new key met a
-- concurrent claim's reads the row that claim committed, again without a lock, before it waits
-- for the lock (schema 9): a burst of claims of one new key does not queue for the row.
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
BEGIN
  SELECT x.kind, x.rev, x.state INTO kind, rev, state FROM {{schema}}.{{table}}_transition_v2(
    p_key, p_owner, p_attempt, p_rev, 'CLAIMED', 'EXECUTING', p_lock_timeout_ms, p_lease_ms, p_retention_ms, NULL, NULL) x;
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

-- Mark failed (mark-failed.lua): EXECUTING -> FAILED_RETRYABLE or ABANDONED for the holder,
-- keeping `p_cause` (NULL: none). `_transition_v2`'s write for a failure state, and the cause.
CREATE OR REPLACE FUNCTION {{schema}}.{{table}}_mark_failed_v3(
  p_key text, p_owner text, p_attempt bigint, p_rev bigint, p_retryable boolean, p_retention_ms bigint,
  p_lock_timeout_ms integer, p_cause bytea, OUT kind text, OUT rev bigint, OUT state text)
LANGUAGE plpgsql AS $$
DECLARE
  v_to text := CASE WHEN p_retryable THEN 'FAILED_RETRYABLE' ELSE 'ABANDONED' END;
  v_rev bigint;
  v_now timestamptz;
BEGIN
  SELECT h.at, h.row_rev, h.kind, h.rev, h.state INTO v_now, v_rev, kind, rev, state
  FROM {{schema}}.{{table}}_holder_v2(p_key, p_owner, p_attempt, p_rev, 'EXECUTING', v_to, p_lock_timeout_ms, false, false) h;
  IF kind IS NOT NULL THEN
    RETURN;
  END IF;
  UPDATE {{schema}}.{{table}} t SET state = v_to, rev = v_rev + 1,
    expires_at = v_now + p_retention_ms * interval '1 millisecond', resp = p_cause, updated_at = v_now
  WHERE t.key = p_key;
  kind := 'OK'; rev := v_rev + 1;
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

-- A step's recovery point, written in the step's transaction right before its COMMIT: the
-- record's row is locked FOR SHARE (lock_timeout bounds the wait), so a takeover, which locks it
-- FOR UPDATE, either committed before (this answers NOT_OWNER and the step rolls back) or waits
-- until the step committed (and its re-run then finds the point). The answer `r`:
--   OK | NOT_FOUND | NOT_OWNER | WRONG_STATE <state> | ALREADY (a point of this generation is there)
-- and `isolation`, the transaction's isolation level, which the next transaction of the run
-- begins with.
CREATE OR REPLACE FUNCTION {{schema}}.{{table}}_step_v1(
  p_key text, p_owner text, p_attempt bigint, p_name text, p_result text, p_lock_timeout_ms integer,
  OUT r text, OUT isolation text)
LANGUAGE plpgsql AS $$
DECLARE
  x {{schema}}.{{table}}%ROWTYPE;
  v_now timestamptz;
BEGIN
  isolation := current_setting('transaction_isolation');
  PERFORM set_config('lock_timeout', p_lock_timeout_ms::text || 'ms', true);
  SELECT * INTO x FROM {{schema}}.{{table}} t WHERE t.key = p_key FOR SHARE;
  v_now := date_trunc('milliseconds', clock_timestamp());
  IF NOT FOUND OR NOT {{schema}}.{{table}}_live_v2(x.state, x.replay_until, x.expires_at, v_now) THEN
    r := 'NOT_FOUND';
  ELSIF x.owner <> p_owner OR x.attempt <> p_attempt THEN
    r := 'NOT_OWNER';
  ELSIF x.state <> 'EXECUTING' THEN
    r := 'WRONG_STATE ' || x.state;
  ELSE
    INSERT INTO {{schema}}.{{table}}_steps AS s (key, name, born, attempt, result, committed_at)
    VALUES (p_key, p_name, x.created_at, p_attempt, p_result, v_now)
    ON CONFLICT (key, name) DO UPDATE SET born = excluded.born, attempt = excluded.attempt,
      result = excluded.result, committed_at = excluded.committed_at
    WHERE s.born <> excluded.born;
    r := CASE WHEN FOUND THEN 'OK' ELSE 'ALREADY' END;
  END IF;
END
$$;

-- Sweep: when this instance holds the sweep lock for the statement, deletes up to p_limit rows
-- past expires_at (rows claim already treats as absent; a row another session has locked, a claim
-- renewing it, is skipped; an EXECUTING row whose lease a renewal in the leases table extended is
-- kept) and, in the same statement, the recovery points of the records it deletes (found by the
-- steps table's primary key); then the leases that no longer count. -1 when another instance
-- holds the lock. Instances of schemas 2 to 7 call it through `_sweep_v2` (3-earlier-versions.sql).
-- The clock is read once, before the rows are looked for (schema 11): compared with a value, the
-- expiry is the index scan's bound and the scan stops at the first row not yet expired, where
-- `clock_timestamp()` in the condition (volatile, so only a filter) made a round that found fewer
-- than p_limit expired rows read the whole index. A row that expires while the statement runs is
-- left to the next round.
CREATE OR REPLACE FUNCTION {{schema}}.{{table}}_sweep_v3(p_limit integer, p_lock bigint) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
  n integer;
  v_now timestamptz;
BEGIN
  IF NOT pg_try_advisory_xact_lock(p_lock) THEN
    RETURN -1;
  END IF;
  v_now := clock_timestamp();
  WITH gone AS (
    DELETE FROM {{schema}}.{{table}} t WHERE t.key IN (
      SELECT s.key FROM {{schema}}.{{table}} s WHERE s.expires_at <= v_now
        AND NOT (s.state = 'EXECUTING' AND EXISTS (SELECT 1 FROM {{schema}}.{{table}}_leases l
          WHERE l.key = s.key AND l.attempt = s.attempt AND l.expires_at > v_now))
      ORDER BY s.expires_at LIMIT p_limit FOR UPDATE SKIP LOCKED)
    RETURNING t.key
  ), points AS (
    DELETE FROM {{schema}}.{{table}}_steps p WHERE p.key IN (SELECT g.key FROM gone g)
  )
  SELECT count(*) INTO n FROM gone;
  -- Leases that no longer count: run out, or of a record no longer EXECUTING at their attempt.
  DELETE FROM {{schema}}.{{table}}_leases l WHERE l.key IN (
    SELECT x.key FROM {{schema}}.{{table}}_leases x
    WHERE x.expires_at <= v_now OR NOT EXISTS (SELECT 1 FROM {{schema}}.{{table}} t
      WHERE t.key = x.key AND t.attempt = x.attempt AND t.state = 'EXECUTING')
    LIMIT p_limit FOR UPDATE SKIP LOCKED);
  RETURN n;
END
$$;
