-- Named queries for PostgreSQL (psycopg 3 parameter style). Same names as sqlite.sql.
-- Every expiry is compared on the database clock ({now}), never a worker's wall clock, so hosts
-- whose clocks disagree cannot steal each other's leases.

-- fragment: job_columns
-- The columns an enqueue writes, in the order of the values enqueue and enqueue_one give them.
(name, queue, priority, args, kwargs, status, attempt, max_attempts, visible_at,
 claim_token, worker_id, cancel_requested, traceparent, tracestate, enqueued_by,
 last_error, wait_event, wait_after, created_at, updated_at, concurrency_key, timeout,
 expires_at, tags)

-- fragment: runnable
-- A row a claim may take: queued and due, running with its lease lapsed (a re-delivery), or
-- waiting and woken. Follows a WHERE or an AND.
status IN ('queued', 'running', 'waiting')
          AND visible_at <= {now}

-- fragment: active_queues
-- The worker's queues that are not paused (rule 75 (paused-queue)), as a row source "q(queue)": one
-- primary-key probe of the pause table per queue, inside the claim statement itself, so a pause
-- needs no second statement per round and holds from each worker's next claim.
(SELECT w.queue FROM unnest(%(queues)s::text[]) AS w(queue)
 WHERE NOT EXISTS (SELECT 1 FROM django_ultjobs_queuepause AS p WHERE p.queue = w.queue)) AS q

-- fragment: claim_update
-- The write of claim and claim_capped: the rows of their "chosen" CTE become this claim's
-- (status, token, worker, lease), and come back with what the row was before (its due time too,
-- for the ultjobs.job.wait metric). A waiting row
-- that woke keeps its attempt; any other claim starts a new one (rule 1 (leased-claim)). The capped
-- claims add a last column, the slot key.
UPDATE django_ultjobs_job AS j
SET status = 'running',
    attempt = j.attempt + CASE WHEN chosen.prev_status = 'waiting' THEN 0 ELSE 1 END,
    claim_token = %(token)s::uuid,
    worker_id = %(worker_id)s::text,
    claimed_at = {now},
    visible_at = {now_plus(%(timeout)s::float8)},
    updated_at = {now}
FROM chosen
WHERE j.id = chosen.id
RETURNING j.id, j.name, j.queue, j.priority, j.args, j.kwargs, j.attempt, j.max_attempts,
          j.traceparent, j.tracestate, j.enqueued_by, j.cancel_requested, j.claimed_at,
          j.timeout, j.expires_at, j.cancel_reason,
          chosen.prev_status, chosen.prev_worker,
          CASE WHEN chosen.prev_status = 'running' THEN chosen.prev_claimed_at END,
          chosen.visible_at


-- fragment: rate_granted
-- The starts an existing bucket grants in rate_take's update: none while its tat is more than
-- the tolerance ahead of now (EXCLUDED.tat less the starts it proposed), else one more per
-- whole interval of tolerance left, at most the take's want (EXCLUDED.granted).
LEAST(EXCLUDED.granted, CASE
    WHEN b.tat - (EXCLUDED.tat - EXCLUDED.granted * EXCLUDED.interval) > EXCLUDED.tolerance
        THEN 0
    ELSE (EXCLUDED.tolerance - GREATEST(0,
              b.tat - (EXCLUDED.tat - EXCLUDED.granted * EXCLUDED.interval)))
         / EXCLUDED.interval + 1 END)

-- name: enqueue
-- Insert many jobs in one statement from a JSON array (one element for a single enqueue), and
-- wake idle workers of their queues: pg_notify inside the enqueuing transaction is delivered
-- when it commits, never before (and never if it rolls back). The rows are inserted in array
-- order, so ids ascend in the caller's order.
WITH ins AS (
    INSERT INTO django_ultjobs_job {fragment:job_columns}
    SELECT j.name, j.queue, j.priority, j.args, j.kwargs, 'queued', 0, j.max_attempts,
           COALESCE(j.run_at, {now_plus(j.delay)}),
           NULL, '', false, j.traceparent, j.tracestate, j.enqueued_by, '', '', 0, {now}, {now},
           j.concurrency_key, j.timeout,
           CASE WHEN j.expires_in IS NOT NULL THEN {now_plus(j.expires_in)} END,
           COALESCE(j.tags, '[]'::jsonb)
    FROM ROWS FROM (
            jsonb_to_recordset(%(jobs)s::jsonb)
            AS (name text, queue text, priority int, args jsonb, kwargs jsonb,
                max_attempts int, delay float8, run_at timestamptz, traceparent text,
                tracestate text, enqueued_by text, concurrency_key text, timeout float8,
                expires_in float8, tags jsonb)
        ) WITH ORDINALITY
        AS j(name, queue, priority, args, kwargs, max_attempts, delay, run_at, traceparent,
             tracestate, enqueued_by, concurrency_key, timeout, expires_in, tags, ord)
    ORDER BY j.ord
    RETURNING id, visible_at, created_at, queue, expires_at
),
notified AS (
    SELECT count(pg_notify('django_ultjobs', q.queue)) AS n
    FROM (SELECT DISTINCT queue FROM ins WHERE visible_at <= {now}) AS q
)
SELECT ins.id, ins.visible_at, ins.created_at, ins.expires_at
FROM ins CROSS JOIN notified ORDER BY ins.id;

-- name: enqueue_copy_ids
-- The first of a bulk enqueue's two statements by COPY: the
-- database's clock ({now}, the transaction's start: the instant every statement of this
-- transaction reads, so the rows get the times the INSERT of "enqueue" would give them), "count"
-- ids from the table's own sequence (COPY returns none), and the notify of each queue that gets
-- a job runnable now: its soonest delay (of the jobs without run_at) or its soonest run_at is
-- due. Delivered on commit only; the COPY failing rolls it back with the transaction.
-- The sequence is looked up once, in its own subquery (an InitPlan): named by an expression
-- nextval would resolve it on every call, several times the cost of the ids themselves.
SELECT {now},
       ARRAY(SELECT nextval((SELECT pg_get_serial_sequence('django_ultjobs_job', 'id')::regclass))
             FROM generate_series(1, %(count)s::int)),
       (SELECT count(pg_notify('django_ultjobs', d.queue))
        FROM unnest(%(queues)s::text[], %(delays)s::float8[], %(run_ats)s::timestamptz[])
             AS d(queue, delay, run_at)
        WHERE {now_plus(d.delay)} <= {now} OR d.run_at <= {now});

-- name: enqueue_copy
-- The second: the rows themselves (text format), every column "enqueue" writes and the id, in
-- the order store/copy_rows.py writes them; the others take their defaults, as in "enqueue".
COPY django_ultjobs_job
    (id, name, queue, priority, args, kwargs, status, attempt, max_attempts, visible_at,
     claim_token, worker_id, cancel_requested, traceparent, tracestate, enqueued_by,
     last_error, wait_event, wait_after, created_at, updated_at, concurrency_key, timeout,
     expires_at, tags)
FROM STDIN;

-- name: enqueue_copy_plain
-- The second statement for a batch whose every job has no timeout, no expiry, no slot key and
-- no tags (copy_rows.plain), in binary (store/copy_binary.py): those columns, and claim_token,
-- left to their defaults (NULL, NULL, '', '[]', NULL), which are the values "enqueue" writes
-- for such jobs; fewer values for the server to read per row, and none to parse.
COPY django_ultjobs_job
    (id, name, queue, priority, args, kwargs, status, attempt, max_attempts, visible_at,
     worker_id, cancel_requested, traceparent, tracestate, enqueued_by,
     last_error, wait_event, wait_after, created_at, updated_at)
FROM STDIN (FORMAT binary);

-- name: enqueue_one
-- One job, one plain INSERT: enqueue() is usually one call inside a view's transaction, and the
-- JSON-array form bulk enqueue needs costs it more than the rest of the call. Idle workers of its
-- queue are notified on commit when it is runnable now.
WITH ins AS (
    INSERT INTO django_ultjobs_job {fragment:job_columns}
    VALUES (%(name)s::text, %(queue)s::text, %(priority)s::int, %(args)s::jsonb,
            %(kwargs)s::jsonb, 'queued', 0, %(max_attempts)s::int,
            COALESCE(%(run_at)s::timestamptz, {now_plus(%(delay)s::float8)}),
            NULL, '', false, %(traceparent)s::text, %(tracestate)s::text,
            %(enqueued_by)s::text, '', '', 0, {now}, {now}, %(concurrency_key)s::text,
            %(timeout)s::float8,
            CASE WHEN %(expires_in)s::float8 IS NOT NULL
                 THEN {now_plus(%(expires_in)s::float8)} END, %(tags)s::jsonb)
    RETURNING id, visible_at, created_at, queue, expires_at
)
SELECT ins.id, ins.visible_at, ins.created_at, ins.expires_at,
       CASE WHEN ins.visible_at <= {now} THEN pg_notify('django_ultjobs', ins.queue)::text END
FROM ins;

