"""django_ultjobs against PgQueuer, Procrastinate, django-tasks-db (one PostgreSQL) and Celery
(Redis), in one run.

    pip install -e '.[bench-peers]'        # the peers, in a virtualenv of their own
    python -m benchmarks.peers             # 20-25 minutes on a 2-core machine

One module per system (``ours``, ``peer_pgqueuer``, ``peer_procrastinate``,
``peer_django_tasks_db``, ``peer_celery``), each run in a child process of its own on a fresh
database named ``ultjobs_peers_*`` that it drops afterwards; ``__main__`` runs them in turn and
prints the tables. ``workloads`` adds the I/O-bound and Django-shaped drains and Celery's pools;
``targets`` judges the report's targets. ``fleet`` measures 1, 4 and 16 of our worker processes
against one database (docs/deployment.md).
"""
