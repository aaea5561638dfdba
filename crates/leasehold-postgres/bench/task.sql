-- The statements leasehold sends for `task_claim` + `task_complete`, as
-- pgbench runs them (queue "pgbench"): each one statement committing on
-- its own. A unit test (leasehold-postgres, task.rs) checks they are the
-- statements the store sends, parameters spelled as literals here (the
-- colon of the notification payload as \x3a: pgbench would take
-- ":pgbench" for a variable).
WITH n AS MATERIALIZED (SELECT clock_timestamp() AS now),
expired AS ( SELECT t.seq, t.priority, t.available_at, t.attempts < t.max_attempts AS back FROM task t, n WHERE t.queue = 'pgbench' AND t.state = 'running' AND t.lease_until <= n.now FOR UPDATE OF t SKIP LOCKED),
pending AS ( SELECT t.seq, t.priority, t.available_at FROM task t, n WHERE t.queue = 'pgbench' AND t.state = 'pending' AND t.available_at <= n.now ORDER BY t.priority DESC, t.available_at, t.seq LIMIT 1 FOR UPDATE OF t SKIP LOCKED),
pick AS ( SELECT c.seq FROM ( SELECT seq, priority, available_at FROM pending UNION ALL SELECT e.seq, e.priority, e.available_at FROM expired e, n WHERE e.back AND e.available_at <= n.now ) c ORDER BY c.priority DESC, c.available_at, c.seq LIMIT 1),
changed AS ( UPDATE task SET state = CASE WHEN c.claimed THEN 'running' WHEN task.attempts >= task.max_attempts THEN 'dead' ELSE 'pending' END, attempts = task.attempts + CASE WHEN c.claimed THEN 1 ELSE 0 END, token = task.token + CASE WHEN c.claimed THEN 1 ELSE 0 END, owner = CASE WHEN c.claimed THEN 'bench' ELSE task.owner END, lease_until = CASE WHEN c.claimed THEN n.now + 60000000::bigint * interval '1 microsecond' END, ttl_ms = CASE WHEN c.claimed THEN 60000 ELSE task.ttl_ms END, updated_at = n.now, expirations = task.expirations + CASE WHEN c.expired THEN 1 ELSE 0 END, last_error = CASE WHEN c.expired THEN 'claim expired: the worker ' || coalesce(task.owner, '?') || ' stopped heartbeating (attempt ' || task.attempts || ' of ' || task.max_attempts || ')' ELSE task.last_error END FROM n, ( SELECT u.seq, bool_or(u.claimed) AS claimed, bool_or(u.expired) AS expired FROM ( SELECT seq, false AS claimed, true AS expired FROM expired UNION ALL SELECT seq, true, false FROM pick) u GROUP BY u.seq) c WHERE task.seq = c.seq RETURNING c.claimed, c.expired, task.id, task.payload::text, task.attempts, task.max_attempts, task.token),
woken AS ( SELECT pg_notify('leasehold.bench', E'queue\x3apgbench') FROM (SELECT 1 FROM changed WHERE expired LIMIT 1) x)
SELECT id, payload, attempts, max_attempts, token, (SELECT count(*) FROM woken) FROM (SELECT 1) AS one LEFT JOIN changed ON changed.claimed \gset
UPDATE task SET state = 'done', result = NULL::text::jsonb, lease_until = NULL, updated_at = n.now FROM (SELECT clock_timestamp() AS now) AS n WHERE queue = 'pgbench' AND id = :id AND token = :token AND state = 'running' AND lease_until > n.now;
