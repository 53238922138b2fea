-- Named queries for SQLite (sqlite3 named parameters). Same names as postgresql.sql, plus the
-- few that PostgreSQL does in one statement and SQLite needs two for (run inside one
-- BEGIN IMMEDIATE transaction, which SQLite serialises against every other writer).
-- Batches arrive as one JSON parameter and are unpacked with json_each, so a batch is one
-- statement however long it is. Times are Django's text format, UTC, compared lexically.

-- fragment: runnable
-- A row a claim may take: queued and due, running with its lease lapsed (a re-delivery), or
-- waiting and woken. Follows a WHERE or an AND.
status IN ('queued', 'running', 'waiting')
  AND visible_at <= {now}

-- fragment: candidate
-- What the claim needs of a candidate row: its rank (priority, due time, id) and what it was
-- before the claim (status, worker, claim time).
SELECT id, priority, visible_at, status, worker_id, claimed_at
FROM django_ultjobs_job

-- fragment: claim_order
-- The claim order (the claim indexes' order), at most :limit rows.
ORDER BY priority DESC, visible_at, id
LIMIT :limit

-- name: enqueue
-- Insert many jobs in one statement from a JSON array, in array order.
INSERT INTO django_ultjobs_job
    (name, queue, priority, args, kwargs, status, attempt, max_attempts, visible_at,
     claim_token, worker_id, cancel_requested, traceparent, tracestate, enqueued_by,
     last_error, wait_event, wait_after, created_at, updated_at, concurrency_key, timeout,
     expires_at, tags)
SELECT json_extract(value, '$.name'), json_extract(value, '$.queue'),
       json_extract(value, '$.priority'), json_extract(value, '$.args'),
       json_extract(value, '$.kwargs'), 'queued', 0, json_extract(value, '$.max_attempts'),
       -- run_at in the clock's own (millisecond) form: compared lexically against the clock, the
       -- microsecond form Python writes sorts after it and was due a millisecond late.
       COALESCE(strftime('%Y-%m-%d %H:%M:%f', json_extract(value, '$.run_at')),
                {now_plus(json_extract(value, '$.delay'))}),
       NULL, '', 0, json_extract(value, '$.traceparent'), json_extract(value, '$.tracestate'),
       json_extract(value, '$.enqueued_by'), '', '', 0, {now}, {now},
       json_extract(value, '$.concurrency_key'), json_extract(value, '$.timeout'),
       -- CASE, not NULL in the arithmetic: printf() reads a NULL as 0 seconds.
       CASE WHEN json_extract(value, '$.expires_in') IS NOT NULL
            THEN {now_plus(json_extract(value, '$.expires_in'))} END,
       COALESCE(json_extract(value, '$.tags'), '[]')
FROM json_each(:jobs)
WHERE true
ORDER BY key
RETURNING id, visible_at, created_at, expires_at;

-- name: enqueue_unique
-- Insert jobs that hold unique keys (and any others of the same batch) in array order, each
-- keyed job only if no other row holds its (name, unique_key): the partial unique index
-- ultjobs_job_unique_key skips it (rules 65 (one-key-holder) to 67 (unique-for-window)). SQLite has
-- one writer at a time, so two enqueues of one key never interleave inside this statement. A
-- skipped job returns no row. The "WHERE true" lets SQLite parse the ON CONFLICT clause after a
-- SELECT.
INSERT INTO django_ultjobs_job
    (name, queue, priority, args, kwargs, status, attempt, max_attempts, visible_at,
     claim_token, worker_id, cancel_requested, traceparent, tracestate, enqueued_by,
     last_error, wait_event, wait_after, created_at, updated_at, concurrency_key, timeout,
     expires_at, unique_key, unique_for, tags)
SELECT json_extract(value, '$.name'), json_extract(value, '$.queue'),
       json_extract(value, '$.priority'), json_extract(value, '$.args'),
       json_extract(value, '$.kwargs'), 'queued', 0, json_extract(value, '$.max_attempts'),
       COALESCE(strftime('%Y-%m-%d %H:%M:%f', json_extract(value, '$.run_at')),
                {now_plus(json_extract(value, '$.delay'))}),
       NULL, '', 0, json_extract(value, '$.traceparent'), json_extract(value, '$.tracestate'),
       json_extract(value, '$.enqueued_by'), '', '', 0, {now}, {now},
       COALESCE(json_extract(value, '$.concurrency_key'), ''), json_extract(value, '$.timeout'),
       CASE WHEN json_extract(value, '$.expires_in') IS NOT NULL
            THEN {now_plus(json_extract(value, '$.expires_in'))} END,
       json_extract(value, '$.unique_key'), COALESCE(json_extract(value, '$.unique_for'), 0),
       COALESCE(json_extract(value, '$.tags'), '[]')
FROM json_each(:jobs)
WHERE true
ORDER BY key
ON CONFLICT (name, unique_key) WHERE unique_key IS NOT NULL DO NOTHING
RETURNING id, visible_at, created_at, name, unique_key, expires_at;

-- name: unique_release
-- Take the keys of :keys ([[name, key], ...]) from the rows holding them that have expired:
-- finished (succeeded, failed or cancelled) at least their own unique_for seconds ago on the
-- database's clock (rule 67 (unique-for-window)), each keeping its key as its released_key. The
-- enqueue that asked inserts again after it; a retry of a job whose key was taken over takes its
-- key back after it (rule 107 (retry-takes-key-back)).
UPDATE django_ultjobs_job
SET unique_key = NULL, released_key = unique_key
WHERE unique_key IS NOT NULL
  AND (name, unique_key) IN (SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]')
                             FROM json_each(:keys))
  AND status IN ('succeeded', 'failed', 'cancelled')
  AND (finished_at IS NULL OR finished_at <= {now_plus(-unique_for)})
RETURNING id;

-- name: unique_holder
-- The row holding unique key (:name, :key), every column (read as a Job by the ORM's raw(),
-- which maps columns by name): what enqueue() returns when the key is held
-- (rule 66 (held-key-returns-holder)). By the unique index; the ORM's own query cost more to build
-- than to run.
SELECT * FROM django_ultjobs_job WHERE name = :name AND unique_key = :key LIMIT 1;

-- name: claim_caps
-- Free fleet slots per capped kind (:caps is [[name, limit, kept], ...], kept being the slots this
-- worker kept from its last runs of the kind, free for it), read inside the claim's write
-- transaction so nothing can take a slot between this and the claim.
SELECT json_extract(c.value, '$[0]'),
       json_extract(c.value, '$[1]') + json_extract(c.value, '$[2]') - (
           SELECT count(*) FROM django_ultjobs_slot AS l
           WHERE l.key = {slot_key(json_extract(c.value, '$[0]'))}
             AND l.slot < json_extract(c.value, '$[1]') AND l.expires_at > {now})
FROM json_each(:caps) AS c;

-- fragment: active_queues
-- The worker's queues that are not paused (rule 75 (paused-queue)): read in the claim's own write
-- transaction, so a pause committed before it holds for it.
SELECT value FROM json_each(:queues)
WHERE value NOT IN (SELECT queue FROM django_ultjobs_queuepause)

-- name: claim_candidates
-- The runnable jobs of uncapped kinds this worker may claim, in claim order.
{fragment:candidate}
WHERE {fragment:runnable}
  AND queue IN ({fragment:active_queues})
  AND name NOT IN (SELECT value FROM json_each(:capped))
{fragment:claim_order};

