-- Schema 7: one claim decision. `<table>_claim_v4` (005-resume.sql) stays, unchanged, the one
-- function that decides a claim; the claims earlier versions call during a rolling deploy become
-- calls of it, with the same names, signatures and answers: schema 4's `_claim_v3` passes its
-- `p_takeover` as 'takeover' (true) or 'recover' (false), as `_claim_v4` takes it, and schema 2's
-- `_claim_v2` does the same and unpacks the packed answer into its columns. Until this, each was a
-- copy of the steps of its own. Only bodies change: CREATE OR REPLACE keeps each function (its
-- oid, its grants) and takes no lock on the table.
--
-- This file keeps the version's table changes and its version; its functions are in functions/
-- as they run now, whose three files every migration applies after the numbered files.

COMMENT ON TABLE {{schema}}.{{table}} IS 'idemkit records, schema 7';
