-- Schema 9: a burst of claims of one new key decided without queueing. Until this, a claim that
-- found no row and whose insert met a concurrent claim's (the insert waits until that claim
-- commits, then does nothing) went straight to the row's lock, so a burst of N claims of one new
-- key (a client's retries fanned out, a queue redelivering to many consumers) passed the lock
-- from one session to the next, N times in a row: on a loaded machine the last ones waited past
-- lockTimeoutMs and answered 503. Now such a claim reads the committed row again without a lock
-- and decides from it as a claim that found the row at once does (a request in flight, a replay,
-- a mismatch); only what that read leaves undecided waits for the lock. The answers are the same
-- ones; only `_claim_v4`'s body changes (CREATE OR REPLACE keeps the function, its grants, and
-- takes no lock on the table), so the instances of schemas 5 to 8 get the change through it.
--
-- This file keeps the version's table changes and its version; its functions are in functions/
-- as they run now, whose three files every migration applies after the numbered files.

COMMENT ON TABLE {{schema}}.{{table}} IS 'idemkit records, schema 9';
