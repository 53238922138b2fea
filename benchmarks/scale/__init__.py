"""The job queue at scale: tables of millions of finished jobs, and what does not keep up.

    python -m benchmarks.scale [--rows 10000000] [--queued 1000000] [--prune-rows 1000000]
                               [--cycles 5] [--sqlite-queued 300000] [--pairs 3]
                               [--quick] [--keep] [--reuse] [--prune-args '--pause 0']
                               [--prune-drains noop,io-sync]
                               [--json out.json] [--plans plans.txt]

``--quick`` is a few-minute version (a tenth of every size, one pair); ``--rows`` scales the
history alone. Export ``ULTJOBS_TEST_DB_SUFFIX`` first: the databases are
``ultjobs_peers_scale_empty<suffix>`` and ``ultjobs_peers_scale_hist<suffix>`` on the peer
benchmark's server (127.0.0.1:5432), both dropped at the end unless ``--keep``; ``--reuse``
takes the ones a ``--keep`` run left (HIST topped up to ``--rows`` finished jobs, live jobs
cleared), so an experiment does not fill ten million rows again.

Two databases side by side: EMPTY, and HIST holding ``--rows`` finished jobs (succeeded,
failed, cancelled, spread over 30 days, with their attempts stored as the workers store them:
``benchmarks.scale.fill``), each table filled by one ``INSERT … SELECT generate_series``. The
measurements alternate between the two in pairs, so drift on a shared machine falls on both:

1. the no-op and ``io-sync`` drains (the peer benchmark's drain code), idle pickup p50/p99 and
   one ``enqueue()`` with its commit and inside a transaction;
2. with ``--queued`` live jobs added to both (and a backlog of a tenth of it before ANALYZE,
   as a new site meets it): the admin's app index, jobs list (unfiltered, by status, by name),
   a job's page and the workers page as a logged-in superuser (Django's test client), the
   ``ultjobs stats`` and ``ultjobs list`` commands, and the stats view (its bearer token);
   the slowest statements of each explained (``EXPLAIN (ANALYZE, BUFFERS)``, in ``--plans``);
3. ``prunejobs`` of the ``--prune-rows`` oldest finished jobs in HIST, started 6 s into one long
   drain, once beside each of ``--prune-drains`` (no-op, then ``io-sync``; HIST topped up
   between them): its time, the write-ahead log it wrote, the waits of every backend
   (``benchmarks.scale.locks``), the drain's jobs/s beside it against the same seconds of a
   drain alone (per second, from the jobs' finish times); then ``--cycles`` fill-and-prune
   cycles with the table and index sizes after each (VACUUM between them, as autovacuum would:
   this server runs with it off);
4. the same admin pages and the stats view on SQLite at ``--sqlite-queued`` queued jobs.

Each figure is printed against its target (met or missed), the targets gathered at the end.
Not a test: the full run takes about 45 minutes on two shared cores, most of it writing and
pruning rows; ``--quick`` about 3.
"""
