-- Schema 10: the earlier versions' entry points decide nothing of their own. `_locked_v2`,
-- `_complete_v2`, `_mark_failed_v2` and `_sweep_v2` keep their names, signatures and answers and
-- become calls of this version's functions instead of copies of them: `_holder_v2` (without a
-- renewal's read, FOR UPDATE), `_complete_v3` (its packed answer unpacked into kind, rev and
-- state), `_mark_failed_v3` (without a cause: the EXECUTING row it fails holds none) and
-- `_sweep_v3`, so the sweepers of schemas 2 to 7 now delete the recovery points of the records
-- they delete, as schema 8's does. Bodies only (CREATE OR REPLACE keeps the functions and their
-- grants, and takes no lock on the table).
--
-- This file keeps the version's table changes and its version; its functions are in functions/
-- as they run now, whose three files every migration applies after the numbered files.

COMMENT ON TABLE {{schema}}.{{table}} IS 'idemkit records, schema 10';
