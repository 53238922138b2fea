import os

from django.apps import AppConfig


class BenchmarksConfig(AppConfig):
    name = "benchmarks"
    label = "ultjobs_benchmarks"

    def ready(self) -> None:
        # benchmarks.metrics_cost: a worker process that records metrics (an SDK meter provider
        # whose Prometheus reader nobody scrapes, as a site's worker between two scrapes) and
        # one that also runs a receiver of each run hook.
        if os.environ.get("BENCH_METRICS") == "1":
            from benchmarks.metrics_cost import configure_sdk

            configure_sdk()
        if os.environ.get("BENCH_HOOKS") == "1":
            from benchmarks.metrics_cost import connect_hooks

            connect_hooks()