-- name: claim_capped_candidates
-- The runnable jobs of one capped kind, at most as many as it has free fleet slots, so a
-- backlog of one capped kind cannot crowd the jobs behind it out of a claim.
{fragment:candidate}
WHERE name = :name
  AND {fragment:runnable}
  AND queue IN ({fragment:active_queues})
{fragment:claim_order};

-- name: claim_key_held
-- The held slots per key, for the kinds capped per key (rule 50 (per-key-cap)), read inside the
-- claim's write transaction so nothing can take a slot between this and the claim.
SELECT key, count(*) FROM django_ultjobs_slot WHERE expires_at > {now} GROUP BY key;

-- name: claim_keyed_candidates
-- The runnable jobs of one kind capped per key, past the keys whose slots are all held (:full),
-- in claim order, each with its slot key: a row enqueued before its job had concurrency_key has
-- none, and takes the job's own.
SELECT id, priority, visible_at, status, worker_id, claimed_at,
       COALESCE(NULLIF(concurrency_key, ''), {slot_key(name)})
FROM django_ultjobs_job
WHERE name = :name
  AND {fragment:runnable}
  AND queue IN ({fragment:active_queues})
  AND COALESCE(NULLIF(concurrency_key, ''), {slot_key(name)})
      NOT IN (SELECT value FROM json_each(:full))
{fragment:claim_order};

-- name: claim
-- Claim the candidates: a conditional UPDATE ... RETURNING that re-checks runnability, so it can
-- never take a row that stopped being runnable. The arguments come back as bytes, decoded in
-- Python row by row: SQLite stores whatever bytes a writer gave it, and one argument text that
-- is not UTF-8 would make the driver fail the whole claim, every time
-- (rule 15 (undecodable-row-fails-alone)).
UPDATE django_ultjobs_job
SET status = 'running',
    attempt = attempt + CASE WHEN status = 'waiting' THEN 0 ELSE 1 END,
    claim_token = :token,
    worker_id = :worker_id,
    claimed_at = {now},
    visible_at = {now_plus(:timeout)},
    updated_at = {now}
WHERE id IN (SELECT value FROM json_each(:ids))
  AND {fragment:runnable}
RETURNING id, name, queue, priority, CAST(args AS BLOB), CAST(kwargs AS BLOB), attempt,
          max_attempts, traceparent, tracestate, enqueued_by, cancel_requested, claimed_at,
          timeout, expires_at, cancel_reason;

-- name: heartbeat
-- Push the lease of every run this worker holds, fenced on each run's claim token. A run missing
-- from the result is an explicit "no" (rule 2 (heartbeat-retried)).
UPDATE django_ultjobs_job AS j
SET visible_at = {now_plus(:timeout)}
FROM (SELECT json_extract(value, '$[0]') AS id, json_extract(value, '$[1]') AS token
      FROM json_each(:runs)) AS h
WHERE j.id = h.id AND j.claim_token = h.token AND j.status = 'running'
RETURNING id, cancel_requested;

-- name: settle
-- Settle a batch of runs, each only under its own claim token (rule 4 (fenced-settle)). Returns the
-- ids that applied; settle_record then writes their attempts in the same transaction. A run
-- suspending on an event goes to 'waiting', or straight back to visible when a matching event is
-- already there (the write transaction excludes every sender, so none can commit unseen meanwhile).
UPDATE django_ultjobs_job AS j
SET status = c.status,
    attempt = j.attempt + c.attempt_delta,
    visible_at = CASE
        WHEN c.status = 'waiting' AND c.wait_event IS NOT NULL AND EXISTS (
            SELECT 1 FROM django_ultjobs_jobevent AS e
            WHERE e.name = c.wait_event AND e.id > COALESCE(c.wait_after, 0)
              AND e.created_at >= j.created_at
              AND NOT EXISTS (
                      SELECT 1 FROM json_each(COALESCE(c.wait_match, '{}')) AS m
                      WHERE NOT COALESCE(CASE
                          WHEN m.type IN ('integer', 'real')
                              THEN json_type(e.payload, '$."' || m.key || '"') IN ('integer', 'real')
                                   AND json_extract(e.payload, '$."' || m.key || '"') = m.value
                          ELSE json_type(e.payload, '$."' || m.key || '"') IS m.type
                               AND json_extract(e.payload, '$."' || m.key || '"') IS m.value END, 0)))
            THEN {now}
        WHEN c.status IN ('queued', 'waiting') THEN {now_plus(c.delay)}
        ELSE j.visible_at END,
    wait_event = CASE WHEN c.status = 'waiting' THEN COALESCE(c.wait_event, '') ELSE '' END,
    wait_match = CASE WHEN c.status = 'waiting' THEN c.wait_match ELSE NULL END,
    wait_after = CASE WHEN c.status = 'waiting' THEN COALESCE(c.wait_after, 0) ELSE 0 END,
    claim_token = NULL,
    cancel_requested = CASE WHEN c.status IN ('succeeded', 'failed') THEN 0
                            ELSE j.cancel_requested END,
    last_error = COALESCE(c.error, j.last_error),
    result = CASE WHEN c.result_json IS NULL THEN j.result ELSE c.result_json END,
    finished_at = CASE WHEN c.status IN ('succeeded', 'failed', 'cancelled')
                       THEN {now} ELSE NULL END,
    -- Held by the row only when the row's worker (the claim's) is the settle's and the slot the
    -- run held, if any, is its job's per-job slot (the view builds the key from the name;
    -- rule 97 (attempt-on-row)).
    attempt_on_row = COALESCE(c.on_row, 0) AND j.worker_id = :worker_id
                     AND (c.slot IS NULL AND c.slot_key IS NULL
                          OR c.slot IS NOT NULL AND c.slot_key = {slot_key(j.name)}),
    attempt_slot = CASE WHEN COALESCE(c.on_row, 0) AND j.worker_id = :worker_id
                             AND c.slot_key = {slot_key(j.name)} THEN c.slot END,
    updated_at = {now}
FROM (SELECT json_extract(value, '$.id') AS id, json_extract(value, '$.token') AS token,
             json_extract(value, '$.status') AS status,
             json_extract(value, '$.attempt_delta') AS attempt_delta,
             json_extract(value, '$.delay') AS delay, json_extract(value, '$.error') AS error,
             json_extract(value, '$.result_json') AS result_json,
             json_extract(value, '$.wait_event') AS wait_event,
             json_extract(value, '$.wait_match') AS wait_match,
             json_extract(value, '$.wait_after') AS wait_after,
             json_extract(value, '$.slot_key') AS slot_key,
             json_extract(value, '$.slot') AS slot,
             json_extract(value, '$.on_row') AS on_row
      FROM json_each(:batch)) AS c
WHERE j.id = c.id AND j.claim_token = c.token AND j.status = 'running'
-- Whether the run finished for good a job whose dependents its transaction releases (rule 110 (released-in-settle)).
RETURNING id, has_dependents AND status IN ('succeeded', 'failed', 'cancelled');

-- fragment: dependency_edges
-- The dependents of the jobs in "src" (id, status, batch_id, dependents): each workflow node in
-- its own row's "dependents", and each callback of a member's batch, with the dependency's id
-- and status.
SELECT d.value AS dependent, s.id AS dep, s.status
FROM src AS s, json_each(s.dependents) AS d
WHERE s.dependents IS NOT NULL
UNION ALL
SELECT cb.id, s.id, s.status
FROM src AS s JOIN django_ultjobs_job AS cb ON cb.callback_of_id = s.batch_id
WHERE s.batch_id IS NOT NULL

