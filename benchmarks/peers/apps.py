from django.apps import AppConfig


class PeersBenchmarkConfig(AppConfig):
    """Only so ``django_ultjobs`` autodiscovers ``benchmarks/peers/jobs.py``; no models."""

    name = "benchmarks.peers"
    label = "ultjobs_bench_peers"
