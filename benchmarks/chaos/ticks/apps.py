from django.apps import AppConfig


class ChaosTicksConfig(AppConfig):
    name = "benchmarks.chaos.ticks"
    label = "ultjobs_chaos_ticks"
