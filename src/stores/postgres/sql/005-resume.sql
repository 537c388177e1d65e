-- Schema 5: the claim with a third answer to an execution that ended without its answer, under a
-- new name (`<table>_claim_v4`), beside schema 4's `_claim_v3`, which is left as it is: instances
-- of schema 4, mid rolling deploy, keep calling theirs on the same rows, with the same answers.
-- The record's layout does not change, nor does any other function.
--
-- `p_expired` replaces `_claim_v3`'s `p_takeover boolean`: 'recover' and 'takeover' answer as
-- `p_takeover` false and true did; 'resume' (a route whose external effects go through derived
-- keys and whose local writes go through its transaction, docs/options.md `resume`) takes over
-- an EXECUTING row whose lease ran out, as 'takeover' does, and an ABANDONED row too (step 4),
-- so the retry re-runs the handler with the next attempt instead of answering recovery-required.
--
-- This file keeps the version's table changes and its version; its functions are in functions/
-- as they run now, whose three files every migration applies after the numbered files.

COMMENT ON TABLE {{schema}}.{{table}} IS 'idemkit records, schema 5';