-- name: release_judge
-- What the finish of the jobs in :ids (JSON), just finished for good, does to each dependent
-- (rules 110 (released-in-settle) to 113 (constant-bookkeeping)), judged inside the write transaction of the settle or cancel that finished
-- them: how many of its dependencies finished and did not succeed, and its new status ('queued':
-- released; 'cancelled', naming the dependency; NULL: it stays as it is), with whether it has
-- dependents of its own. dependents_apply writes it; a cancelled one's dependents come next.
WITH src AS (
    SELECT j.id, j.status, j.batch_id, j.dependents FROM django_ultjobs_job AS j
    WHERE j.id IN (SELECT value FROM json_each(:ids))
      AND j.status IN ('succeeded', 'failed', 'cancelled')
),
edges AS ({fragment:dependency_edges}),
counted AS (
    SELECT e.dependent, count(*) AS done, sum(e.status <> 'succeeded') AS bad,
           min(CASE WHEN e.status = 'failed' THEN e.dep END) AS first_failed,
           min(CASE WHEN e.status = 'cancelled' THEN e.dep END) AS first_cancelled
    FROM edges AS e GROUP BY e.dependent
),
judged AS (
    SELECT c.*, l.has_dependents, CASE
        WHEN l.status <> 'pending' THEN NULL
        WHEN l.depends_when = 'succeeded' AND l.deps_failed + c.bad > 0 THEN 'cancelled'
        WHEN l.deps_done + c.done < l.deps_total THEN NULL
        WHEN l.depends_when = 'failed' AND l.deps_failed + c.bad = 0 THEN 'cancelled'
        ELSE 'queued' END AS verdict
    FROM counted AS c JOIN django_ultjobs_job AS l ON l.id = c.dependent
)
SELECT dependent, done, bad, verdict,
       CASE WHEN verdict = 'cancelled' THEN COALESCE(first_failed, first_cancelled) END,
       CASE WHEN verdict IS NOT 'cancelled' THEN ''
            WHEN first_failed IS NOT NULL THEN 'dependency ' || first_failed || ' failed'
            WHEN first_cancelled IS NOT NULL
                THEN 'dependency ' || first_cancelled || ' was cancelled'
            ELSE 'every dependency succeeded' END,
       verdict = 'cancelled' AND has_dependents
FROM judged ORDER BY dependent;

-- name: unfinish_judge
-- Take back the finish of the jobs in :ids (a retry queued them again; each had failed or was
-- cancelled, so each counted as a dependency that did not succeed): every dependent loses them
-- from its counters, and one their finish cancelled comes back to 'pending' when its condition
-- can hold again (rule 114 (retry-takes-finish-back)). Same columns as release_judge.
WITH src AS (
    SELECT j.id, j.status, j.batch_id, j.dependents FROM django_ultjobs_job AS j
    WHERE j.id IN (SELECT value FROM json_each(:ids))
),
edges AS ({fragment:dependency_edges}),
counted AS (SELECT e.dependent, count(*) AS n FROM edges AS e GROUP BY e.dependent),
judged AS (
    SELECT c.*, l.has_dependents,
           CASE WHEN l.status = 'cancelled' AND l.cancelled_by IS NOT NULL
                     AND l.deps_failed - c.n = 0 THEN 'pending' END AS verdict
    FROM counted AS c JOIN django_ultjobs_job AS l ON l.id = c.dependent
)
SELECT dependent, -n, -n, verdict, NULL, '', verdict = 'pending' AND has_dependents
FROM judged ORDER BY dependent;

-- name: dependents_apply
-- Write what release_judge or unfinish_judge decided (:rows, JSON [[id, done, bad, status,
-- cancelled_by, reason], ...]): the counters always, the status when one is given ('queued'
-- visible now or at its own due time, 'cancelled' finished now, 'pending' back from a cancel).
UPDATE django_ultjobs_job AS j
SET deps_done = j.deps_done + c.done,
    deps_failed = j.deps_failed + c.bad,
    status = COALESCE(c.status, j.status),
    -- Never before the due time its enqueue gave it (run_at, delay):
    -- rule 150 (release-keeps-due-time).
    visible_at = CASE WHEN c.status = 'queued' THEN MAX(j.visible_at, {now}) ELSE j.visible_at END,
    cancelled_by = CASE WHEN c.status IS NULL THEN j.cancelled_by ELSE c.culprit END,
    cancel_reason = CASE WHEN c.status IS NULL THEN j.cancel_reason ELSE c.reason END,
    finished_at = CASE WHEN c.status IS NULL THEN j.finished_at
                       WHEN c.status = 'cancelled' THEN {now} END,
    updated_at = CASE WHEN c.status IS NULL THEN j.updated_at ELSE {now} END
FROM (SELECT json_extract(value, '$[0]') AS id, json_extract(value, '$[1]') AS done,
             json_extract(value, '$[2]') AS bad, json_extract(value, '$[3]') AS status,
             json_extract(value, '$[4]') AS culprit, json_extract(value, '$[5]') AS reason
      FROM json_each(:rows)) AS c
WHERE j.id = c.id;

-- name: settle_record
-- The attempts of the runs settle applied (ids in :settled), from the same batch; not of a run
-- whose attempt the job's row holds (on_row: a first attempt that succeeded plainly, in no slot
-- or a per-job one; rule 97 (attempt-on-row)).
INSERT INTO django_ultjobs_jobattempt
    (job_id, attempt, worker_id, started_at, finished_at, outcome, error, slot_key, slot,
     steps_run, steps_replayed)
SELECT json_extract(value, '$.id'), json_extract(value, '$.attempt_no'), :worker_id,
       json_extract(value, '$.started_at'), {now}, json_extract(value, '$.outcome'),
       COALESCE(json_extract(value, '$.error'), ''),
       COALESCE(json_extract(value, '$.slot_key'), ''), json_extract(value, '$.slot'),
       COALESCE(json_extract(value, '$.steps_run'), '[]'),
       COALESCE(json_extract(value, '$.steps_replayed'), '[]')
FROM json_each(:batch)
WHERE json_extract(value, '$.outcome') IS NOT NULL
  AND json_extract(value, '$.id') IN (SELECT value FROM json_each(:settled))
  AND (json_extract(value, '$.on_row') IS NULL OR NOT EXISTS (
      SELECT 1 FROM django_ultjobs_job AS j
      WHERE j.id = json_extract(value, '$.id') AND j.attempt_on_row))
  AND (json_extract(value, '$.extends') IS NULL OR NOT EXISTS (
      SELECT 1 FROM django_ultjobs_jobattempt AS a
      WHERE a.id = json_extract(value, '$.extends') AND a.job_id = json_extract(value, '$.id')));

-- name: settle_extend
-- A park continuing its episode (rule 12 (unknown-job-parked)) counts one more claim on the
-- episode's row, in the settle's transaction; settle_record writes a row for it only when that row
-- is gone.
UPDATE django_ultjobs_jobattempt AS a
SET claims = a.claims + 1, finished_at = {now}, worker_id = :worker_id
FROM (SELECT json_extract(value, '$.id') AS id, json_extract(value, '$.extends') AS extends
      FROM json_each(:batch)
      WHERE json_extract(value, '$.extends') IS NOT NULL
        AND json_extract(value, '$.id') IN (SELECT value FROM json_each(:settled))) AS c
