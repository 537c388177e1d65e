-- Schema 1: the PostgreSQL store's records table, one row per scope, and its index.
--
-- The numbered files of this directory are the tables' changes, one file per schema version, each
-- ending by recording its version as the table's comment; the three files of functions/ hold
-- every function as it runs now. `store.migrate()` (or a team's own migration tool, given
-- `migrationSql()`) applies the numbered files after the database's version, all of them for a
-- new database, and then functions/1-rules.sql, 2-operations.sql and 3-earlier-versions.sql, in
-- one transaction, with {{schema}} and {{table}} replaced by the store's names (plain
-- identifiers). `migrate()` reads the version from the catalog first, so an instance
-- starting against a schema already at its version takes no lock at all.

CREATE TABLE IF NOT EXISTS {{schema}}.{{table}} (
  -- The scope's store key (<prefix>:idem:1:d<v>:<opcode>:<digest>): never a raw key or principal.
  key text PRIMARY KEY,
  state text NOT NULL CHECK (state IN ('CLAIMED', 'EXECUTING', 'COMPLETED', 'FAILED_RETRYABLE', 'ABANDONED')),
  -- The holder's token, 64 lowercase hex: transitions compare it.
  owner text NOT NULL,
  -- The fencing token: grows by one on every takeover.
  attempt bigint NOT NULL,
  -- Grows by one on every state change: transitions compare it (the ALREADY rule).
  rev bigint NOT NULL,
  -- The operation's name, the request's fingerprint, the codec and policy revision of the answer.
  op text NOT NULL,
  fp text NOT NULL,
  codec text NOT NULL,
  policy text NOT NULL,
  lease_until timestamptz NOT NULL,
  -- COMPLETED only: the end of the replay window.
  replay_until timestamptz,
  -- From this instant the row reads as absent, whatever its state; the sweeper deletes it after.
  expires_at timestamptz NOT NULL,
  -- COMPLETED: the stored response, the codec's bytes. FAILED_RETRYABLE and ABANDONED (schema 6):
  -- the failure's cause, `{"c": class, "m": message}` in UTF-8 JSON, or NULL.
  resp bytea,
  created_at timestamptz NOT NULL,
  updated_at timestamptz NOT NULL
);

CREATE INDEX IF NOT EXISTS {{table}}_expires_at ON {{schema}}.{{table}} (expires_at);

COMMENT ON TABLE {{schema}}.{{table}} IS 'idemkit records, schema 1';
