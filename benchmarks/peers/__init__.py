"""django_ultjobs against PgQueuer, Procrastinate and django-tasks-db on one PostgreSQL, in one run.

    pip install -e '.[bench-peers]'        # the peers, in a virtualenv of their own
    python -m benchmarks.peers             # 7-10 minutes on a 2-core machine

One module per system (``ours``, ``peer_pgqueuer``, ``peer_procrastinate``,
``peer_django_tasks_db``), each run in a child process of its own on a fresh database named
``ultjobs_peers_*`` that it drops afterwards; ``__main__`` runs them in turn and prints the tables.
``fleet`` measures 1, 4 and 16 of our worker processes against one database (docs/deployment.md).
"""