WHERE a.id = c.extends AND a.job_id = c.id;

-- name: park_episodes
-- For each job an unknown-job park is about (rule 12 (unknown-job-parked)): its latest attempt row
-- (highest attempt, then newest, through the (job, attempt) index) when that row is such a park,
-- with whether its episode began the timeout ago or more.
-- started_at is cut to the clock's milliseconds first: as text, '…00.100000' > '…00.100'.
SELECT ids.value, a.id, a.attempt,
       strftime('%Y-%m-%d %H:%M:%f', a.started_at) <= {now_plus(-:timeout)}
FROM json_each(:ids) AS ids
JOIN django_ultjobs_jobattempt AS a ON a.id = (
    SELECT l.id FROM django_ultjobs_jobattempt AS l
    WHERE l.job_id = ids.value
    ORDER BY l.attempt DESC, l.id DESC
    LIMIT 1)
WHERE a.outcome = 'suspended' AND substr(a.error, 1, length(:prefix)) = :prefix;

-- name: settle_landed
-- Which settles of a batch this worker already wrote, though it never heard back: their attempts
-- are recorded under this worker with the same attempt number, start time, outcome and error
-- (rule 32 (landed-never-stale)). An attempt a re-claimer records for a lapsed lease has another
-- outcome or error. Read through the attempts view: the attempt a job's row holds counts too
-- (rule 97 (attempt-on-row)); its start is the row's claim time, kept to the clock's milliseconds
-- where an attempt row keeps the microseconds' digits, so both sides are cut to milliseconds first.
SELECT json_extract(c.value, '$.id')
FROM json_each(:batch) AS c
WHERE EXISTS (
    SELECT 1 FROM django_ultjobs_attemptrecord AS a
    WHERE a.job_id = json_extract(c.value, '$.id')
      AND a.attempt = json_extract(c.value, '$.attempt_no') AND a.worker_id = :worker_id
      AND a.outcome = json_extract(c.value, '$.outcome')
      AND a.error = json_extract(c.value, '$.error')
      AND strftime('%Y-%m-%d %H:%M:%f', a.started_at)
          IS strftime('%Y-%m-%d %H:%M:%f', json_extract(c.value, '$.started_at')));

-- name: record_attempts
-- Record attempts that ended without their worker reporting back (a lapsed lease).
INSERT INTO django_ultjobs_jobattempt
    (job_id, attempt, worker_id, started_at, finished_at, outcome, error, slot_key, slot,
     steps_run, steps_replayed)
SELECT json_extract(value, '$.job_id'), json_extract(value, '$.attempt'),
       json_extract(value, '$.worker_id'), json_extract(value, '$.started_at'), {now},
       json_extract(value, '$.outcome'), json_extract(value, '$.error'), '', NULL, '[]', '[]'
FROM json_each(:batch);

-- name: event_insert
-- Record an event.
INSERT INTO django_ultjobs_jobevent (name, payload, created_at)
VALUES (:name, :payload, {now})
RETURNING id;

-- name: event_wake
-- Wake the waiting jobs this event matches (every key of wait_match equal in the payload).
UPDATE django_ultjobs_job
SET visible_at = {now}
WHERE status = 'waiting' AND wait_event = :name AND wait_after < :event_id
  AND NOT EXISTS (
                      SELECT 1 FROM json_each(COALESCE(wait_match, '{}')) AS m
                      WHERE NOT COALESCE(CASE
                          WHEN m.type IN ('integer', 'real')
                              THEN json_type(:payload, '$."' || m.key || '"') IN ('integer', 'real')
                                   AND json_extract(:payload, '$."' || m.key || '"') = m.value
                          ELSE json_type(:payload, '$."' || m.key || '"') IS m.type
                               AND json_extract(:payload, '$."' || m.key || '"') IS m.value END, 0))
  AND created_at <= {now}
  AND visible_at > {now};

-- name: event_find
-- The first event a wait may consume: same name, matching, newer than what this job already
-- consumed, and not older than the job itself.
SELECT e.id, e.payload
FROM django_ultjobs_jobevent AS e
WHERE e.name = :name AND e.id > :after
  AND e.created_at >= (SELECT created_at FROM django_ultjobs_job WHERE id = :job_id)
  AND NOT EXISTS (
                      SELECT 1 FROM json_each(COALESCE(:match, '{}')) AS m
                      WHERE NOT COALESCE(CASE
                          WHEN m.type IN ('integer', 'real')
                              THEN json_type(e.payload, '$."' || m.key || '"') IN ('integer', 'real')
                                   AND json_extract(e.payload, '$."' || m.key || '"') = m.value
                          ELSE json_type(e.payload, '$."' || m.key || '"') IS m.type
                               AND json_extract(e.payload, '$."' || m.key || '"') IS m.value END, 0))
ORDER BY e.id
LIMIT 1;

-- name: progress_save
-- Store a run's progress (ctx.set_progress), fenced on its claim token like every write of a
-- run (rule 79 (progress-throttled-fenced)): no row returned when another claim owns the job, or it
-- has finished.
UPDATE django_ultjobs_job SET progress = :progress
WHERE id = :job_id AND claim_token = :token AND status = 'running'
RETURNING id;

-- name: step_save
-- Store a step's result (or its pending wait), fenced on the run's claim token.
INSERT INTO django_ultjobs_jobstep
    (job_id, name, status, result, wait_until, attempt, created_at, completed_at)
SELECT j.id, :name, :status, :result_json,
       CASE WHEN :wait_seconds IS NULL THEN NULL ELSE {now_plus(:wait_seconds)} END,
       :attempt, {now}, CASE WHEN :status = 'done' THEN {now} ELSE NULL END
FROM django_ultjobs_job AS j
WHERE j.id = :job_id AND j.claim_token = :token AND j.status = 'running'
ON CONFLICT (job_id, name) DO UPDATE
    SET status = excluded.status, result = excluded.result,
        wait_until = COALESCE(excluded.wait_until, django_ultjobs_jobstep.wait_until),
        attempt = excluded.attempt, completed_at = excluded.completed_at
    WHERE django_ultjobs_jobstep.status <> 'done'
RETURNING id, wait_until;

-- name: db_now
-- The database's clock (durable sleeps and wait timeouts are judged by it).
SELECT {now};

-- name: slot_acquire
-- Take the lowest free slots of :key in [0, :limit), one per holder of the :holders JSON array
-- (in order), in one statement: no row, or a lapsed row taken over in place. SQLite runs one
-- writer at a time, so two acquirers cannot share a slot. The lowest free slots lie below the
-- number of holders plus the slots held, so only those are tried: counting up to the limit
-- grew with the cap, and never ended at 2**31 - 1 (rule 54 (bad-flow-option-refused)).
WITH RECURSIVE bound(n) AS (
    SELECT min(:limit, json_array_length(:holders)
                       + (SELECT count(*) FROM django_ultjobs_slot AS h
                          WHERE h.key = :key AND h.expires_at > {now}))
),
slots(slot) AS (
    SELECT 0 FROM bound WHERE n > 0
    UNION ALL
    SELECT slot + 1 FROM slots, bound WHERE slot + 1 < bound.n
),
free AS (
    SELECT f.slot, row_number() OVER (ORDER BY f.slot) AS rn
    FROM (SELECT s.slot FROM slots AS s
          WHERE NOT EXISTS (
              SELECT 1 FROM django_ultjobs_slot AS h
              WHERE h.key = :key AND h.slot = s.slot AND h.expires_at > {now})
          ORDER BY s.slot
          LIMIT json_array_length(:holders)) AS f
),
want AS (
    SELECT value AS holder, key + 1 AS ord FROM json_each(:holders)
)
INSERT INTO django_ultjobs_slot (key, slot, holder, acquired_at, expires_at)
SELECT :key, free.slot, want.holder, {now}, {now_plus(:ttl)}
FROM free JOIN want ON want.ord = free.rn
WHERE true
ORDER BY free.slot
ON CONFLICT (key, slot) DO UPDATE
    SET holder = excluded.holder, acquired_at = excluded.acquired_at,
        expires_at = excluded.expires_at
    WHERE django_ultjobs_slot.expires_at <= {now}
