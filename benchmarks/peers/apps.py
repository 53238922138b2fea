from django.apps import AppConfig


class PeersBenchmarkConfig(AppConfig):
    """So ``django_ultjobs`` autodiscovers ``benchmarks/peers/jobs.py``; one model, the
    Django-shaped job's table (``models.PeersRecord``)."""

    name = "benchmarks.peers"
    label = "ultjobs_bench_peers"
