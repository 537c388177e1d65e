-- The PostgreSQL store's functions, first of three files: the rules the operations share (a
-- time in epoch milliseconds, the liveness rule, the transition check, a renewed lease, a new
-- hold, the holder's row and a transition of it). 2-operations.sql holds what the store of this
-- version calls, built on these; 3-earlier-versions.sql the entry points kept only for the
-- instances of earlier schema versions during a rolling deploy. The three apply in name order,
-- each after what it calls: a function in SQL (not PL/pgSQL) is checked when it is created.
--
-- The functions are every one as it runs now: what the database does. The tables are data and
-- change by the numbered files of the directory above (`001-records.sql` ... , each version's
-- table changes and its version comment); the functions are code and live only in these three
-- files. `migrate()` (and `migrationSql()`) applies the numbered files after the database's
-- version and then these files, in one transaction, whether the database is new (all of them) or
-- at an earlier version (the ones after it): every path ends in the same functions, and
-- test/stores/postgres/schema.test.ts compares a new database with ones of every earlier release
-- (frozen in test/stores/postgres/fixtures/released/) brought up to date, function by function
-- (pg_proc), column by column and index by index. {{schema}} and {{table}} are replaced by the
-- store's names (plain identifiers).
--
-- Each function is CREATE OR REPLACE: applied again it changes nothing, and it keeps a
-- function's oid and grants. That cannot change a function's result type or argument names, so a
-- function whose signature changes is a new name (a new version suffix), never an edit of these
-- files; a function retired once no instance of its version can be left goes with a DROP FUNCTION
-- in 3-earlier-versions.sql.
--
-- Every function is named with a version suffix (`<table>_claim_v4`, `_inspect_v2`, ...): a
-- version adds functions of its own and never changes what an earlier version's functions
-- answer, so during a rolling deploy the instances of the old version keep calling theirs on the
-- same rows (docs/postgresql.md "Migrations and rolling deploys"). Each operation is one
-- function, called as one statement, the twin of its Lua script in src/stores/redis/scripts/.
-- Every lease and expiry decision uses one reading of clock_timestamp() taken after the row is
-- read or locked (not now(): it is frozen for a whole transaction), truncated to milliseconds, so
-- times compare as the other stores' do.

-- Epoch milliseconds of a time the functions made (all truncated to milliseconds: exact). Only
-- immutable operations (an interval's epoch, not a timestamptz's, which is merely stable), so
-- the planner inlines it wherever it is called instead of running it as a function of its own.
CREATE OR REPLACE FUNCTION {{schema}}.{{table}}_ms_v2(t timestamptz) RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$ SELECT (extract(epoch FROM t - timestamptz 'epoch') * 1000)::bigint $$;

-- The liveness rule (lib/live.lua, rules.ts liveRecord): absent once expires_at <= now, and a
-- COMPLETED row once replay_until <= now. Claim and inspect share it, so they cannot disagree.
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

-- The lease and expiry of an EXECUTING record at `p_attempt`: its row's, or the later ones of a
-- renewal in the leases table.
CREATE OR REPLACE FUNCTION {{schema}}.{{table}}_held_v2(
  p_key text, p_attempt bigint, INOUT lease_until timestamptz, INOUT expires_at timestamptz)
LANGUAGE sql STABLE AS $$
  SELECT greatest($3, max(l.lease_until)), greatest($4, max(l.expires_at))
  FROM {{schema}}.{{table}}_leases l WHERE l.key = $1 AND l.attempt = $2
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

-- The row of a transition or a renewal (the twin of lib/transition.lua), locked (lock_timeout
-- bounds the wait), the clock read after the lock, and the refusal: `kind` NULL means apply it;
-- else the answer, with the row's rev for ALREADY and its state for WRONG_STATE. A renewal
-- (`p_renewal`) compares no rev and counts the later lease of the leases table for an EXECUTING
-- row; it locks FOR KEY SHARE when `p_key_share` (a run in a transaction: the leases table).
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