RETURNING key, slot, holder, expires_at;

-- name: slot_acquire_keys
-- slot_acquire for many keys at once (:wanted is [[key, limit, holder], ...], the runs of one
-- claim of kinds capped per key, rule 50 (per-key-cap)): for each key its lowest free slots, one
-- per holder of that key in order, in one statement. SQLite runs one writer at a time.
WITH RECURSIVE want AS (
    SELECT json_extract(w.value, '$[0]') AS k, json_extract(w.value, '$[1]') AS lim,
           json_extract(w.value, '$[2]') AS holder,
           row_number() OVER (PARTITION BY json_extract(w.value, '$[0]') ORDER BY w.key) AS rn
    FROM json_each(:wanted) AS w
),
slots(k, slot, lim) AS (
    -- Each key's lowest free slots lie below its holders plus its slots held (slot_acquire).
    SELECT k, 0, min(max(lim), count(*) + (SELECT count(*) FROM django_ultjobs_slot AS h
                                          WHERE h.key = want.k AND h.expires_at > {now}))
    FROM want GROUP BY k HAVING max(lim) > 0
    UNION ALL
    SELECT k, slot + 1, lim FROM slots WHERE slot + 1 < lim
),
free AS (
    SELECT s.k, s.slot, row_number() OVER (PARTITION BY s.k ORDER BY s.slot) AS rn
    FROM slots AS s
    WHERE NOT EXISTS (
        SELECT 1 FROM django_ultjobs_slot AS h
        WHERE h.key = s.k AND h.slot = s.slot AND h.expires_at > {now})
)
INSERT INTO django_ultjobs_slot (key, slot, holder, acquired_at, expires_at)
SELECT want.k, free.slot, want.holder, {now}, {now_plus(:ttl)}
FROM free JOIN want ON want.k = free.k AND want.rn = free.rn
WHERE true
ORDER BY want.k, free.slot
ON CONFLICT (key, slot) DO UPDATE
    SET holder = excluded.holder, acquired_at = excluded.acquired_at,
        expires_at = excluded.expires_at
    WHERE django_ultjobs_slot.expires_at <= {now}
RETURNING key, slot, holder, expires_at;

-- name: rate_read
-- The rate-limit buckets a take is about (rule 52 (fleet-rate-limit)), and the database's clock in
-- microseconds; read and then written (rate_write) inside one write transaction, so no other take
-- comes between. SQLite's clock keeps milliseconds.
SELECT CAST(round((julianday({now}) - 2440587.5) * 86400000.0) AS INTEGER) * 1000, b.key, b.tat
FROM (SELECT 1) AS one
LEFT JOIN django_ultjobs_ratelimitbucket AS b
    ON b.key IN (SELECT value FROM json_each(:keys));

-- name: rate_write
-- Write what a take granted (:buckets is [[key, tat, granted, interval, tolerance], ...]).
INSERT INTO django_ultjobs_ratelimitbucket (key, tat, granted, interval, tolerance, updated_at)
SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]'),
       json_extract(value, '$[3]'), json_extract(value, '$[4]'), {now}
FROM json_each(:buckets)
WHERE true
ON CONFLICT (key) DO UPDATE
    SET tat = excluded.tat, granted = excluded.granted, interval = excluded.interval,
        tolerance = excluded.tolerance, updated_at = excluded.updated_at;

-- name: slot_renew
-- Renew held slots, fenced on holder AND expiry (rule 7 (fenced-slot-renewal)): a slot another
-- holder took, or one that lapsed, answers "no" by its absence from the result.
UPDATE django_ultjobs_slot AS l
SET expires_at = {now_plus(:ttl)}
FROM (SELECT json_extract(value, '$[0]') AS key, json_extract(value, '$[1]') AS slot,
             json_extract(value, '$[2]') AS holder
      FROM json_each(:held)) AS r
WHERE l.key = r.key AND l.slot = r.slot AND l.holder = r.holder AND l.expires_at > {now}
RETURNING key, slot, holder;

-- name: slot_release
-- Hand back held slots; a slot somebody else holds now is left alone (fenced on holder).
DELETE FROM django_ultjobs_slot
WHERE EXISTS (
    SELECT 1 FROM json_each(:held) AS r
    WHERE json_extract(r.value, '$[0]') = django_ultjobs_slot.key
      AND json_extract(r.value, '$[1]') = django_ultjobs_slot.slot
      AND json_extract(r.value, '$[2]') = django_ultjobs_slot.holder);

-- name: worker_upsert
-- Register (or re-register) this worker process for operators, every column the row carries: at
-- start, and again whole when a heartbeat found the row gone (pruned or deleted by hand), with the
-- start it had (:started_at, NULL at the first) and its runs and overrunning bodies of now.
-- A new process under an existing id (a fixed --worker-id) writes its own start over the row's.
INSERT INTO django_ultjobs_worker
    (id, hostname, pid, threads, queues, started_at, last_seen_at, in_flight, stopped_at,
     visibility_timeout, heartbeat_interval, jobs, overrunning)
VALUES (:id, :hostname, :pid, :threads, :queues, COALESCE(:started_at, {now}), {now},
        :in_flight, NULL, :visibility_timeout, :heartbeat_interval, :jobs, :overrunning)
ON CONFLICT (id) DO UPDATE
    SET hostname = excluded.hostname, pid = excluded.pid, threads = excluded.threads,
        queues = excluded.queues, started_at = excluded.started_at,
        last_seen_at = excluded.last_seen_at, stopped_at = NULL,
        in_flight = excluded.in_flight, overrunning = excluded.overrunning,
        visibility_timeout = excluded.visibility_timeout,
        heartbeat_interval = excluded.heartbeat_interval, jobs = excluded.jobs
RETURNING started_at;

-- name: worker_jobs
-- Record the job names this worker knows now: it resolved more since it registered.
UPDATE django_ultjobs_worker SET jobs = :jobs WHERE id = :id;

-- name: worker_touch
-- Keep this worker's row fresh (once per heartbeat); no row back: the row is gone, and the
-- worker writes it again whole (worker_upsert).
UPDATE django_ultjobs_worker
SET last_seen_at = {now}, in_flight = :in_flight, stopped_at = NULL
WHERE id = :id
RETURNING id;

-- name: worker_stop
-- Mark this worker as stopped on a clean exit.
-- A stopped worker runs nothing: its overrunning bodies (rule 56 (overrun-reported)) ended with its
-- process.
UPDATE django_ultjobs_worker SET stopped_at = {now}, in_flight = 0, overrunning = NULL
WHERE id = :id;

-- name: cancel_reasons
-- The reasons of the cancel requests a heartbeat just found (rule 59 (cancel-reason-kept)). Read
-- only then, so every other heartbeat returns no more than it did.
SELECT id, cancel_reason FROM django_ultjobs_job WHERE id IN (SELECT value FROM json_each(:ids));