-- name: enqueue_unique
-- Insert jobs that hold unique keys (and any others of the same batch) in ONE statement, each
-- keyed job only if no other row holds its (name, unique_key): rules 65 (one-key-holder) to
-- 67 (unique-for-window). First the rows whose keys these jobs ask for and that have expired
-- (finished, succeeded, failed or cancelled, at least their own unique_for seconds ago on the
-- database's clock) give their keys up; then the insert, which the partial unique index
-- ultjobs_job_unique_key lets through only where no row holds the key. Of a key held by a row
-- another transaction inserted and has not committed, the insert waits for that transaction:
-- inserted if it rolled back, skipped if it committed. "released" runs before the insert: the
-- insert reads its count. A skipped job returns no row; the caller looks the holder up in a new
-- statement (this statement's snapshot does not see a holder committed while it waited). Rows are
-- inserted in array order.
WITH j AS (
    SELECT * FROM ROWS FROM (
            jsonb_to_recordset(%(jobs)s::jsonb)
            AS (name text, queue text, priority int, args jsonb, kwargs jsonb,
                max_attempts int, delay float8, run_at timestamptz, traceparent text,
                tracestate text, enqueued_by text, concurrency_key text, timeout float8,
                expires_in float8, unique_key text, unique_for float8, tags jsonb)
        ) WITH ORDINALITY
        AS j(name, queue, priority, args, kwargs, max_attempts, delay, run_at, traceparent,
             tracestate, enqueued_by, concurrency_key, timeout, expires_in, unique_key,
             unique_for, tags, ord)
),
{fragment:unique_insert}

-- name: enqueue_unique_one
-- enqueue_unique for one job, its values as parameters instead of a JSON array: the array form
-- cost a keyed enqueue() more than the rest of it (as it did the plain one).
WITH j AS (
    SELECT %(name)s::text AS name, %(queue)s::text AS queue, %(priority)s::int AS priority,
           %(args)s::jsonb AS args, %(kwargs)s::jsonb AS kwargs,
           %(max_attempts)s::int AS max_attempts, %(delay)s::float8 AS delay,
           %(run_at)s::timestamptz AS run_at, %(traceparent)s::text AS traceparent,
           %(tracestate)s::text AS tracestate, %(enqueued_by)s::text AS enqueued_by,
           %(concurrency_key)s::text AS concurrency_key, %(timeout)s::float8 AS timeout,
           %(expires_in)s::float8 AS expires_in, %(unique_key)s::text AS unique_key, %(unique_for)s::float8 AS unique_for,
           %(tags)s::jsonb AS tags, 1 AS ord
),
{fragment:unique_insert}

-- fragment: unique_insert
-- The release of expired holders, the insert, and the notify of enqueue_unique and
-- enqueue_unique_one, after their "j" (the jobs, with "ord" their order).
released AS (
    UPDATE django_ultjobs_job AS h
    SET unique_key = NULL, released_key = h.unique_key
    FROM (SELECT DISTINCT name, unique_key FROM j WHERE unique_key IS NOT NULL) AS k
    -- Each key's holder by the unique index, one probe per key: a plain join on the keys let
    -- the planner hash every row of the table (a seq scan) or every finished one instead. The
    -- LIMIT keeps the planner from flattening the lateral probe into such a join (there is at
    -- most one holder anyway).
    CROSS JOIN LATERAL (
        SELECT x.id FROM django_ultjobs_job AS x
        WHERE x.name = k.name AND x.unique_key = k.unique_key
        LIMIT 1
    ) AS held
    WHERE h.id = held.id
      -- Checked on the row itself, so a concurrent enqueue that took the key first (this
      -- update waited for its lock) leaves it alone: the recheck sees unique_key NULL.
      AND h.unique_key IS NOT NULL
      AND h.status IN ('succeeded', 'failed', 'cancelled')
      AND (h.finished_at IS NULL OR h.finished_at <= {now_plus(-h.unique_for)})
    RETURNING h.id
),
ins AS (
    INSERT INTO django_ultjobs_job
        (name, queue, priority, args, kwargs, status, attempt, max_attempts, visible_at,
         claim_token, worker_id, cancel_requested, traceparent, tracestate, enqueued_by,
         last_error, wait_event, wait_after, created_at, updated_at, concurrency_key,
         timeout, expires_at, unique_key, unique_for, tags)
    SELECT j.name, j.queue, j.priority, j.args, j.kwargs, 'queued', 0, j.max_attempts,
           COALESCE(j.run_at, {now_plus(j.delay)}),
           NULL, '', false, j.traceparent, j.tracestate, j.enqueued_by, '', '', 0, {now}, {now},
           COALESCE(j.concurrency_key, ''), j.timeout,
           CASE WHEN j.expires_in IS NOT NULL THEN {now_plus(j.expires_in)} END,
           j.unique_key, COALESCE(j.unique_for, 0), COALESCE(j.tags, '[]'::jsonb)
    FROM j
    WHERE (SELECT count(*) FROM released) >= 0
    ORDER BY j.ord
    ON CONFLICT (name, unique_key) WHERE unique_key IS NOT NULL DO NOTHING
    RETURNING id, visible_at, created_at, queue, name, unique_key, expires_at
),
notified AS (
    SELECT count(pg_notify('django_ultjobs', q.queue)) AS n
    FROM (SELECT DISTINCT queue FROM ins WHERE visible_at <= {now}) AS q
)
SELECT ins.id, ins.visible_at, ins.created_at, ins.name, ins.unique_key, ins.expires_at
FROM ins CROSS JOIN notified ORDER BY ins.id

-- name: unique_release
-- Take the keys of %(keys)s ([[name, key], ...]) from the rows holding them that have expired:
-- finished (succeeded, failed or cancelled) at least their own unique_for seconds ago on the
-- database's clock (rule 67 (unique-for-window)), each keeping its key as its released_key. A retry
-- of a job whose key was taken over runs this before it takes its key back
-- (rule 107 (retry-takes-key-back)).
UPDATE django_ultjobs_job AS h
SET unique_key = NULL, released_key = h.unique_key
FROM (SELECT k->>0 AS name, k->>1 AS unique_key
      FROM jsonb_array_elements(%(keys)s::jsonb) AS k) AS k
WHERE h.name = k.name AND h.unique_key = k.unique_key
  AND h.status IN ('succeeded', 'failed', 'cancelled')
  AND (h.finished_at IS NULL OR h.finished_at <= {now_plus(-h.unique_for)})
RETURNING h.id;

-- name: unique_holder
-- The row holding unique key (name, key), every column (read as a Job by the ORM's raw(),
-- which maps columns by name): what enqueue() returns when the key is held
-- (rule 66 (held-key-returns-holder)). By the unique index; the ORM's own query cost more to build
-- than to run.
SELECT * FROM django_ultjobs_job WHERE name = %(name)s::text AND unique_key = %(key)s::text LIMIT 1;

-- name: claim
-- Claim up to "limit" runnable jobs in ONE statement: lock, update and return (never select
-- then save), from one ordered index scan per queue. Rows locked here but not chosen are unlocked
-- when the statement commits. A running row whose lease lapsed is re-delivered and counts as an
-- attempt (rule 1 (leased-claim)); a waiting row that woke does not. This is the claim of a worker
-- with no capped kind registered; claim_capped (same columns) is the one with caps: planning and
-- running the caps' part would cost every claim its time even with no cap to apply.
-- It may be prepared. Each queue's scan takes its first "limit" lockable rows through a fence
-- whose inner limit is a constant, "{bound}" (the store writes the least of 128, 1024, 8192...
-- at or above the limit, one text each): a limit the planner cannot see it estimates at a tenth
-- of the rows, so the generic plan was costed ten to a hundred times above the custom one and
-- PostgreSQL never chose it, planning every run afresh. The outer limit stops the pull, so no
-- row past the limit is locked; no ORDER BY out there, or the fence would lock all "bound" rows
-- to sort them.
WITH locked AS (
    SELECT j.* FROM {fragment:active_queues}
    CROSS JOIN LATERAL (
        SELECT * FROM (
            SELECT id, priority, visible_at, status AS prev_status, worker_id AS prev_worker,
                   claimed_at AS prev_claimed_at
            FROM django_ultjobs_job
            WHERE queue = q.queue
              AND {fragment:runnable}
            ORDER BY priority DESC, visible_at, id
            LIMIT {bound}
            FOR UPDATE SKIP LOCKED
        ) AS fence
        LIMIT %(limit)s::int
    ) AS j
),
chosen AS (
    SELECT * FROM locked ORDER BY priority DESC, visible_at, id LIMIT %(limit)s::int
)
{fragment:claim_update};

-- name: claim_capped
-- The claim of a worker with capped kinds registered (@job(concurrency=N)), in ONE statement too.
-- Uncapped kinds come from one ordered index scan per queue; each capped kind from a
-- scan of its own limited to its free fleet slots. So a thousand queued runs of a concurrency=1
-- job neither block the jobs behind them (no head-of-line blocking) nor make the loop claim and
-- hand back in circles. Rows locked here but not chosen are unlocked when the statement commits.
-- A running row whose lease lapsed is re-delivered and counts as an attempt
-- (rule 1 (leased-claim)); a waiting row that woke does not. The capped names reach the uncapped
-- scan as a constant array: a subquery there hides the row estimate from the planner and turns the
-- ordered index scan into a sort of every runnable row. "uncapped" false
-- leaves the uncapped scan out (a one-time filter): the async lane's claim takes its own kinds only
-- (rule 87 (no-claim-beyond-free-places)).
-- A kind capped per key (key_names, @job(concurrency_key=...); rule 50 (per-key-cap)) is scanned
-- past the keys whose slots are all held, so a full key holds back no other key; "chosen" then
-- takes at most each key's free slots of its rows. Its rows come back with their slot key (the last
-- column).
WITH caps AS MATERIALIZED (
    -- The slots this worker kept from its last runs of a kind ("kept") count as free for it.
    -- Added in bigint: a cap may be 2**31 - 1 (rule 54 (bad-flow-option-refused)), and one kept
    -- slot more overflowed.
    SELECT c.name,
           c.lim::bigint + c.kept - (SELECT count(*) FROM django_ultjobs_slot AS l
                             WHERE l.key = {slot_key(c.name)} AND l.slot < c.lim
                               AND l.expires_at > {now}) AS free
    FROM unnest(%(cap_names)s::text[], %(cap_limits)s::int[], %(cap_kept)s::int[])
        AS c(name, lim, kept)
),
held AS MATERIALIZED (
    -- The held slots per key, read once, and only by a claim with kinds capped per key (a CTE
    -- is scanned when a query reads it).
    SELECT key, count(*) AS n FROM django_ultjobs_slot WHERE expires_at > {now} GROUP BY key
),
locked AS (
    SELECT j.* FROM {fragment:active_queues}
    CROSS JOIN LATERAL (
        SELECT id, priority, visible_at, status AS prev_status, worker_id AS prev_worker,
               claimed_at AS prev_claimed_at, false AS capped, NULL::text AS slot_key,
               0 AS key_lim
        FROM django_ultjobs_job
        WHERE queue = q.queue
          AND {fragment:runnable}
          AND name <> ALL (%(cap_names)s::text[])
          AND name <> ALL (%(key_names)s::text[])
          AND %(uncapped)s::boolean
        ORDER BY priority DESC, visible_at, id
        LIMIT %(limit)s::int
        FOR UPDATE SKIP LOCKED
    ) AS j
    UNION ALL
    SELECT j.* FROM caps
    CROSS JOIN LATERAL (
        SELECT id, priority, visible_at, status, worker_id, claimed_at, true, NULL, 0
        FROM django_ultjobs_job
        WHERE name = caps.name
          -- An array computed once (an InitPlan), so the filter stays a plain filter on the
          -- kind's ordered index scan.
          AND queue = ANY (ARRAY(SELECT q.queue FROM {fragment:active_queues}))
          AND {fragment:runnable}
        ORDER BY priority DESC, visible_at, id
        LIMIT LEAST(caps.free, %(limit)s::int)
        FOR UPDATE SKIP LOCKED
    ) AS j
    WHERE caps.free > 0
    UNION ALL
    -- A row enqueued before its job had concurrency_key has no key: it takes the job's own.
    SELECT j.* FROM unnest(%(key_names)s::text[], %(key_limits)s::int[]) AS k(name, lim)
    CROSS JOIN LATERAL (
        SELECT id, priority, visible_at, status, worker_id, claimed_at, true,
               COALESCE(NULLIF(concurrency_key, ''), {slot_key(name)}), k.lim
        FROM django_ultjobs_job
        WHERE name = k.name
          AND queue = ANY (ARRAY(SELECT q.queue FROM {fragment:active_queues}))
          AND {fragment:runnable}
          AND COALESCE(NULLIF(concurrency_key, ''), {slot_key(name)})
              <> ALL (ARRAY(SELECT h.key FROM held AS h WHERE h.n >= k.lim))
        ORDER BY priority DESC, visible_at, id
        LIMIT %(limit)s::int
        FOR UPDATE SKIP LOCKED
    ) AS j
),
chosen AS (
    SELECT * FROM (
        SELECT l.*, row_number() OVER (PARTITION BY l.slot_key
                                       ORDER BY priority DESC, visible_at, id) AS key_rank
        FROM locked AS l) AS r
    WHERE r.slot_key IS NULL
       OR r.key_rank <= r.key_lim - COALESCE((SELECT h.n FROM held AS h
                                             WHERE h.key = r.slot_key), 0)
    ORDER BY priority DESC, visible_at, id LIMIT %(limit)s::int
)
{fragment:claim_update},
          chosen.slot_key;

-- name: claim_capped_kinds
-- claim_capped when it leaves the uncapped scan out and no kind is capped per key: the capped
-- kinds' own scans alone, each limited to its free fleet slots: the async lane's claim
-- (rule 87 (no-claim-beyond-free-places)). claim_capped would take the
-- same rows in the same order; the parts it carries for the other kinds and for per-key caps are
-- planned on every claim even when they read nothing, which doubled this claim's planning. Same
-- columns as claim_capped, no slot key. It may be prepared, as claim is, for the same reason:
-- each kind's scan takes its rows through a fence whose inner limit is the constant "{bound}" (the store writes the
-- least of 128, 1024, 8192... at or above the limit), so the planner can cost the scan and keeps
-- the generic plan; the kind's own limit (its free slots, the claim's limit) is outside the fence,
-- and stops the pull there, so no row past it is locked; no ORDER BY between the two, or the fence
-- would lock all "{bound}" rows to sort them. Each kind locks up to its own limit, so with several
-- kinds more rows than "limit" may be locked until the claim commits (chosen takes "limit" of
-- them), as before the fence. "{kinds}" is how many kinds the arrays hold (the
-- store writes it; the LIMIT cuts nothing): a function of parameters is estimated at ten rows,
-- which costed the generic plan at ten scans for one and kept PostgreSQL planning every claim.
WITH caps AS MATERIALIZED (
    SELECT c.name,
           c.lim::bigint + c.kept - (SELECT count(*) FROM django_ultjobs_slot AS l
                             WHERE l.key = {slot_key(c.name)} AND l.slot < c.lim
                               AND l.expires_at > {now}) AS free
    FROM (SELECT * FROM unnest(%(cap_names)s::text[], %(cap_limits)s::int[], %(cap_kept)s::int[])
              AS c(name, lim, kept)
          LIMIT {kinds}) AS c
),
chosen AS (
    SELECT j.* FROM caps
    CROSS JOIN LATERAL (
        SELECT * FROM (
            SELECT id, priority, visible_at, status AS prev_status, worker_id AS prev_worker,
                   claimed_at AS prev_claimed_at
            FROM django_ultjobs_job
            WHERE name = caps.name
              AND queue = ANY (ARRAY(SELECT q.queue FROM {fragment:active_queues}))
              AND {fragment:runnable}
            ORDER BY priority DESC, visible_at, id
            LIMIT {bound}
            FOR UPDATE SKIP LOCKED
        ) AS fence
        LIMIT LEAST(caps.free, %(limit)s::int)
    ) AS j
    WHERE caps.free > 0
    ORDER BY priority DESC, visible_at, id LIMIT %(limit)s::int
)
{fragment:claim_update},
          NULL::text AS slot_key;

