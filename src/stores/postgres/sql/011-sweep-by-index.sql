-- Schema 11: the sweep reads the clock once, before it looks for expired rows, and compares the
-- rows' expiry with that reading, so the expiry index bounds the scan: a round that finds fewer
-- than its batch of expired rows stops at the first row not yet expired, where schema 10's
-- `clock_timestamp()` in the condition (volatile, so a filter and not an index bound) had it read
-- the whole index, a table's worth of rows every round. Bodies only (CREATE OR REPLACE keeps the
-- functions and their grants, and takes no lock on the table).
--
-- This file keeps the version's table changes and its version; its functions are in functions/
-- as they run now, whose three files every migration applies after the numbered files.

COMMENT ON TABLE {{schema}}.{{table}} IS 'idemkit records, schema 11';
