-- Schema 6: a failed row keeps why it failed, for operators (`idemkit inspect`): the failure's
-- class and, for idemkit's own failures, a message (src/core/failure-cause.ts; never the
-- request's data), as `{"c": class, "m": message}` in UTF-8 JSON in `resp`, the column a
-- COMPLETED row keeps its response in and every other row has NULL. No column is added, so
-- nothing here waits for a lock the writers hold.
--
-- `<table>_mark_failed_v3` is schema 2's `_mark_failed_v2` with the cause; `_mark_failed_v2` is
-- left as it is for the instances of schema 5 mid rolling deploy (their failed rows keep no
-- cause). Earlier versions read `resp` only on a COMPLETED row, and a claim that takes a failed
-- row over writes it NULL (`_hold_v2`), so a row's cause goes with the attempt that failed.

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

COMMENT ON TABLE {{schema}}.{{table}} IS 'idemkit records, schema 6';
