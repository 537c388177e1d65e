-- Schema 8: recovery points (`idempotency.step(name, run)` on `transaction: true` runs,
-- docs/postgresql.md "Steps"). A run may split its work into named steps; each commits in a
-- transaction of its own together with a row here, its recovery point: the step's name and its
-- JSON result, tied to the record's generation (the record's `created_at`, which a takeover keeps
-- and a record created afresh over an expired row replaces) and fenced by the owner's attempt. A
-- re-run of the record (a takeover, a resumed claim, a retry after a failure) finds the point and
-- skips the step, getting its result back. Nothing else changes: the claim, the completion and
-- every other function but the sweep are the earlier schemas'.
--
-- The rows go with their record: the sweep (`_sweep_v3`, below) deletes a key's points in the
-- statement that deletes its expired record, and an operator's delete (`idemkit resolve`) does
-- too. No foreign key: the records table stays one a team may TRUNCATE. A point of an earlier
-- generation of the key (the row was created afresh after it expired) is never read, and is
-- replaced when the new generation commits a step of the same name.
CREATE TABLE IF NOT EXISTS {{schema}}.{{table}}_steps (
  key text NOT NULL,
  -- The step's name, as the handler gave it.
  name text NOT NULL,
  -- The record's created_at when the step committed: the generation the point belongs to.
  born timestamptz NOT NULL,
  -- The fencing token of the execution that committed it.
  attempt bigint NOT NULL,
  -- The step's result as JSON text (NULL: the step returned undefined).
  result text,
  committed_at timestamptz NOT NULL,
  PRIMARY KEY (key, name)
);

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

-- The sweep of schema 2 (`_sweep_v2`), deleting the points of the records it deletes in the same
-- statement (found by the steps table's primary key). Instances of earlier schemas keep calling
-- `_sweep_v2`, which leaves the points of what it deletes; this one's next rounds do not find
-- them, since the key is gone: an earlier schema's sweeper is stopped once the deploy is done.
CREATE OR REPLACE FUNCTION {{schema}}.{{table}}_sweep_v3(p_limit integer, p_lock bigint) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
  n integer;
BEGIN
  IF NOT pg_try_advisory_xact_lock(p_lock) THEN
    RETURN -1;
  END IF;
  WITH gone AS (
    DELETE FROM {{schema}}.{{table}} t WHERE t.key IN (
      SELECT s.key FROM {{schema}}.{{table}} s WHERE s.expires_at <= clock_timestamp()
        AND NOT (s.state = 'EXECUTING' AND EXISTS (SELECT 1 FROM {{schema}}.{{table}}_leases l
          WHERE l.key = s.key AND l.attempt = s.attempt AND l.expires_at > clock_timestamp()))
      ORDER BY s.expires_at LIMIT p_limit FOR UPDATE SKIP LOCKED)
    RETURNING t.key
  ), points AS (
    DELETE FROM {{schema}}.{{table}}_steps p WHERE p.key IN (SELECT g.key FROM gone g)
  )
  SELECT count(*) INTO n FROM gone;
  -- Leases that no longer count: run out, or of a record no longer EXECUTING at their attempt.
  DELETE FROM {{schema}}.{{table}}_leases l WHERE l.key IN (
    SELECT x.key FROM {{schema}}.{{table}}_leases x
    WHERE x.expires_at <= clock_timestamp() OR NOT EXISTS (SELECT 1 FROM {{schema}}.{{table}} t
      WHERE t.key = x.key AND t.attempt = x.attempt AND t.state = 'EXECUTING')
    LIMIT p_limit FOR UPDATE SKIP LOCKED);
  RETURN n;
END
$$;

COMMENT ON TABLE {{schema}}.{{table}} IS 'idemkit records, schema 8';
