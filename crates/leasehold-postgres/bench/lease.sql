-- The statements leasehold sends for `lease_acquire` + `lease_release` of a
-- free name (one per client), as pgbench would run them by hand.
BEGIN;
SELECT (clock_timestamp() + coalesce(nullif(current_setting('leasehold.skew_us', true), ''), '0')::bigint * interval '1 microsecond') AS now FROM (SELECT pg_advisory_xact_lock(hashtextextended('leasehold/bench/lease/pgb-' || :client_id, 0))) AS l \gset
SELECT name, token, owner, owner_explicit, exclusive, shared_limit, holder::text, acquired_at, ttl_ms, expires_at FROM lease_grant WHERE name = 'pgb-' || :client_id ORDER BY token FOR UPDATE;
DELETE FROM lease_waiter WHERE name = 'pgb-' || :client_id AND expires_at <= :now::timestamptz;
SELECT id, exclusive, shared_limit FROM lease_waiter WHERE name = 'pgb-' || :client_id ORDER BY id;
INSERT INTO lease_name (name, last_token) VALUES ('pgb-' || :client_id, 1) ON CONFLICT (name) DO UPDATE SET last_token = lease_name.last_token + 1 RETURNING last_token AS token \gset
INSERT INTO lease_grant (name, token, owner, owner_explicit, exclusive, shared_limit, holder, acquired_at, ttl_ms, expires_at) VALUES ('pgb-' || :client_id, :token, 'bench', false, true, NULL, '{"host":"bench","pid":1}'::text::jsonb, clock_timestamp(), 60000, :now::timestamptz + interval '60 s') RETURNING name, token, owner, owner_explicit, exclusive, shared_limit, holder::text, acquired_at, ttl_ms, expires_at;
INSERT INTO lease_history (name, at, event, token, owner, detail) VALUES ('pgb-' || :client_id, clock_timestamp(), 'granted', :token, 'bench', 'exclusive for 60.0s to bench:1');
DELETE FROM lease_history WHERE name = 'pgb-' || :client_id AND id <= (SELECT id FROM lease_history WHERE name = 'pgb-' || :client_id ORDER BY id DESC LIMIT 1 OFFSET 1000);
COMMIT;
BEGIN;
SELECT (clock_timestamp() + coalesce(nullif(current_setting('leasehold.skew_us', true), ''), '0')::bigint * interval '1 microsecond') AS now FROM (SELECT pg_advisory_xact_lock(hashtextextended('leasehold/bench/lease/pgb-' || :client_id, 0))) AS l \gset
SELECT name, token, owner, owner_explicit, exclusive, shared_limit, holder::text, acquired_at, ttl_ms, expires_at FROM lease_grant WHERE name = 'pgb-' || :client_id AND token = :token FOR UPDATE;
DELETE FROM lease_grant WHERE name = 'pgb-' || :client_id AND token = :token;
INSERT INTO lease_history (name, at, event, token, owner, detail) VALUES ('pgb-' || :client_id, clock_timestamp(), 'released', :token, 'bench', 'released by its holder');
DELETE FROM lease_history WHERE name = 'pgb-' || :client_id AND id <= (SELECT id FROM lease_history WHERE name = 'pgb-' || :client_id ORDER BY id DESC LIMIT 1 OFFSET 1000);
COMMIT;