-- name: heartbeat
-- Push the lease of every run this worker holds in one statement, fenced on each run's
-- claim token. A run missing from the result is an explicit "no" (rule 2 (heartbeat-retried)):
-- another claim owns the row, or it is gone. Rows are locked in id order so this cannot deadlock
-- with a settle batch.
WITH locked AS (
    -- One primary-key probe per run, in id order (a lateral lookup, so the plan cannot follow
    -- the table's statistics: a plain join can drive from the (name, status) index over every
    -- running row, or filter the batch once per row).
    SELECT l.id
    FROM (SELECT * FROM unnest(%(ids)s::bigint[], %(tokens)s::uuid[]) AS h(id, token)
          ORDER BY h.id) AS h
    CROSS JOIN LATERAL (
        SELECT j.id FROM django_ultjobs_job AS j
        WHERE j.id = h.id AND j.claim_token = h.token AND j.status = 'running'
        FOR UPDATE
    ) AS l
)
UPDATE django_ultjobs_job AS j
SET visible_at = {now_plus(%(timeout)s::float8)}
FROM locked
WHERE j.id = locked.id
RETURNING j.id, j.cancel_requested;

-- name: settle
-- Settle a batch of runs in one statement: each row only under its own claim token
-- (rule 4 (fenced-settle)), its attempt recorded in the same statement. Returns the ids that
-- applied; an id missing from the result was a stale settle and changed nothing. A run that
-- suspends on an event goes to 'waiting' — or straight back to visible when a matching event is
-- already committed (the caller holds the event's advisory lock, so no event can commit unseen
-- between this check and the wait being visible to send_event).
WITH c AS (
    -- One array per column, side by side (store/settle_arrays.py): the server reads them in
    -- about half the CPU a JSON batch of the same runs took. A
    -- column sent as NULL reads as NULL in every run.
    SELECT * FROM unnest(
        %(id)s::bigint[], %(token)s::uuid[], %(status)s::text[], %(attempt_delta)s::int[],
        %(delay)s::float8[], %(error)s::text[], %(result_json)s::text[], %(outcome)s::text[],
        %(attempt_no)s::int[], %(started_at)s::timestamptz[], %(slot_key)s::text[],
        %(slot)s::int[], %(wait_event)s::text[], %(wait_match)s::jsonb[],
        %(wait_after)s::bigint[], %(steps_run)s::jsonb[], %(steps_replayed)s::jsonb[],
        %(extends)s::bigint[], %(on_row)s::boolean[]
    ) AS c(id, token, status, attempt_delta, delay, error, result_json, outcome, attempt_no,
           started_at, slot_key, slot, wait_event, wait_match, wait_after, steps_run,
           steps_replayed, extends, on_row)
),
locked AS (
    -- One primary-key probe per run in id order, like the heartbeat (no deadlock with it, and a
    -- plan that cannot follow the table's statistics). Each held run keeps its batch row, so the
    -- writes below read it from here and from settled's RETURNING, never joining the batch
    -- again: a join estimated at one row ran as a nested loop over the whole batch per row,
    -- quadratic in the batch.
    SELECT h.*
    FROM (SELECT * FROM c ORDER BY c.id) AS h
    CROSS JOIN LATERAL (
        SELECT j.id FROM django_ultjobs_job AS j
        WHERE j.id = h.id AND j.claim_token = h.token AND j.status = 'running'
          -- A run that finishes a job with dependents is settled in a transaction that
          -- releases them (rule 110 (released-in-settle)): left out here, the store sends it again
          -- with
          -- "dependents" true. Plain jobs pay this one column test.
          AND (%(dependents)s::boolean OR NOT j.has_dependents
               OR h.status IN ('queued', 'waiting'))
        FOR UPDATE
    ) AS l
),
settled AS (
    UPDATE django_ultjobs_job AS j
    SET status = c.status,
        attempt = j.attempt + c.attempt_delta,
        visible_at = CASE
            WHEN c.status = 'waiting' AND c.wait_event IS NOT NULL AND EXISTS (
                SELECT 1 FROM django_ultjobs_jobevent AS e
                WHERE e.name = c.wait_event AND e.id > COALESCE(c.wait_after, 0)
                  AND e.created_at >= j.created_at
                  AND NOT EXISTS (
                      SELECT 1 FROM jsonb_each(COALESCE(c.wait_match, '{}'::jsonb)) AS m
                      WHERE (e.payload -> m.key) IS DISTINCT FROM m.value))
                THEN {now}
            WHEN c.status IN ('queued', 'waiting') THEN {now_plus(c.delay)}
            ELSE j.visible_at END,
        wait_event = CASE WHEN c.status = 'waiting' THEN COALESCE(c.wait_event, '') ELSE '' END,
        wait_match = CASE WHEN c.status = 'waiting' THEN c.wait_match ELSE NULL END,
        wait_after = CASE WHEN c.status = 'waiting' THEN COALESCE(c.wait_after, 0) ELSE 0 END,
        claim_token = NULL,
        -- A cancel request outlives a run that ends any other way (a retry, a wait, a
        -- hand-back): the next claim then cancels the job instead of running it.
        cancel_requested = CASE WHEN c.status IN ('succeeded', 'failed') THEN false
                                ELSE j.cancel_requested END,
        last_error = COALESCE(c.error, j.last_error),
        result = CASE WHEN c.result_json IS NULL THEN j.result ELSE c.result_json::jsonb END,
        finished_at = CASE WHEN c.status IN ('succeeded', 'failed', 'cancelled')
                           THEN {now} ELSE NULL END,
        -- Held by the row only when the row's worker (the claim's) is the settle's, as it is
        -- for every settle under its own claim, and the slot the run held, if any, is its job's
        -- per-job slot: then the row says all the attempt row would (the view builds the key
        -- from the job's name).
        attempt_on_row = COALESCE(c.on_row, false) AND j.worker_id = %(worker_id)s::text
                         AND (c.slot IS NULL AND c.slot_key IS NULL
                              OR c.slot IS NOT NULL AND c.slot_key = {slot_key(j.name)}),
        attempt_slot = CASE WHEN COALESCE(c.on_row, false) AND j.worker_id = %(worker_id)s::text
                                 AND c.slot_key = {slot_key(j.name)} THEN c.slot END,
        updated_at = {now}
    FROM locked AS c
    -- The ids again as an array: the rows are read by primary key whatever the table's size.
    -- Joined to the batch alone, estimated at 100 rows, a table of under about 15,000 rows was
    -- read whole per settle (a hash join over a sequential scan), planned so by the table's
    -- statistics, generic plan and custom alike: nearly twice the server's CPU a run of the index
    -- probe below, at 10,000 rows in 128-run batches.
    WHERE j.id = c.id AND j.id = ANY (ARRAY(SELECT x.id FROM locked AS x))
    RETURNING j.id, c.attempt_no, c.started_at, c.outcome, c.error, c.slot_key, c.slot,
              c.steps_run, c.steps_replayed, c.extends, j.attempt_on_row AS on_row,
              j.finished_at, j.wait_key
),
extended AS (
    -- A park continuing its episode (rule 12 (unknown-job-parked)) counts one more claim on the
    -- episode's row. The rows come by primary key from the few ids that extend (none in most
    -- batches). The EXISTS reads the batch alone, so it is one test before the join: a batch that
    -- extends none reads no attempt row, whatever plan the join got. A prepared settle keeps the
    -- generic plan made at its first runs, when the attempts table was small: a scan of the whole
    -- table per settle once it has grown, unless nothing below this test runs.
    UPDATE django_ultjobs_jobattempt AS a
    SET claims = a.claims + 1, finished_at = {now}, worker_id = %(worker_id)s::text
    FROM settled AS s
    WHERE EXISTS (SELECT 1 FROM settled AS x WHERE x.extends IS NOT NULL)
      AND a.id = ANY (ARRAY(SELECT e.extends FROM settled AS e WHERE e.extends IS NOT NULL))
      AND a.id = s.extends AND a.job_id = s.id
    RETURNING a.job_id
),
recorded AS (
    -- Every other run with an outcome records its attempt: the row it extends is gone, or it
    -- extends none (the batch holds one run per job). A run whose attempt the job's row holds
    -- (on_row: a first attempt that succeeded plainly, in no slot or a per-job one) writes no
    -- row (rule 97 (attempt-on-row)).
    INSERT INTO django_ultjobs_jobattempt
        (job_id, attempt, worker_id, started_at, finished_at, outcome, error, slot_key, slot,
         steps_run, steps_replayed)
    SELECT s.id, s.attempt_no, %(worker_id)s::text, s.started_at, {now}, s.outcome,
           COALESCE(s.error, ''), COALESCE(s.slot_key, ''), s.slot,
           COALESCE(s.steps_run, '[]'::jsonb), COALESCE(s.steps_replayed, '[]'::jsonb)
    FROM settled AS s
    WHERE s.outcome IS NOT NULL AND NOT s.on_row
      AND s.id NOT IN (SELECT x.job_id FROM extended AS x)
)
SELECT s.id, {fragment:finished_notify}
FROM settled AS s;

