-- Schema 8: recovery points (`idempotency.step(name, run)` on `transaction: true` runs,
-- docs/postgresql.md "Steps"). A run may split its work into named steps; each commits in a
-- transaction of its own together with a row here, its recovery point: the step's name and its
-- JSON result, tied to the record's generation (the record's `created_at`, which a takeover keeps
-- and a record created afresh over an expired row replaces) and fenced by the owner's attempt. A
-- re-run of the record (a takeover, a resumed claim, a retry after a failure) finds the point and
-- skips the step, getting its result back. Nothing else changes: the claim, the completion and
-- every other function but the sweep are the earlier schemas'.
--
-- The rows go with their record: the sweep (`_sweep_v3`, functions/2-operations.sql) deletes a
-- key's points in the statement that deletes its expired record, and an operator's delete
-- (`idemkit resolve`) does too. No foreign key: the records table stays one a team may TRUNCATE.
-- A point of an earlier generation of the key (the row was created afresh after it expired) is
-- never read, and is replaced when the new generation commits a step of the same name.
--
-- This file keeps the version's table changes and its version; its functions are in functions/
-- as they run now, whose three files every migration applies after the numbered files.

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

COMMENT ON TABLE {{schema}}.{{table}} IS 'idemkit records, schema 8';
