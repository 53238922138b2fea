pytest_plugins = ["django_ultjobs.testing"]