-- fragment: finished_notify
-- Wakes whoever waits (rule 116 (wait-for-result)) for a row "s" (finished_at, wait_key) that just
-- finished for
-- good: its wait_key names its batch or workflow (set when it was enqueued), or the job itself
-- (set by job.wait()). A settle of many members of one batch sends one notify (PostgreSQL folds
-- equal payloads of a transaction); a job nobody waits for sends none. On commit only.
CASE WHEN s.finished_at IS NOT NULL AND s.wait_key > ''
     THEN pg_notify('django_ultjobs_finished', s.wait_key)::text END

-- fragment: dependency_edges
-- The dependents of the jobs in "src" (id, status, batch_id, dependents): each workflow node in
-- its own row's "dependents", and each callback of a member's batch, with the dependency's id
-- and status.
SELECT d.value::bigint AS dependent, s.id AS dep, s.status
FROM src AS s CROSS JOIN LATERAL jsonb_array_elements_text(s.dependents) AS d(value)
UNION ALL
SELECT cb.id, s.id, s.status
FROM src AS s JOIN django_ultjobs_job AS cb ON cb.callback_of_id = s.batch_id
WHERE s.batch_id IS NOT NULL

-- name: release
-- Count the jobs %(ids)s, which just finished for good, on every dependent, and release or
-- cancel the pending dependents whose condition now holds or can no longer hold
-- (rules 110 (released-in-settle) to 113 (constant-bookkeeping)), in the transaction of the
-- settle (or cancel) that finished them. One row per dependent per
-- statement however many of its dependencies finished in it (rule 113 (constant-bookkeeping): a
-- batch's callback is
-- one hot row per settle batch). Counters are kept exact whatever the dependent's status, so a
-- retry can take a finish back (unfinish). Each dependent is locked in id order, as the settle
-- locks its runs, and judged on the row as locked (the latest committed counters), so two
-- settles of a dependent's last two dependencies cannot both miss the last one. Returns each
-- dependent, and whether it was cancelled with dependents of its own: the store sends those
-- back here (the cascade, same transaction). Released queues and waiters are notified on commit.
WITH src AS (
    SELECT j.id, j.status, j.batch_id, j.dependents FROM django_ultjobs_job AS j
    WHERE j.id = ANY (%(ids)s::bigint[]) AND j.status IN ('succeeded', 'failed', 'cancelled')
),
edges AS ({fragment:dependency_edges}),
counted AS (
    SELECT e.dependent, count(*)::int AS done,
           (count(*) FILTER (WHERE e.status <> 'succeeded'))::int AS bad,
           min(e.dep) FILTER (WHERE e.status = 'failed') AS first_failed,
           min(e.dep) FILTER (WHERE e.status = 'cancelled') AS first_cancelled
    FROM edges AS e GROUP BY e.dependent
),
locked AS (
    SELECT c.*, CASE
        WHEN l.status <> 'pending' THEN 'keep'
        WHEN l.depends_when = 'succeeded' AND l.deps_failed + c.bad > 0 THEN 'cancel'
        WHEN l.deps_done + c.done < l.deps_total THEN 'keep'
        WHEN l.depends_when = 'failed' AND l.deps_failed + c.bad = 0 THEN 'cancel'
        ELSE 'release' END AS verdict
    FROM (SELECT * FROM counted ORDER BY dependent) AS c
    CROSS JOIN LATERAL (
        SELECT j.status, j.depends_when, j.deps_done, j.deps_failed, j.deps_total
        FROM django_ultjobs_job AS j WHERE j.id = c.dependent
        FOR UPDATE
    ) AS l
),
changed AS (
    UPDATE django_ultjobs_job AS j
    SET deps_done = j.deps_done + c.done,
        deps_failed = j.deps_failed + c.bad,
        status = CASE c.verdict WHEN 'cancel' THEN 'cancelled' WHEN 'release' THEN 'queued'
                 ELSE j.status END,
        -- Never before the due time its enqueue gave it (run_at, delay):
        -- rule 150 (release-keeps-due-time).
        visible_at = CASE WHEN c.verdict = 'release' THEN GREATEST(j.visible_at, {now})
                          ELSE j.visible_at END,
        cancelled_by = CASE WHEN c.verdict = 'cancel'
                            THEN COALESCE(c.first_failed, c.first_cancelled)
                            ELSE j.cancelled_by END,
        cancel_reason = CASE WHEN c.verdict <> 'cancel' THEN j.cancel_reason
                             WHEN c.first_failed IS NOT NULL
                                 THEN 'dependency ' || c.first_failed || ' failed'
                             WHEN c.first_cancelled IS NOT NULL
                                 THEN 'dependency ' || c.first_cancelled || ' was cancelled'
                             ELSE 'every dependency succeeded' END,
        finished_at = CASE WHEN c.verdict = 'cancel' THEN {now} ELSE j.finished_at END,
        updated_at = CASE WHEN c.verdict = 'keep' THEN j.updated_at ELSE {now} END
    FROM locked AS c
    WHERE j.id = c.dependent
    RETURNING j.id, c.verdict, j.finished_at, j.has_dependents, j.queue, j.wait_key
)
SELECT s.id, s.verdict = 'cancel' AND s.has_dependents,
       CASE WHEN s.verdict = 'release' THEN pg_notify('django_ultjobs', s.queue)::text END,
       CASE WHEN s.verdict = 'cancel' THEN {fragment:finished_notify} END