-- name: worker_overrunning
-- Record the runs of this worker still executing past their timeout (rule 56 (overrun-reported)),
-- for the admin. Written only when that list changes, not on every heartbeat.
UPDATE django_ultjobs_worker SET overrunning = :overrunning WHERE id = :id;

-- name: worker_runners
-- Record which child process runs each run of this worker (runjobworker --pool process), for
-- the admin's in-flight page. Written only when that changes, with the heartbeat.
UPDATE django_ultjobs_worker SET runners = :runners WHERE id = :id;

-- name: schedule_sync
-- Register the periodic jobs this worker knows (what they run on, for the admin) and read each
-- one's cursor (the newest tick enqueued) and pause, with the database's clock. A schedule seen
-- for the first time begins now: no tick from before it existed is caught up
-- (rule 62 (catch-up-policy)).
INSERT INTO django_ultjobs_jobschedule
    (name, schedule, timezone, catch_up, paused, last_tick, created_at, updated_at)
SELECT json_extract(value, '$.name'), json_extract(value, '$.schedule'),
       json_extract(value, '$.timezone'), json_extract(value, '$.catch_up'), 0, {now}, {now},
       {now}
FROM json_each(:schedules)
WHERE true
ON CONFLICT (name) DO UPDATE
    SET schedule = excluded.schedule, timezone = excluded.timezone,
        catch_up = excluded.catch_up, updated_at = excluded.updated_at
RETURNING name, last_tick, paused, {now};

-- name: schedule_due
-- The first of a tick's three statements (rules 60 (tick-once) to 62 (catch-up-policy),
-- 102 (database-clock-ticks)), inside one write transaction with the other two, which take the
-- clock this one read: of the candidate ticks a worker offers around its estimate of this clock,
-- decide on the database's clock which are due (at or before it, after the cursor), which the
-- catch-up policy keeps (the newest :keep, none more than :late seconds late) and where the cursor
-- moves (the newest due tick, kept or skipped as late), so a worker whose clock is off changes only
-- when it asks. :ticks is [[scheduled_for, at], ...]: the tick in Django's text form and in the
-- clock's millisecond form, which is what is compared (the cursor is read back in that form too).
-- An offer whose :horizon is before the clock, or cut short of the cursor (:floor after it) with
-- fewer than :keep due, decides nothing. One row: the clock, the cursor, paused, the new cursor
-- (NULL: nothing to do) and the kept ticks as :ticks pairs.
WITH clock AS (
    SELECT {now} AS now
),
prev AS (
    SELECT last_tick, paused, strftime('%Y-%m-%d %H:%M:%f', last_tick) AS at
    FROM django_ultjobs_jobschedule
    WHERE name = :name
),
due AS (
    SELECT json_extract(c.value, '$[0]') AS tick, json_extract(c.value, '$[1]') AS at
    FROM json_each(:ticks) AS c, prev, clock
    WHERE NOT prev.paused AND json_extract(c.value, '$[1]') <= clock.now
      AND (prev.at IS NULL OR json_extract(c.value, '$[1]') > prev.at)
),
covered AS (
    SELECT 1 AS yes
    FROM prev, clock
    WHERE :horizon >= clock.now
      AND (COALESCE(prev.at, '') >= COALESCE(:floor, '') OR (SELECT count(*) FROM due) >= :keep)
),
kept AS (
    SELECT newest.tick, newest.at
    FROM (SELECT tick, at FROM due ORDER BY at DESC LIMIT :keep) AS newest, clock
    WHERE :late IS NULL OR newest.at >= strftime('%Y-%m-%d %H:%M:%f', clock.now,
                                                 printf('%+.6f seconds', -:late))
)
SELECT clock.now, prev.last_tick, prev.paused,
       CASE WHEN EXISTS (SELECT 1 FROM covered)
            THEN (SELECT tick FROM due ORDER BY at DESC LIMIT 1) END,
       (SELECT json_group_array(json_array(tick, at)) FROM kept)
FROM clock
LEFT JOIN prev ON true;

-- name: schedule_advance
-- The second: move the schedule's cursor to the tick the first decided. The first read the
-- row inside this write transaction, so nobody has moved it since.
UPDATE django_ultjobs_jobschedule
SET last_tick = :newest, updated_at = {now}
WHERE name = :name AND NOT paused;

-- name: schedule_insert
-- The third: one job per tick the first kept, visible at its tick (rule 61 (tick-on-time)), which
-- has come; a tick already in the table is skipped by the unique index on (name, scheduled_for),
-- never an error. :ticks is the first's [[scheduled_for, visible_at], ...]: the tick in Django's
-- text form (what an ORM lookup compares), and in the clock's millisecond form (what the claim
-- compares).
INSERT INTO django_ultjobs_job
    (name, queue, priority, args, kwargs, status, attempt, max_attempts, visible_at,
     claim_token, worker_id, cancel_requested, traceparent, tracestate, enqueued_by,
     last_error, wait_event, wait_after, created_at, updated_at, scheduled_for)
SELECT :name, :queue, :priority, '[]', '{}', 'queued', 0, :max_attempts,
       json_extract(value, '$[1]'), NULL, '', 0, '', '', :enqueued_by, '', '', 0, {now}, {now},
       json_extract(value, '$[0]')
FROM json_each(:ticks)
WHERE true
ORDER BY key
ON CONFLICT (name, scheduled_for) WHERE scheduled_for IS NOT NULL DO NOTHING
RETURNING id, scheduled_for;

-- name: gauge_queues
-- Per queue, its runnable jobs (those a claim may take now) and how many seconds the oldest of
-- them has been due, for the queue gauges, run by one worker of the fleet at a time, once a
-- GAUGE_INTERVAL (rule 71 (gauges-one-reader)). Per live status a range of the live index
-- stopped at :limit, and its first entry (rule 120 (bounded-live-stats)): the work is bounded
-- whatever the backlog, and a queue's depth is at most three times :limit. Each range states
-- the live index's "j.name > ''" (see live_stats).
{fragment:live_queues}
SELECT t.queue, sum(t.due), (julianday({now}) - julianday(min(t.oldest))) * 86400.0
FROM (SELECT q.queue,
             (SELECT count(*) FROM (SELECT 1 FROM django_ultjobs_job AS j
                  WHERE j.queue = q.queue AND j.status = s.status
                    AND j.status IN ('queued', 'running', 'waiting') AND j.name > ''
                    AND j.visible_at <= {now}
                  LIMIT :limit) AS d) AS due,
             (SELECT j.visible_at FROM django_ultjobs_job AS j
                  WHERE j.queue = q.queue AND j.status = s.status
                    AND j.status IN ('queued', 'running', 'waiting') AND j.name > ''
                    AND j.visible_at <= {now}
                  ORDER BY j.visible_at LIMIT 1) AS oldest
      FROM queues AS q
      CROSS JOIN (SELECT 'queued' AS status UNION ALL SELECT 'running'
                  UNION ALL SELECT 'waiting') AS s) AS t
GROUP BY t.queue
HAVING sum(t.due) > 0;

-- name: gauge_slots
-- The fleet slots held (unexpired) per key, for the slots gauge.
SELECT key, count(*) FROM django_ultjobs_slot WHERE expires_at > {now} GROUP BY key;

