-- The PostgreSQL store's functions, third of three files: the entry points kept only for the
-- instances of earlier schema versions during a rolling deploy, each with the schemas that call
-- it; the store of this version calls none of them. Each decides nothing of its own: it
-- translates its arguments and answers and calls the function of this version that does the same
-- (in 2-operations.sql or 1-rules.sql), so an earlier instance's call and this version's follow
-- one rule, and this file applies after those two. One retired once no instance of its version
-- can be left goes with a DROP FUNCTION here.

-- Schema 2's row of a transition, locked, with the clock read after the lock and the check:
-- called by nothing since schema 3, whose `_holder_v2` does it (here without a renewal's read of
-- the leases table, and FOR UPDATE).
CREATE OR REPLACE FUNCTION {{schema}}.{{table}}_locked_v2(
  p_key text, p_owner text, p_attempt bigint, p_rev bigint, p_lock_timeout_ms integer, p_from text, p_to text,
  OUT at timestamptz, OUT row_rev bigint, OUT kind text, OUT rev bigint, OUT state text)
LANGUAGE sql AS $$
  SELECT h.at, h.row_rev, h.kind, h.rev, h.state
  FROM {{schema}}.{{table}}_holder_v2(p_key, p_owner, p_attempt, p_rev, p_from, p_to, p_lock_timeout_ms, false, false) h
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

-- Schema 2's completion, for the instances of schemas 2 and 3: `_complete_v3`'s, its packed
-- answer as a transition's (kind, rev, state).
CREATE OR REPLACE FUNCTION {{schema}}.{{table}}_complete_v2(
  p_key text, p_owner text, p_attempt bigint, p_rev bigint, p_replay_ms bigint, p_resp bytea,
  p_lock_timeout_ms integer, OUT kind text, OUT rev bigint, OUT state text)
LANGUAGE sql AS $$
  SELECT f[1], CASE WHEN f[1] IN ('OK', 'ALREADY') THEN f[2]::bigint END, CASE WHEN f[1] = 'WRONG_STATE' THEN f[2] END
  FROM {{schema}}.{{table}}_complete_v3(p_key, p_owner, p_attempt, p_rev, p_replay_ms, p_resp, p_lock_timeout_ms) c,
    LATERAL (SELECT string_to_array(c.r, ' ') AS f) packed
$$;

-- Schema 2's mark failed, for the instances of schemas 2 to 5: `_mark_failed_v3`'s without a
-- cause (the row it leaves has none: an EXECUTING row's resp is NULL, `_hold_v2` clears it).
CREATE OR REPLACE FUNCTION {{schema}}.{{table}}_mark_failed_v2(
  p_key text, p_owner text, p_attempt bigint, p_rev bigint, p_retryable boolean, p_retention_ms bigint,
  p_lock_timeout_ms integer, OUT kind text, OUT rev bigint, OUT state text)
LANGUAGE sql AS $$
  SELECT m.kind, m.rev, m.state FROM {{schema}}.{{table}}_mark_failed_v3(
    p_key, p_owner, p_attempt, p_rev, p_retryable, p_retention_ms, p_lock_timeout_ms, NULL) m
$$;

-- Schema 2's sweeper's step, for the instances of schemas 2 to 7: `_sweep_v3`'s, which also
-- deletes the recovery points of the records it deletes (-1 when another instance holds the
-- sweep lock).
CREATE OR REPLACE FUNCTION {{schema}}.{{table}}_sweep_v2(p_limit integer, p_lock bigint) RETURNS integer
LANGUAGE sql AS $$
  SELECT {{schema}}.{{table}}_sweep_v3(p_limit, p_lock)
$$;