FROM changed AS s;

-- name: unfinish
-- Take back the finish of the jobs %(ids)s (a retry queued them again; each had failed or was
-- cancelled, so each counted as a dependency that did not succeed): every dependent's counters
-- lose them, and a dependent their finish cancelled comes back to pending when its condition
-- can hold again (rule 114 (retry-takes-finish-back)). Returns the dependents brought back that
-- have dependents of their
-- own: the store sends them here too (their own dependents counted them as cancelled).
WITH src AS (
    SELECT j.id, j.status, j.batch_id, j.dependents FROM django_ultjobs_job AS j
    WHERE j.id = ANY (%(ids)s::bigint[])
),
edges AS ({fragment:dependency_edges}),
counted AS (SELECT e.dependent, count(*)::int AS n FROM edges AS e GROUP BY e.dependent),
locked AS (
    SELECT c.*, (l.status = 'cancelled' AND l.cancelled_by IS NOT NULL
                 AND l.deps_failed - c.n = 0) AS back
    FROM (SELECT * FROM counted ORDER BY dependent) AS c
    CROSS JOIN LATERAL (
        SELECT j.status, j.cancelled_by, j.deps_failed
        FROM django_ultjobs_job AS j WHERE j.id = c.dependent
        FOR UPDATE
    ) AS l
),
changed AS (
    UPDATE django_ultjobs_job AS j
    SET deps_done = j.deps_done - c.n,
        deps_failed = j.deps_failed - c.n,
        status = CASE WHEN c.back THEN 'pending' ELSE j.status END,
        cancelled_by = CASE WHEN c.back THEN NULL ELSE j.cancelled_by END,
        cancel_reason = CASE WHEN c.back THEN '' ELSE j.cancel_reason END,
        finished_at = CASE WHEN c.back THEN NULL ELSE j.finished_at END,
        updated_at = CASE WHEN c.back THEN {now} ELSE j.updated_at END
    FROM locked AS c
    WHERE j.id = c.dependent
    RETURNING j.id, c.back, j.has_dependents
)
SELECT id, back AND has_dependents FROM changed;

-- name: finished_notify
-- Wake the waiters of jobs %(ids)s, just finished outside a settle (cancel_jobs), on commit.
SELECT count({fragment:finished_notify})
FROM django_ultjobs_job AS s WHERE s.id = ANY (%(ids)s::bigint[]);

-- name: settle_landed
-- Which settles of a batch this worker already wrote, though it never heard back (the connection
-- died during the commit): their attempts are recorded under this worker with the same attempt
-- number, start time, outcome and error (rule 32 (landed-never-stale)). An attempt a re-claimer
-- records for a lapsed lease has another outcome or error, so a stale settle never passes for a
-- landed one. Read through the attempts view: a landed settle whose attempt the job's row holds
-- counts too (rule 97 (attempt-on-row); its start is the row's claim time, which only this claim
-- wrote).
SELECT c.id
FROM jsonb_to_recordset(%(batch)s::jsonb) AS c(
    id bigint, attempt_no int, outcome text, error text, started_at timestamptz)
WHERE EXISTS (
    SELECT 1 FROM django_ultjobs_attemptrecord AS a
    WHERE a.job_id = c.id AND a.attempt = c.attempt_no AND a.worker_id = %(worker_id)s::text
      AND a.outcome = c.outcome AND a.error = c.error
      AND a.started_at IS NOT DISTINCT FROM c.started_at);

-- name: record_attempts
-- Record attempts that ended without their worker reporting back (a lapsed lease found by the
-- next claim), so the admin shows every run, including the ones whose process died.
INSERT INTO django_ultjobs_jobattempt
    (job_id, attempt, worker_id, started_at, finished_at, outcome, error, slot_key, slot,
     steps_run, steps_replayed)
SELECT a.job_id, a.attempt, a.worker_id, a.started_at, {now}, a.outcome, a.error, '', NULL,
       '[]'::jsonb, '[]'::jsonb
FROM jsonb_to_recordset(%(batch)s::jsonb)
    AS a(job_id bigint, attempt int, worker_id text, started_at timestamptz, outcome text,
         error text);

-- name: park_episodes
-- For each job an unknown-job park is about (rule 12 (unknown-job-parked)): its latest attempt row
-- (highest attempt, then newest; the (job, attempt) index walked backwards, one row read per job)
-- when that row is such a park, with whether its episode began the timeout ago or more.
SELECT ids.id, a.id, a.attempt, a.started_at <= {now_plus(-%(timeout)s::float8)}
FROM unnest(%(ids)s::bigint[]) AS ids(id)
CROSS JOIN LATERAL (
    SELECT a.id, a.attempt, a.outcome, a.error, a.started_at
    FROM django_ultjobs_jobattempt AS a
    WHERE a.job_id = ids.id
    ORDER BY a.attempt DESC, a.id DESC
    LIMIT 1
) AS a
WHERE a.outcome = 'suspended' AND left(a.error, length(%(prefix)s::text)) = %(prefix)s::text;

-- name: event_wait_lock
-- Taken by a settle that puts runs to wait on events: exclusive per event name, so no
-- send_event of that name is still in flight (senders hold it shared) while the settle looks
-- for its event. TRY, never wait: a waiting exclusive request would queue every new sender
-- behind it, so one open web transaction could stall all senders and this worker's settles.
-- Returns the names it could NOT lock; their runs re-check shortly instead.
SELECT n
FROM (SELECT DISTINCT n FROM unnest(%(names)s::text[]) AS n ORDER BY n) AS s
WHERE NOT pg_try_advisory_xact_lock(30058, hashtext(n));

-- name: event_send_lock
-- Taken by send_event in the caller's transaction, shared: senders never wait for each other.
SELECT pg_advisory_xact_lock_shared(30058, hashtext(%(name)s::text));

-- name: event_insert
-- Record an event.
INSERT INTO django_ultjobs_jobevent (name, payload, created_at)
VALUES (%(name)s::text, %(payload)s::jsonb, {now})
RETURNING id;

-- name: event_wake
-- Wake the waiting jobs this event matches (every key of wait_match equal in the payload);
-- their next claim finds the event, and their queues' idle workers are notified on commit.
-- Jobs enqueued after the event do not match it.
WITH woken AS (
    UPDATE django_ultjobs_job
    SET visible_at = {now}
    WHERE status = 'waiting' AND wait_event = %(name)s::text AND wait_after < %(event_id)s::bigint
      AND NOT EXISTS (
          SELECT 1 FROM jsonb_each(COALESCE(wait_match, '{}'::jsonb)) AS m
          WHERE (%(payload)s::jsonb -> m.key) IS DISTINCT FROM m.value)
      AND created_at <= {now}
      AND visible_at > {now}
    RETURNING queue
)
SELECT count(pg_notify('django_ultjobs', q.queue)) FROM (SELECT DISTINCT queue FROM woken) AS q;

-- name: event_find
-- The first event a wait may consume: same name, matching, newer than what this job already
-- consumed, and not older than the job itself.
SELECT e.id, e.payload
FROM django_ultjobs_jobevent AS e
WHERE e.name = %(name)s::text AND e.id > %(after)s::bigint
  AND e.created_at >= (SELECT created_at FROM django_ultjobs_job WHERE id = %(job_id)s::bigint)
  AND NOT EXISTS (SELECT 1 FROM jsonb_each(%(match)s::jsonb) AS m
                  WHERE (e.payload -> m.key) IS DISTINCT FROM m.value)
ORDER BY e.id
LIMIT 1;

-- name: progress_save
-- Store a run's progress (ctx.set_progress), fenced on its claim token like every write of a
-- run (rule 79 (progress-throttled-fenced)): no row returned when another claim owns the job, or it
-- has finished.
UPDATE django_ultjobs_job SET progress = %(progress)s::jsonb
WHERE id = %(job_id)s::bigint AND claim_token = %(token)s::uuid AND status = 'running'
RETURNING id;

