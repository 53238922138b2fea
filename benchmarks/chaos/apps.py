from django.apps import AppConfig


class ChaosConfig(AppConfig):
    name = "benchmarks.chaos"
    label = "ultjobs_chaos"