-- name: retries_due
-- The test helpers' run_jobs(retries=True), never a worker: every job of these queues queued
-- again for a retry (it ran before) whose backoff has not passed becomes runnable now, on the
-- clock the claim reads (rule 74 (run-jobs-real-path)). A delayed job that never ran keeps its
-- time.
UPDATE django_ultjobs_job
SET visible_at = {now}, updated_at = {now}
WHERE status = 'queued' AND attempt > 0 AND visible_at > {now}
  AND queue IN (SELECT value FROM json_each(:queues));

-- fragment: live_queues
-- Every queue with a live job, one probe of the live index each however many jobs it holds (a
-- skip scan: the next queue name after the last), every queue with a pending job (the same skip
-- scan of the pending index), and every paused queue.
WITH RECURSIVE found(queue) AS (
    SELECT (SELECT queue FROM django_ultjobs_job
            WHERE status IN ('queued', 'running', 'waiting') ORDER BY queue LIMIT 1)
    UNION ALL
    SELECT (SELECT j.queue FROM django_ultjobs_job AS j
            WHERE j.status IN ('queued', 'running', 'waiting') AND j.queue > found.queue
            ORDER BY j.queue LIMIT 1)
    FROM found WHERE found.queue IS NOT NULL
), found_pending(queue) AS (
    SELECT (SELECT queue FROM django_ultjobs_job
            WHERE status = 'pending' ORDER BY queue LIMIT 1)
    UNION ALL
    SELECT (SELECT j.queue FROM django_ultjobs_job AS j
            WHERE j.status = 'pending' AND j.queue > p.queue ORDER BY j.queue LIMIT 1)
    FROM found_pending AS p WHERE p.queue IS NOT NULL
), queues(queue) AS (
    SELECT queue FROM found WHERE queue IS NOT NULL
    UNION SELECT queue FROM found_pending WHERE queue IS NOT NULL
    UNION SELECT queue FROM django_ultjobs_queuepause
)

-- name: live_stats
-- PostgreSQL's live_stats (rule 120 (bounded-live-stats)); :blocked is a JSON array of job
-- names.
{fragment:live_queues}
SELECT q.queue, s.status,
       (SELECT count(*) FROM (SELECT 1 FROM django_ultjobs_job AS j
            WHERE j.queue = q.queue AND j.status = s.status
              AND j.status IN ('queued', 'running', 'waiting') AND j.name > ''
              AND j.visible_at <= {now}
              AND j.name NOT IN (SELECT value FROM json_each(:blocked))
            LIMIT :limit) AS d),
       (SELECT count(*) FROM (SELECT 1 FROM django_ultjobs_job AS j
            WHERE json_array_length(:blocked) > 0
              AND j.queue = q.queue AND j.status = s.status
              AND j.status IN ('queued', 'running', 'waiting') AND j.name > ''
              AND j.visible_at <= {now}
              AND j.name IN (SELECT value FROM json_each(:blocked))
            LIMIT :limit) AS h),
       (SELECT count(*) FROM (SELECT 1 FROM django_ultjobs_job AS j
            WHERE j.queue = q.queue AND j.status = s.status
              AND j.status IN ('queued', 'running', 'waiting') AND j.name > ''
              AND j.visible_at > {now}
            LIMIT :limit) AS c),
       (SELECT j.visible_at FROM django_ultjobs_job AS j
            WHERE j.queue = q.queue AND j.status = s.status
              AND j.status IN ('queued', 'running', 'waiting') AND j.name > ''
              AND j.visible_at <= {now}
            ORDER BY j.visible_at LIMIT 1),
       EXISTS (SELECT 1 FROM django_ultjobs_queuepause AS p WHERE p.queue = q.queue),
       {now},
       (SELECT count(*) FROM (SELECT 1 FROM django_ultjobs_job AS j
            WHERE s.status = 'queued' AND j.queue = q.queue AND j.status = 'pending'
            LIMIT :limit) AS w)
FROM queues AS q
CROSS JOIN (SELECT 'queued' AS status UNION ALL SELECT 'running' UNION ALL SELECT 'waiting') AS s
ORDER BY q.queue, s.status;

-- name: failed_recent
-- Per queue with a failed job, how many failed in the last :seconds, for ``ultjobs stats``: a
-- skip scan of the failed index for the queues, then one range of it per queue stopped at :limit
-- (rule 120 (bounded-live-stats)), so the work does not grow with the history nor the failures.
WITH RECURSIVE found(queue) AS (
    SELECT (SELECT queue FROM django_ultjobs_job
            WHERE status = 'failed' ORDER BY queue LIMIT 1)
    UNION ALL
    SELECT (SELECT j.queue FROM django_ultjobs_job AS j
            WHERE j.status = 'failed' AND j.queue > found.queue ORDER BY j.queue LIMIT 1)
    FROM found WHERE found.queue IS NOT NULL
)
SELECT f.queue,
       (SELECT count(*) FROM (SELECT 1 FROM django_ultjobs_job AS j
            WHERE j.queue = f.queue AND j.status = 'failed' AND j.finished_at >= {now_plus(-:seconds)}
            LIMIT :limit) AS c)
FROM found AS f
WHERE f.queue IS NOT NULL;

-- name: live_first
-- The live job of :queue and :status due longest ago, and the clock, for the admin summary's
-- oldest runnable job: the first entry of that range of the live index
-- (rule 120 (bounded-live-stats)). Its predicate is written out as constants: SQLite uses a
-- partial index only for a query whose own terms state its predicate.
SELECT j.id, j.name, j.visible_at, {now}
FROM django_ultjobs_job AS j
WHERE j.queue = :queue AND j.status = :status
  AND j.status IN ('queued', 'running', 'waiting') AND j.name > ''
  AND j.visible_at <= {now}
ORDER BY j.visible_at
LIMIT 1;

-- name: finished_counts
-- The finished jobs per status, for the admin summary where the planner cannot estimate them (on
-- SQLite): per job name (a skip scan of the name and status index, one probe per name) one range
-- of that index per status stopped at :limit, so a rare status among millions of rows costs a
-- probe per name, not a read of every row (rule 120 (bounded-live-stats)). Answers per status
-- the sum of those counts and the largest: one that reached :limit makes the sum a lower bound.
WITH RECURSIVE names(name) AS (
    SELECT (SELECT min(name) FROM django_ultjobs_job)
    UNION ALL
    SELECT (SELECT min(j.name) FROM django_ultjobs_job AS j WHERE j.name > n.name)
    FROM names AS n WHERE n.name IS NOT NULL
)
SELECT t.status, sum(t.n), max(t.n)
FROM (SELECT s.status,
             (SELECT count(*) FROM (SELECT 1 FROM django_ultjobs_job AS j
                  WHERE j.name = n.name AND j.status = s.status LIMIT :limit) AS c) AS n
      FROM names AS n
      CROSS JOIN (SELECT 'succeeded' AS status UNION ALL SELECT 'failed'
                  UNION ALL SELECT 'cancelled') AS s
      WHERE n.name IS NOT NULL) AS t
GROUP BY t.status;

-- name: live_blocking
-- PostgreSQL's live_blocking: slots held per key, and spent rate-limit buckets (held -1).
SELECT key, count(*) FROM django_ultjobs_slot WHERE expires_at > {now} GROUP BY key
UNION ALL
SELECT key, -1 FROM django_ultjobs_ratelimitbucket
WHERE tat - tolerance > CAST(round((julianday({now}) - 2440587.5) * 86400000.0) AS INTEGER) * 1000;

