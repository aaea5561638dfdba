-- Pending tasks for the claim+done benchmarks: queue "bench" for leasehold,
-- queue "pgbench" for pgbench. Run after `leasehold migrate` on ?schema=bench.
SET search_path = bench;
INSERT INTO task (queue, id, payload, priority, state, max_attempts, available_at, created_at, updated_at)
SELECT q, 't' || g, '{}', 0, 'pending', 5, now() - interval '1 minute', now(), now()
FROM generate_series(1, 300000) AS g, (VALUES ('bench'), ('pgbench')) AS v(q);
ANALYZE task;
