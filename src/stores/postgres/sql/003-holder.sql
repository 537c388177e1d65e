-- Schema 3: the bodies of schema 2's functions written as the Lua scripts are, with identical
-- behaviour. The functions keep their names and signatures (`<table>_claim_v2`, ...): instances
-- of the previous version, mid rolling deploy, call the same functions and get the same answers.
-- Only bodies change (CREATE OR REPLACE takes no lock on the table), and two helpers are added:
--
-- - `_holder_v2`, the twin of lib/transition.lua: locks the row, reads it and the clock, and
--   answers the refusal (`_check_v2`'s rules), used by every transition (through
--   `_transition_v2`) and by renew (the owner rule of `_check_v2`, rev not compared);
-- - `_hold_v2`, the twin of lib/record.lua's write_record for a claim: the one statement that
--   writes a new hold, whether it inserts the row (step 1 on an absent row), recreates an expired
--   one (step 1) or takes one over (step 6).
--
-- Schema 2's `_locked_v2` is left as it is, called by nothing once this is applied (a call of
-- schema 2's bodies still running while this commits finds it there).
--
-- This file keeps the version's table changes and its version; its functions are in functions/
-- as they run now, whose three files every migration applies after the numbered files.

COMMENT ON TABLE {{schema}}.{{table}} IS 'idemkit records, schema 3';