-- name: live_names
-- The names of the queued and waiting jobs, one probe of the per-kind claim index each however
-- many jobs a name has (a skip scan; its order, priority included, is that index's alone, so no
-- index over the finished rows is walked instead), for the admin's unknown-jobs line.
WITH RECURSIVE found(name) AS (
    SELECT (SELECT name FROM django_ultjobs_job
            WHERE status IN ('queued', 'running', 'waiting') AND status <> 'running'
            ORDER BY name, priority DESC LIMIT 1)
    UNION ALL
    SELECT (SELECT j.name FROM django_ultjobs_job AS j
            WHERE j.status IN ('queued', 'running', 'waiting') AND j.status <> 'running'
              AND j.name > found.name
            ORDER BY j.name, j.priority DESC LIMIT 1)
    FROM found WHERE found.name IS NOT NULL
)
SELECT name FROM found WHERE name IS NOT NULL;

-- name: prune_batch_ids
-- PostgreSQL's prune_batch in four statements of one write transaction (SQLite has no DELETE in
-- a WITH): the batch's ids, whether each row holds its attempt, and each finish.
SELECT id, attempt_on_row, finished_at FROM django_ultjobs_job
WHERE status IN ('succeeded', 'failed', 'cancelled') AND finished_at < :cutoff
  AND finished_at >= COALESCE(:after, '')
ORDER BY finished_at LIMIT :limit;

-- name: prune_batch_attempts
DELETE FROM django_ultjobs_jobattempt WHERE job_id IN (SELECT value FROM json_each(:ids));

-- name: prune_batch_steps
DELETE FROM django_ultjobs_jobstep WHERE job_id IN (SELECT value FROM json_each(:ids));

-- name: prune_batch_jobs
DELETE FROM django_ultjobs_job WHERE id IN (SELECT value FROM json_each(:ids));

-- name: live_oldest
-- Per queue with a live job and per live status, when its longest-due job became due: the first
-- entry of one range of the live index each, for the admin's queue-age chart
-- (rule 120 (bounded-live-stats)).
{fragment:live_queues}
SELECT q.queue,
       (SELECT j.visible_at FROM django_ultjobs_job AS j
            WHERE j.queue = q.queue AND j.status = s.status
              AND j.status IN ('queued', 'running', 'waiting') AND j.name > ''
              AND j.visible_at <= {now}
            ORDER BY j.visible_at LIMIT 1)
FROM queues AS q
CROSS JOIN (SELECT 'queued' AS status UNION ALL SELECT 'running' UNION ALL SELECT 'waiting') AS s;

-- name: live_oldest_named
-- live_oldest for the jobs of one :name (a job name's page): the first entry of that name in
-- each range of the live index, read in due order (the name is the index's last key column, so
-- no table row is read). A range stops at the name's first entry, and is read to its end only
-- where the name has no due job, where a MIN over the name's due jobs read every one of them.
{fragment:live_queues}
SELECT q.queue,
       (SELECT j.visible_at FROM django_ultjobs_job AS j
            WHERE j.queue = q.queue AND j.status = s.status
              AND j.status IN ('queued', 'running', 'waiting') AND j.name > ''
              AND j.visible_at <= {now} AND j.name = :name
            ORDER BY j.visible_at LIMIT 1)
FROM queues AS q
CROSS JOIN (SELECT 'queued' AS status UNION ALL SELECT 'running' UNION ALL SELECT 'waiting') AS s
WHERE EXISTS (SELECT 1 FROM django_ultjobs_job AS k
              WHERE k.name = :name AND k.status IN ('queued', 'running', 'waiting'));

-- name: nodes_last_id
-- The largest id the jobs table has ever given (AUTOINCREMENT keeps it in sqlite_sequence; the
-- largest row's, had it none), and the clock: a workflow's jobs take the next ids, chosen by
-- a transaction that holds the write lock (store/sqlite_nodes.py).
SELECT MAX(COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'django_ultjobs_job'), 0),
           COALESCE((SELECT MAX(id) FROM django_ultjobs_job), 0)),
       {now};

-- name: nodes_insert
-- Jobs of a workflow, each inserted as the enqueue statement inserts it, with the id
-- nodes_last_id made room for and the columns nodes_link would then write already set, so
-- each row and its index entries are written once (rule 152 (graph-insert-same-rows);
-- rule 110 (released-in-settle): a job that waits is pending from its insert). The store
-- writes the VALUES row once per job, a few hundred per statement (store/sqlite_nodes.py).
-- Positional, per row in this order: id, name, queue, priority, args, kwargs, status,
-- max_attempts, run_at, clock, delay, traceparent, tracestate, enqueued_by, clock, clock,
-- concurrency_key, timeout, expires_in, clock, expires_in, tags, total, condition,
-- has_dependents, workflow_id, batch_id, callback_of, depends_on, dependents, wait_key. The
-- clock is nodes_last_id's reading, one for every row as one statement has one; the times are
-- computed from it as the enqueue statement computes them from its own.
INSERT INTO django_ultjobs_job
    (id, name, queue, priority, args, kwargs, status, attempt, max_attempts, visible_at,
     claim_token, worker_id, cancel_requested, traceparent, tracestate, enqueued_by,
     last_error, wait_event, wait_after, created_at, updated_at, concurrency_key, timeout,
     expires_at, tags, deps_total, depends_when, has_dependents, workflow_id, batch_id,
     callback_of_id, depends_on, dependents, wait_key)
VALUES (?, ?, ?, ?, ?, ?, ?, 0, ?,
        COALESCE(strftime('%Y-%m-%d %H:%M:%f', ?),
                 strftime('%Y-%m-%d %H:%M:%f', ?, printf('%+.6f seconds', ?))),
        NULL, '', 0, ?, ?, ?, '', '', 0, ?, ?, ?, ?,
        CASE WHEN ? IS NOT NULL THEN strftime('%Y-%m-%d %H:%M:%f', ?, printf('%+.6f seconds', ?))
        END,
        ?, ?, ?, ?, ?, ?, ?, ?, ?, ?);

-- name: nodes_link
-- Make just-enqueued jobs (same transaction) workflow nodes, batch members or batch callbacks
-- (docs/workflows.md): :rows is JSON [[id, pending, total, when, has_dependents, workflow,
-- batch, callback_of, depends_on, dependents], ...]; 'pending' for those that wait (rule 110 (released-in-settle)).
-- Driven by the rows given, each job found by its primary key.
UPDATE django_ultjobs_job AS j
SET status = CASE WHEN n.pending THEN 'pending' ELSE j.status END,
    deps_total = n.total, depends_when = n.condition, has_dependents = n.has_dependents,
    workflow_id = n.workflow_id, batch_id = n.batch_id, callback_of_id = n.callback_of,
    depends_on = n.depends_on, dependents = n.dependents,
    wait_key = COALESCE('b' || COALESCE(n.batch_id, n.callback_of), 'w' || n.workflow_id)
FROM (SELECT json_extract(value, '$[0]') AS id, json_extract(value, '$[1]') AS pending,
             json_extract(value, '$[2]') AS total, json_extract(value, '$[3]') AS condition,
             json_extract(value, '$[4]') AS has_dependents,
             json_extract(value, '$[5]') AS workflow_id, json_extract(value, '$[6]') AS batch_id,
             json_extract(value, '$[7]') AS callback_of, json_extract(value, '$[8]') AS depends_on,
             json_extract(value, '$[9]') AS dependents
      FROM json_each(:rows)) AS n
WHERE j.id = n.id;
