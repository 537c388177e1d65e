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
--
-- This file keeps the version's table changes and its version; its functions are in functions/
-- as they run now, whose three files every migration applies after the numbered files.

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

-- The version, where migrate() and the startup report read it (the catalog: no lock). COMMENT
-- takes a SHARE UPDATE EXCLUSIVE lock, which writers of records never wait for.
COMMENT ON TABLE {{schema}}.{{table}} IS 'idemkit records, schema 2';
