-- The PostgreSQL store's functions, third of three files: the entry points kept only for the
-- instances of earlier schema versions during a rolling deploy, each with the schemas that call
-- it; the store of this version calls none of them. A claim is decided in one place, `_claim_v4`
-- of 2-operations.sql: `_claim_v3` and `_claim_v2` translate their arguments and answers and call
-- it, so this file applies after that one. The rules they share are in 1-rules.sql, whose header
-- says how the functions are kept; one retired once no instance of its version can be left goes
-- with a DROP FUNCTION here.

-- Schema 2's row of a transition, locked, with the clock read after the lock and the check:
-- called by nothing since schema 3 (`_holder_v2` does it), kept as schema 2 left it.
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

-- Schema 4's claim, for its instances: `_claim_v4`'s, with `p_takeover` as 'takeover' (true) or
-- 'recover' (false).
CREATE OR REPLACE FUNCTION {{schema}}.{{table}}_claim_v3(
  p_key text, p_owner text, p_fp text, p_op text, p_codec text, p_policy text, p_start boolean,
  p_takeover boolean, p_lease_ms bigint, p_retention_ms bigint, p_legacy text[], p_lock_timeout_ms integer,
  OUT r text, OUT resp bytea, OUT codec text, OUT policy text)
LANGUAGE sql AS $$
  SELECT c.r, c.resp, c.codec, c.policy
  FROM {{schema}}.{{table}}_claim_v4(p_key, p_owner, p_fp, p_op, p_codec, p_policy, p_start,
    CASE WHEN p_takeover THEN 'takeover' ELSE 'recover' END, p_lease_ms, p_retention_ms, p_legacy, p_lock_timeout_ms) c
$$;

-- Schema 2's claim, for the instances of schemas 2 and 3: `_claim_v4`'s, with `p_takeover` as
-- `_claim_v3` passes it, its packed answer in one column per field.
CREATE OR REPLACE FUNCTION {{schema}}.{{table}}_claim_v2(
  p_key text, p_owner text, p_fp text, p_op text, p_codec text, p_policy text, p_start boolean,
  p_takeover boolean, p_lease_ms bigint, p_retention_ms bigint, p_legacy text[], p_lock_timeout_ms integer,
  OUT kind text, OUT state text, OUT attempt bigint, OUT rev bigint, OUT lease_until bigint,
  OUT retry_after_ms bigint, OUT reason text, OUT resp bytea, OUT codec text, OUT policy text,
  OUT replay_until bigint)
LANGUAGE sql AS $$
  SELECT f[1],
    CASE WHEN held THEN f[2] END, CASE WHEN held THEN f[3]::bigint END, CASE WHEN held THEN f[4]::bigint END,
    CASE WHEN held THEN f[5]::bigint END,
    CASE WHEN f[1] = 'IN_PROGRESS' THEN f[2]::bigint END,
    CASE WHEN f[1] = 'RECOVERY_REQUIRED' THEN f[2] END,
    c.resp, c.codec, c.policy,
    CASE WHEN f[1] = 'COMPLETED_REPLAY' THEN f[2]::bigint END
  FROM {{schema}}.{{table}}_claim_v4(p_key, p_owner, p_fp, p_op, p_codec, p_policy, p_start,
      CASE WHEN p_takeover THEN 'takeover' ELSE 'recover' END, p_lease_ms, p_retention_ms, p_legacy, p_lock_timeout_ms) c,
    LATERAL (SELECT string_to_array(c.r, ' ') AS f) packed,
    LATERAL (SELECT packed.f[1] IN ('ACQUIRED', 'TAKEN_OVER', 'REPLAYED_ACQUIRE') AS held) answer
$$;

-- Schema 2's completion, for the instances of schemas 2 and 3: as `_complete_v3`, answered as a
-- transition (kind, rev, state).
CREATE OR REPLACE FUNCTION {{schema}}.{{table}}_complete_v2(
  p_key text, p_owner text, p_attempt bigint, p_rev bigint, p_replay_ms bigint, p_resp bytea,
  p_lock_timeout_ms integer, OUT kind text, OUT rev bigint, OUT state text)
LANGUAGE plpgsql AS $$
BEGIN
  SELECT x.kind, x.rev, x.state INTO kind, rev, state FROM {{schema}}.{{table}}_transition_v2(
    p_key, p_owner, p_attempt, p_rev, 'EXECUTING', 'COMPLETED', p_lock_timeout_ms, NULL, NULL, p_replay_ms, p_resp) x;
END
$$;

-- Schema 2's mark failed, for the instances of schemas 2 to 5 (mark-failed.lua): EXECUTING ->
-- FAILED_RETRYABLE or ABANDONED for the holder, without a cause (`_mark_failed_v3` keeps one).
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

-- Schema 2's sweeper's step, for the instances of schemas 2 to 7: when this instance holds the
-- sweep lock for the statement, deletes up to p_limit rows past expires_at (rows claim already
-- treats as absent; a row another session has locked, a claim renewing it, is skipped; an
-- EXECUTING row whose lease a renewal in the leases table extended is kept), then the leases that
-- no longer count. -1 when another instance holds the lock.
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
