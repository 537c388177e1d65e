-- Schema 7: one claim decision. `<table>_claim_v4` (005-resume.sql) stays, unchanged, the one
-- function that decides a claim; the claims earlier versions call during a rolling deploy become
-- calls of it, with the same names, signatures and answers: schema 4's `_claim_v3` passes its
-- `p_takeover` as 'takeover' (true) or 'recover' (false), as `_claim_v4` takes it, and schema 2's
-- `_claim_v2` does the same and unpacks the packed answer into its columns. Until this, each was a
-- copy of the steps of its own. Only bodies change: CREATE OR REPLACE keeps each function (its
-- oid, its grants) and takes no lock on the table.

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
-- `_claim_v3` passes it, its packed answer (see `_claim_v4`) in one column per field.
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

COMMENT ON TABLE {{schema}}.{{table}} IS 'idemkit records, schema 7';