-- name: step_save
-- Store a step's result (or its pending wait), fenced on the run's claim token: a run that lost
-- its job cannot record a step for it. FOR SHARE holds the token steady until this commits.
INSERT INTO django_ultjobs_jobstep
    (job_id, name, status, result, wait_until, attempt, created_at, completed_at)
SELECT j.id, %(name)s::text, %(status)s::text, %(result_json)s::jsonb,
       CASE WHEN %(wait_seconds)s::float8 IS NULL THEN NULL
            ELSE {now_plus(%(wait_seconds)s::float8)} END,
       %(attempt)s::int, {now}, CASE WHEN %(status)s::text = 'done' THEN {now} ELSE NULL END
FROM django_ultjobs_job AS j
WHERE j.id = %(job_id)s::bigint AND j.claim_token = %(token)s::uuid AND j.status = 'running'
FOR SHARE
ON CONFLICT (job_id, name) DO UPDATE
    SET status = EXCLUDED.status, result = EXCLUDED.result,
        wait_until = COALESCE(EXCLUDED.wait_until, django_ultjobs_jobstep.wait_until),
        attempt = EXCLUDED.attempt, completed_at = EXCLUDED.completed_at
    WHERE django_ultjobs_jobstep.status <> 'done'
RETURNING id, wait_until;

-- name: notify
-- Wake idle workers of these queues when the surrounding transaction commits (a retry from the
-- admin, for one).
SELECT count(pg_notify('django_ultjobs', q)) FROM unnest(%(queues)s::text[]) AS q;

-- name: listen
-- Subscribe the listener's own session to enqueue notifications and to cancel requests.
LISTEN django_ultjobs; LISTEN django_ultjobs_cancel;

-- name: notify_cancel
-- Tell the workers holding these running jobs, when the surrounding transaction commits, that
-- they were asked to stop: each looks at once instead of at its next heartbeat
-- (rule 59 (cancel-reason-kept)). The payload is the worker's id; a worker that misses it finds the request at its heartbeat.
SELECT count(pg_notify('django_ultjobs_cancel', w.worker_id))
FROM (SELECT DISTINCT worker_id FROM django_ultjobs_job
      WHERE id = ANY (%(ids)s::bigint[]) AND status = 'running' AND worker_id <> '') AS w;

-- name: db_now
-- The database's clock (durable sleeps and wait timeouts are judged by it).
SELECT {now};

-- name: slot_acquire
-- Take the lowest free slots of key in [0, limit), one per holder (in holder order), in ONE
-- statement however many runs of the kind were claimed together: free means no row, or a
-- lapsed row (taken over in place). Two racing acquirers of one slot serialise on its unique
-- index and the loser gets no row for that holder (the caller hands that run back).
-- The lowest free slots lie below the number of holders plus the slots held, so only those
-- are tried: a series up to the limit grew with the cap, and never ended at 2**31 - 1
-- (rule 54 (bad-flow-option-refused)).
WITH want AS (
    SELECT w.holder, w.ord FROM unnest(%(holders)s::text[]) WITH ORDINALITY AS w(holder, ord)
),
free AS (
    SELECT f.slot, row_number() OVER (ORDER BY f.slot) AS rn
    FROM (SELECT s.slot
          FROM generate_series(0, LEAST(%(limit)s::int,
                                        cardinality(%(holders)s::text[])
                                        + (SELECT count(*) FROM django_ultjobs_slot AS h
                                           WHERE h.key = %(key)s::text
                                             AND h.expires_at > {now}))::int - 1) AS s(slot)
          WHERE NOT EXISTS (
              SELECT 1 FROM django_ultjobs_slot AS h
              WHERE h.key = %(key)s::text AND h.slot = s.slot AND h.expires_at > {now})
          ORDER BY s.slot
          LIMIT cardinality(%(holders)s::text[])) AS f
)
INSERT INTO django_ultjobs_slot AS l (key, slot, holder, acquired_at, expires_at)
SELECT %(key)s::text, free.slot, want.holder, {now}, {now_plus(%(ttl)s::float8)}
FROM free JOIN want ON want.ord = free.rn
ORDER BY free.slot
ON CONFLICT (key, slot) DO UPDATE
    SET holder = EXCLUDED.holder, acquired_at = EXCLUDED.acquired_at,
        expires_at = EXCLUDED.expires_at
    WHERE l.expires_at <= {now}
RETURNING l.key, l.slot, l.holder, l.expires_at;

-- name: slot_acquire_keys
-- slot_acquire for many keys at once (the runs of one claim of kinds capped per key,
-- rule 50 (per-key-cap)): for each key, its lowest free slots in [0, its limit), one per holder of
-- that key in holder order, in ONE statement however many keys the claim brought. Rows are written
-- in (key, slot) order, the order every slot statement locks them in, so no two can deadlock.
WITH want AS (
    SELECT w.key, w.lim, w.holder,
           row_number() OVER (PARTITION BY w.key ORDER BY w.ord) AS rn
    FROM unnest(%(keys)s::text[], %(limits)s::int[], %(holders)s::text[])
        WITH ORDINALITY AS w(key, lim, holder, ord)
),
free AS (
    -- Each key's lowest free slots lie below its holders plus its slots held (slot_acquire).
    SELECT k.key, s.slot, row_number() OVER (PARTITION BY k.key ORDER BY s.slot) AS rn
    FROM (SELECT key, max(lim) AS lim, count(*) AS holders FROM want GROUP BY key) AS k
    CROSS JOIN LATERAL generate_series(
        0, LEAST(k.lim, k.holders + (SELECT count(*) FROM django_ultjobs_slot AS h
                                     WHERE h.key = k.key AND h.expires_at > {now}))::int - 1
    ) AS s(slot)
    WHERE NOT EXISTS (
        SELECT 1 FROM django_ultjobs_slot AS h
        WHERE h.key = k.key AND h.slot = s.slot AND h.expires_at > {now})
)
INSERT INTO django_ultjobs_slot AS l (key, slot, holder, acquired_at, expires_at)
SELECT want.key, free.slot, want.holder, {now}, {now_plus(%(ttl)s::float8)}
FROM free JOIN want ON want.key = free.key AND want.rn = free.rn
ORDER BY want.key, free.slot
ON CONFLICT (key, slot) DO UPDATE
    SET holder = EXCLUDED.holder, acquired_at = EXCLUDED.acquired_at,
        expires_at = EXCLUDED.expires_at
    WHERE l.expires_at <= {now}
RETURNING l.key, l.slot, l.holder, l.expires_at;

-- name: rate_take
-- Take starts from rate-limit buckets (rule 52 (fleet-rate-limit)), one row per bucket, in ONE
-- statement: GCRA, each bucket's theoretical arrival time "tat" in whole microseconds on the
-- database's clock. A bucket grants the first of its wanted starts that conform (tat - tolerance <=
-- now; tat moves on by interval per start granted) and answers how many it granted and in how many
-- microseconds its next start conforms. The upsert locks the bucket's row, so two workers never
-- both spend its last start: the second waits for the first to commit, then reads the tat it
-- left. It also answers the clock it judged by (microseconds). A new bucket grants
-- min(want, burst) at once; that is also all an existing one can ever
-- grant in one take (its tat is never behind now), so the proposed row carries the take's want
-- in "granted", and the clock as its tat less those starts. The same arithmetic as
-- rate_limits.gcra_take.
WITH w AS (
    SELECT w.key, w.interval, w.tolerance,
           LEAST(w.want, w.tolerance / w.interval + 1) AS n,
           floor(extract(epoch FROM {now}) * 1000000)::bigint AS t
    FROM unnest(%(keys)s::text[], %(intervals)s::bigint[], %(tolerances)s::bigint[],
                %(wants)s::int[]) AS w(key, interval, tolerance, want)
)
INSERT INTO django_ultjobs_ratelimitbucket AS b
    (key, tat, granted, interval, tolerance, updated_at)
SELECT w.key, w.t + w.n * w.interval, w.n, w.interval, w.tolerance, {now}
FROM w
ORDER BY w.key
ON CONFLICT (key) DO UPDATE
    SET granted = {fragment:rate_granted},
        tat = GREATEST(b.tat, EXCLUDED.tat - EXCLUDED.granted * EXCLUDED.interval)
              + EXCLUDED.interval * {fragment:rate_granted},
        interval = EXCLUDED.interval, tolerance = EXCLUDED.tolerance,
        updated_at = EXCLUDED.updated_at
RETURNING b.key, b.granted,
          b.tat - b.tolerance - floor(extract(epoch FROM b.updated_at) * 1000000)::bigint,
          floor(extract(epoch FROM b.updated_at) * 1000000)::bigint;

-- name: slot_renew
-- Renew held slots, fenced on holder AND expiry (rule 7 (fenced-slot-renewal)): a slot another
-- holder took, or one that lapsed, answers "no" by its absence from the result. A lapsed slot never
-- revives itself.
WITH r AS (
    SELECT * FROM unnest(%(keys)s::text[], %(slots)s::int[], %(holders)s::text[])
        AS r(key, slot, holder)
),
locked AS (
    SELECT l.id FROM django_ultjobs_slot AS l
    JOIN r ON l.key = r.key AND l.slot = r.slot AND l.holder = r.holder
    WHERE l.expires_at > {now}
    ORDER BY l.key, l.slot
    FOR UPDATE OF l
)
UPDATE django_ultjobs_slot AS l
SET expires_at = {now_plus(%(ttl)s::float8)}
FROM locked
WHERE l.id = locked.id
RETURNING l.key, l.slot, l.holder;

