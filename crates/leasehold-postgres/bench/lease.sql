-- The statements leasehold sends for `lease_acquire` + `lease_release`
-- of a free name (one per client), as pgbench runs them. A unit test
-- (leasehold-postgres, lease.rs) checks they are the statements the store
-- sends, parameters spelled as literals, variables and expressions here
-- (the colon of a notification payload as \x3a: pgbench would take
-- ":pgb" for a variable).
BEGIN;
SELECT clock_timestamp() AS now FROM (SELECT pg_advisory_xact_lock(hashtextextended('leasehold/bench/lease/pgb-' || :client_id, 0))) AS l \gset
SELECT name, token, owner, owner_explicit, exclusive, shared_limit, holder::text, acquired_at, ttl_ms, expires_at FROM lease_grant WHERE name = 'pgb-' || :client_id ORDER BY token FOR UPDATE;
WITH gone AS (DELETE FROM lease_waiter WHERE name = 'pgb-' || :client_id AND expires_at <= :now RETURNING id), woken AS (SELECT pg_notify('leasehold.bench', E'lease\x3apgb-' || :client_id) FROM (SELECT 1 FROM gone LIMIT 1) x) SELECT w.id, w.exclusive, w.shared_limit, w.holder::text, (SELECT count(*) FROM woken) FROM (SELECT 1) AS one LEFT JOIN lease_waiter w ON w.name = 'pgb-' || :client_id AND w.expires_at > :now ORDER BY w.id;
WITH c AS (SELECT (SELECT last_token FROM lease_name WHERE name = 'pgb-' || :client_id) AS counted, coalesce((SELECT token FROM lease_history WHERE name = 'pgb-' || :client_id AND event = 'granted' ORDER BY id DESC LIMIT 1), 0) AS granted, coalesce((SELECT floor FROM lease_token_floor WHERE id = 1), 0) AS floor), t AS (INSERT INTO lease_name (name, last_token) SELECT 'pgb-' || :client_id, c.floor + 1 FROM c WHERE c.granted <= greatest(coalesce(c.counted, 0), c.floor) ON CONFLICT (name) DO UPDATE SET last_token = greatest(lease_name.last_token + 1, excluded.last_token) RETURNING last_token) INSERT INTO lease_grant (name, token, owner, owner_explicit, exclusive, shared_limit, holder, acquired_at, ttl_ms, expires_at) SELECT 'pgb-' || :client_id, t.last_token, 'bench', false, true, NULL, '{"host":"bench","pid":1}'::text::jsonb, clock_timestamp(), 60000, :now::timestamptz + interval '60 s' FROM t RETURNING name, token, owner, owner_explicit, exclusive, shared_limit, holder::text, acquired_at, ttl_ms, expires_at \gset
WITH added AS (INSERT INTO lease_history (name, at, event, token, owner, detail) VALUES ('pgb-' || :client_id, clock_timestamp(), 'granted', :token, 'bench', 'exclusive for 60.0s to bench:1') RETURNING id) DELETE FROM lease_history WHERE name = 'pgb-' || :client_id AND id <= (SELECT id FROM lease_history WHERE name = 'pgb-' || :client_id ORDER BY id DESC LIMIT 1 OFFSET 999);
COMMIT;
BEGIN;
SELECT clock_timestamp() AS now FROM (SELECT pg_advisory_xact_lock(hashtextextended('leasehold/bench/lease/pgb-' || :client_id, 0))) AS l \gset
SELECT name, token, owner, owner_explicit, exclusive, shared_limit, holder::text, acquired_at, ttl_ms, expires_at FROM lease_grant WHERE name = 'pgb-' || :client_id AND token = :token FOR UPDATE;
WITH gone AS (DELETE FROM lease_grant WHERE name = 'pgb-' || :client_id AND token = :token) SELECT pg_notify('leasehold.bench', E'lease\x3apgb-' || :client_id);
WITH added AS (INSERT INTO lease_history (name, at, event, token, owner, detail) VALUES ('pgb-' || :client_id, clock_timestamp(), 'released', :token, 'bench', 'released by its holder') RETURNING id) DELETE FROM lease_history WHERE name = 'pgb-' || :client_id AND id <= (SELECT id FROM lease_history WHERE name = 'pgb-' || :client_id ORDER BY id DESC LIMIT 1 OFFSET 999);
COMMIT;
