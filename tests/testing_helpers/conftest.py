# The fixture, as a project's conftest.py below its root takes it (pytest_plugins is for the
# root conftest.py only).
from django_ultjobs.testing import ultjobs  # noqa: F401