-- name: slot_release
-- Hand back held slots; a slot somebody else holds now is left alone (fenced on holder). A
-- release a crash undoes leaves the slot to lapse on its TTL (rule 9 (slot-held-while-body-runs)),
-- so it waits for no flush
-- (rule 93 (unflushed-slot-release)).
-- Rows are locked in (key, slot) order, as the renewal and the acquire's ON CONFLICT lock them,
-- so no two slot statements can deadlock.
WITH locked AS (
    SELECT l.id FROM django_ultjobs_slot AS l
    JOIN unnest(%(keys)s::text[], %(slots)s::int[], %(holders)s::text[]) AS r(key, slot, holder)
        ON l.key = r.key AND l.slot = r.slot AND l.holder = r.holder
    ORDER BY l.key, l.slot
    FOR UPDATE OF l
)
-- Rule 93 (unflushed-slot-release): set_config(..., true) lasts to the end of this statement's
-- transaction, so it rules that commit; "commit_mode" NULL (a caller's transaction) keeps the
-- session's setting.
DELETE FROM django_ultjobs_slot
USING (SELECT set_config('synchronous_commit', COALESCE(%(commit_mode)s::text,
                         current_setting('synchronous_commit')), true)) AS c
WHERE id IN (SELECT id FROM locked);

-- name: worker_upsert
-- Register (or re-register) this worker process for operators, every column the row carries: at
-- start, and again whole when a heartbeat found the row gone (pruned or deleted by hand), with the
-- start it had ("started_at", NULL at the first) and its runs and overrunning bodies of now.
-- A new process under an existing id (a fixed --worker-id) writes its own start over the row's.
INSERT INTO django_ultjobs_worker
    (id, hostname, pid, threads, queues, started_at, last_seen_at, in_flight, stopped_at,
     visibility_timeout, heartbeat_interval, jobs, overrunning)
VALUES (%(id)s::text, %(hostname)s::text, %(pid)s::int, %(threads)s::int, %(queues)s::jsonb,
        COALESCE(%(started_at)s::timestamptz, {now}), {now}, %(in_flight)s::int, NULL,
        %(visibility_timeout)s::float8, %(heartbeat_interval)s::float8, %(jobs)s::jsonb,
        %(overrunning)s::jsonb)
ON CONFLICT (id) DO UPDATE
    SET hostname = EXCLUDED.hostname, pid = EXCLUDED.pid, threads = EXCLUDED.threads,
        queues = EXCLUDED.queues, started_at = EXCLUDED.started_at,
        last_seen_at = EXCLUDED.last_seen_at, stopped_at = NULL,
        in_flight = EXCLUDED.in_flight, overrunning = EXCLUDED.overrunning,
        visibility_timeout = EXCLUDED.visibility_timeout,
        heartbeat_interval = EXCLUDED.heartbeat_interval, jobs = EXCLUDED.jobs
RETURNING started_at;

-- name: worker_jobs
-- Record the job names this worker knows now: it resolved more since it registered.
UPDATE django_ultjobs_worker SET jobs = %(jobs)s::jsonb WHERE id = %(id)s::text;

-- name: worker_touch
-- Keep this worker's row fresh (once per heartbeat); no row back: the row is gone, and the
-- worker writes it again whole (worker_upsert).
UPDATE django_ultjobs_worker
SET last_seen_at = {now}, in_flight = %(in_flight)s::int, stopped_at = NULL
WHERE id = %(id)s::text
RETURNING id;

-- name: worker_stop
-- Mark this worker as stopped on a clean exit.
-- A stopped worker runs nothing: its overrunning bodies (rule 56 (overrun-reported)) ended with its
-- process.
UPDATE django_ultjobs_worker SET stopped_at = {now}, in_flight = 0, overrunning = NULL
WHERE id = %(id)s::text;

-- name: cancel_reasons
-- The reasons of the cancel requests a heartbeat just found (rule 59 (cancel-reason-kept)). Read
-- only then, so every other heartbeat returns no more than it did.
SELECT id, cancel_reason FROM django_ultjobs_job WHERE id = ANY (%(ids)s::bigint[]);

-- name: worker_overrunning
-- Record the runs of this worker still executing past their timeout (rule 56 (overrun-reported)),
-- for the admin. Written only when that list changes, not on every heartbeat.
UPDATE django_ultjobs_worker SET overrunning = %(overrunning)s::jsonb WHERE id = %(id)s::text;

-- name: worker_runners
-- Record which child process runs each run of this worker (runjobworker --pool process), for
-- the admin's in-flight page. Written only when that changes, with the heartbeat.
UPDATE django_ultjobs_worker SET runners = %(runners)s::jsonb WHERE id = %(id)s::text;

-- name: schedule_sync
-- Register the periodic jobs this worker knows (what they run on, for the admin) and read each
-- one's cursor (the newest tick enqueued) and pause, with the database's clock. A schedule seen
-- for the first time begins now: no tick from before it existed is caught up
-- (rule 62 (catch-up-policy)).
INSERT INTO django_ultjobs_jobschedule AS s
    (name, schedule, timezone, catch_up, paused, last_tick, created_at, updated_at)
SELECT x.name, x.schedule, x.timezone, x.catch_up, false, {now}, {now}, {now}
FROM jsonb_to_recordset(%(schedules)s::jsonb)
    AS x(name text, schedule text, timezone text, catch_up text)
ORDER BY x.name
ON CONFLICT (name) DO UPDATE
    SET schedule = EXCLUDED.schedule, timezone = EXCLUDED.timezone,
        catch_up = EXCLUDED.catch_up, updated_at = EXCLUDED.updated_at
RETURNING s.name, s.last_tick, s.paused, {now};

-- name: schedule_tick
-- Enqueue the ticks of one periodic job that the database's clock has reached, each at most
-- once across the fleet, by whichever worker gets there first (rules 60 (tick-once) to
-- 62 (catch-up-policy), 102 (database-clock-ticks)). The worker offers candidate ticks around its
-- estimate of this clock; which are due (at or before now(), after the cursor), which the catch-up
-- policy keeps (the newest keep, none more than late seconds late) and where the cursor moves are
-- decided here, on now(), so a worker whose clock is off changes only when it asks: a tick still
-- ahead of now() is neither enqueued nor passed by the cursor, which moves to the newest due tick
-- (kept or skipped as late), never further. An offer that does not reach now() (its horizon before
-- it), or that leaves out ticks the policy could keep (cut short of the cursor, its floor after it,
-- with fewer than keep due), changes nothing: the worker offers again around the now() it gets
-- back. The schedule's row is locked (FOR UPDATE) only when the snapshot shows a reached tick past
-- its cursor, so a worker whose ticks are in already writes nothing (no WAL flush at its commit); a
-- second worker offering the same ticks at once waits for the first, finds the cursor moved and
-- locks nothing (its answer shows the cursor of its snapshot: its next offer reads the moved one).
-- The unique index on (name, scheduled_for) skips a tick already in the table on its own as
-- well. Each job is visible at its tick (rule 61 (tick-on-time)), which has come; idle workers are
-- notified on commit. One row always (the clock, the cursor after, paused), then one per job
-- created.
WITH prev AS (
    SELECT s.name, s.last_tick
    FROM django_ultjobs_jobschedule AS s
    WHERE s.name = %(name)s::text AND NOT s.paused
      AND (s.last_tick IS NULL OR s.last_tick < (
          SELECT max(t.tick) FROM unnest(%(ticks)s::timestamptz[]) AS t(tick)
          WHERE t.tick <= {now}))
    FOR UPDATE
),
due AS (
    SELECT t.tick
    FROM unnest(%(ticks)s::timestamptz[]) AS t(tick), prev
    WHERE t.tick <= {now} AND (prev.last_tick IS NULL OR t.tick > prev.last_tick)
),
cursor AS (
    UPDATE django_ultjobs_jobschedule AS s
    SET last_tick = (SELECT max(due.tick) FROM due), updated_at = {now}
    FROM prev
    WHERE s.name = prev.name AND %(horizon)s::timestamptz >= {now}
      AND (COALESCE(prev.last_tick, '-infinity') >= COALESCE(%(floor)s::timestamptz, '-infinity')
           OR (SELECT count(*) FROM due) >= %(keep)s::int)
    RETURNING s.name, s.last_tick
),
ins AS (
    INSERT INTO django_ultjobs_job
        (name, queue, priority, args, kwargs, status, attempt, max_attempts, visible_at,
         claim_token, worker_id, cancel_requested, traceparent, tracestate, enqueued_by,
         last_error, wait_event, wait_after, created_at, updated_at, scheduled_for)
    SELECT cursor.name, %(queue)s::text, %(priority)s::int, '[]'::jsonb, '{}'::jsonb, 'queued', 0,
           %(max_attempts)s::int, kept.tick, NULL, '', false, '', '', %(enqueued_by)s::text, '',
           '', 0, {now}, {now}, kept.tick
    FROM cursor,
         (SELECT tick FROM due ORDER BY tick DESC LIMIT %(keep)s::int) AS kept
    WHERE %(late)s::float8 IS NULL OR kept.tick >= {now_plus(-%(late)s::float8)}
    ORDER BY kept.tick
    ON CONFLICT (name, scheduled_for) WHERE scheduled_for IS NOT NULL DO NOTHING
    RETURNING id, scheduled_for, queue
),
notified AS (
    SELECT count(pg_notify('django_ultjobs', q.queue)) AS n
    FROM (SELECT DISTINCT queue FROM ins) AS q
)
SELECT ins.id, ins.scheduled_for, {now}, COALESCE(cursor.last_tick, prev.last_tick, s.last_tick),
       s.paused
FROM (SELECT 1) AS one
LEFT JOIN django_ultjobs_jobschedule AS s ON s.name = %(name)s::text
LEFT JOIN prev ON true
LEFT JOIN cursor ON true
LEFT JOIN ins ON true
CROSS JOIN notified
ORDER BY ins.scheduled_for;

-- name: gauge_queues
-- Per queue, its runnable jobs (those a claim may take now) and how many seconds the oldest of
-- them has been due, for the queue gauges, run by one worker of the fleet at a time, once a
-- GAUGE_INTERVAL (rule 71 (gauges-one-reader)). Per live status a range of the live index
-- stopped at :limit, and its first entry (rule 120 (bounded-live-stats)): the work is bounded
-- whatever the backlog, and a queue's depth is at most three times :limit. Each range states
-- the live index's "j.name > ''" (see live_stats).
{fragment:live_queues}
SELECT t.queue, sum(t.due), EXTRACT(EPOCH FROM ({now} - min(t.oldest)))::float8
FROM (SELECT q.queue,
             (SELECT count(*) FROM (SELECT 1 FROM django_ultjobs_job AS j
                  WHERE j.queue = q.queue AND j.status = s.status
                    AND j.status IN ('queued', 'running', 'waiting') AND j.name > ''
                    AND j.visible_at <= {now}
                  LIMIT %(limit)s) AS d) AS due,
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
  AND queue = ANY(%(queues)s::text[]);

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
-- Per queue and live status (docs/deployment.md, the stats view): the jobs due now of a kind
-- not held back (:blocked: a full cap or a spent rate limit), those of a held-back kind, the
-- jobs due later, the due time of the longest-due one, whether the queue is paused, the clock,
-- and (on the queued row alone) the queue's pending jobs. Each count is a range of the live index
-- (ultjobs_job_live, the name carried in it) or of the pending index, stopped at :limit, so the
-- work is bounded whatever the backlog (rule 120 (bounded-live-stats)). The free count skips
-- held-back entries rather than stopping at them, or a backlog of held-back jobs would hide the
-- free ones due after it. Every range of the live index states "j.name > ''" (true of every
-- job), the live index's own predicate: no claim states it, so a planner without statistics can
-- never take the live index for a claim.
{fragment:live_queues}
SELECT q.queue, s.status,
       (SELECT count(*) FROM (SELECT 1 FROM django_ultjobs_job AS j
            WHERE j.queue = q.queue AND j.status = s.status
              AND j.status IN ('queued', 'running', 'waiting') AND j.name > ''
              AND j.visible_at <= {now}
              AND j.name <> ALL(%(blocked)s::text[])
            LIMIT %(limit)s) AS d),
       (SELECT count(*) FROM (SELECT 1 FROM django_ultjobs_job AS j
            WHERE cardinality(%(blocked)s::text[]) > 0
              AND j.queue = q.queue AND j.status = s.status
              AND j.status IN ('queued', 'running', 'waiting') AND j.name > ''
              AND j.visible_at <= {now}
              AND j.name = ANY(%(blocked)s::text[])
            LIMIT %(limit)s) AS h),
       (SELECT count(*) FROM (SELECT 1 FROM django_ultjobs_job AS j
            WHERE j.queue = q.queue AND j.status = s.status
              AND j.status IN ('queued', 'running', 'waiting') AND j.name > ''
              AND j.visible_at > {now}
            LIMIT %(limit)s) AS c),
       (SELECT j.visible_at FROM django_ultjobs_job AS j
            WHERE j.queue = q.queue AND j.status = s.status
              AND j.status IN ('queued', 'running', 'waiting') AND j.name > ''
              AND j.visible_at <= {now}
            ORDER BY j.visible_at LIMIT 1),
       EXISTS (SELECT 1 FROM django_ultjobs_queuepause AS p WHERE p.queue = q.queue),
       {now},
       (SELECT count(*) FROM (SELECT 1 FROM django_ultjobs_job AS j
            WHERE s.status = 'queued' AND j.queue = q.queue AND j.status = 'pending'
            LIMIT %(limit)s) AS w)
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
            WHERE j.queue = f.queue AND j.status = 'failed' AND j.finished_at >= {now_plus(-%(seconds)s::float8)}
            LIMIT %(limit)s) AS c)
