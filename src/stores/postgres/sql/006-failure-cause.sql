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
--
-- This file keeps the version's table changes and its version; its functions are in functions/
-- as they run now, whose three files every migration applies after the numbered files.

COMMENT ON TABLE {{schema}}.{{table}} IS 'idemkit records, schema 6';