FROM found AS f
WHERE f.queue IS NOT NULL;

-- name: live_first
-- The live job of :queue and :status due longest ago, and the clock, for the admin summary's
-- oldest runnable job: the first entry of that range of the live index
-- (rule 120 (bounded-live-stats)). Its predicate is written out as constants: SQLite uses a
-- partial index only for a query whose own terms state its predicate.
SELECT j.id, j.name, j.visible_at, {now}
FROM django_ultjobs_job AS j
WHERE j.queue = %(queue)s::text AND j.status = %(status)s::text
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
                  WHERE j.name = n.name AND j.status = s.status LIMIT %(limit)s) AS c) AS n
      FROM names AS n
      CROSS JOIN (SELECT 'succeeded' AS status UNION ALL SELECT 'failed'
                  UNION ALL SELECT 'cancelled') AS s
      WHERE n.name IS NOT NULL) AS t
GROUP BY t.status;

-- name: live_blocking
-- What holds runnable jobs back, for the stats view: the fleet slots held per key, and the
-- rate-limit buckets whose budget is spent now (held -1): both tables hold a row per key in use.
SELECT key, count(*) FROM django_ultjobs_slot WHERE expires_at > {now} GROUP BY key
UNION ALL
SELECT key, -1 FROM django_ultjobs_ratelimitbucket
WHERE tat - tolerance > (EXTRACT(EPOCH FROM {now}) * 1000000)::bigint;

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

-- name: prune_batch
-- One batch of the prune: up to :limit jobs that finished before :cutoff and not before :after
-- (the last batch's newest finish; NULL at the first), oldest first (the finished-jobs index's
-- range, which starts past the entries of the rows the batches before deleted instead of walking
-- them again), deleted with their attempts and steps in ONE statement; answers how many jobs, how
-- many attempts their rows held (rule 97 (attempt-on-row)), attempt rows and steps, and the
-- batch's newest finish. A row another transaction holds (a retry, a unique key's release) is
-- skipped, not waited for; queued, running and waiting rows are never in the range, so no claim,
-- heartbeat or settle waits on the prune.
WITH batch AS (
    SELECT id, finished_at FROM django_ultjobs_job
    WHERE status IN ('succeeded', 'failed', 'cancelled') AND finished_at < %(cutoff)s
      AND finished_at >= COALESCE(%(after)s::timestamptz, '-infinity')
    ORDER BY finished_at LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), attempts AS (
    DELETE FROM django_ultjobs_jobattempt WHERE job_id IN (SELECT id FROM batch) RETURNING 1
), steps AS (
    DELETE FROM django_ultjobs_jobstep WHERE job_id IN (SELECT id FROM batch) RETURNING 1
), jobs AS (
    DELETE FROM django_ultjobs_job WHERE id IN (SELECT id FROM batch) RETURNING attempt_on_row
)
SELECT (SELECT count(*) FROM jobs), (SELECT count(*) FROM jobs WHERE attempt_on_row),
       (SELECT count(*) FROM attempts), (SELECT count(*) FROM steps),
       (SELECT max(finished_at) FROM batch);

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
              AND j.visible_at <= {now} AND j.name = %(name)s::text
            ORDER BY j.visible_at LIMIT 1)
FROM queues AS q
CROSS JOIN (SELECT 'queued' AS status UNION ALL SELECT 'running' UNION ALL SELECT 'waiting') AS s
WHERE EXISTS (SELECT 1 FROM django_ultjobs_job AS k
              WHERE k.name = %(name)s::text AND k.status IN ('queued', 'running', 'waiting'));

-- name: nodes_link
-- Make just-enqueued jobs (same transaction) workflow nodes, batch members or batch callbacks
-- (docs/workflows.md): their group, the edges on both ends (depends_on, dependents: JSON text),
-- their counters' total, their condition, whether their finish releases others, 'pending' for
-- those that wait (rule 110 (released-in-settle)), and the wait key their finish notifies
-- (rule 116 (wait-for-result)). One primary-key probe per job: the ids are given again as an
-- array, or the join of a batch estimated at a hundred rows could read the whole table.
UPDATE django_ultjobs_job AS j
SET status = CASE WHEN n.pending THEN 'pending' ELSE j.status END,
    deps_total = n.total, depends_when = n.condition, has_dependents = n.has_dependents,
    workflow_id = n.workflow_id, batch_id = n.batch_id, callback_of_id = n.callback_of,
    depends_on = n.depends_on::jsonb, dependents = n.dependents::jsonb,
    wait_key = COALESCE('b' || COALESCE(n.batch_id, n.callback_of), 'w' || n.workflow_id)
FROM unnest(%(ids)s::bigint[], %(pending)s::boolean[], %(totals)s::int[], %(whens)s::text[],
            %(has_dependents)s::boolean[], %(workflows)s::bigint[], %(batches)s::bigint[],
            %(callbacks)s::bigint[], %(depends_on)s::text[], %(dependents)s::text[])
    AS n(id, pending, total, condition, has_dependents, workflow_id, batch_id, callback_of,
         depends_on, dependents)
WHERE j.id = n.id AND j.id = ANY (%(ids)s::bigint[]);
