"""Which dotted names a worker may import (rule 40 (project-imports-only)), and the settings of
unknown jobs (rule 12 (unknown-job-parked)), checked without a database."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.test.utils import override_settings

from django_ultjobs.checks import check_settings
from django_ultjobs.jobs.registry import get_job, importable
from django_ultjobs.testing import unregister


@pytest.mark.parametrize("name", [
    "tests.testapp.jobs.add",            # an installed app's module
    "tests.testapp.deep.module.thing",   # any depth inside an app's package
    "django.contrib.auth.models.User",   # a third-party installed app
])
# rule 40 (project-imports-only)
def test_names_inside_installed_apps_are_importable(name: str) -> None:
    assert importable(name)


@pytest.mark.parametrize("name", [
    "this.zen", "os.system", "subprocess.run", "builtins.eval",
    "tests.testapp_evil.x",      # a prefix of an app's name is not inside it
    "tests.x",                   # the parent of an app's package is not inside it
    "tests.testapp",             # an app's package itself names no job in it
    "plain", "", ".tests.testapp.jobs.add", "tests.testapp..add", "tests.testapp.jobs.a-b",
])
# rule 40 (project-imports-only)
def test_names_outside_the_apps_are_not_importable(name: str) -> None:
    assert not importable(name)


def test_job_modules_allows_more_modules() -> None:  # rule 40 (project-imports-only)
    with override_settings(ULTJOBS={"JOB_MODULES": ["myproject.tasks", "tools"]}):
        assert importable("myproject.tasks.send")
        assert importable("myproject.tasks.mail.send")
        assert importable("tools.cleanup")
        assert not importable("myproject.views.send")
        assert not importable("toolset.cleanup")
    with override_settings(ULTJOBS={"JOB_MODULES": "tools"}):  # a string, not a list: E021
        assert not importable("tools.cleanup")


@pytest.fixture
def probe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A module outside every app whose import leaves a file behind."""
    (tmp_path / "ultjobs_unit_probe.py").write_text(
        "from pathlib import Path\nPath(__file__).with_suffix('.imported').write_text('x')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path / "ultjobs_unit_probe.imported"
    sys.modules.pop("ultjobs_unit_probe", None)


# rule 40 (project-imports-only)
def test_get_job_imports_nothing_outside_the_apps(probe: Path) -> None:
    assert get_job("ultjobs_unit_probe.job") is None
    assert not probe.exists() and "ultjobs_unit_probe" not in sys.modules
    assert get_job("this.zen") is None and "this" not in sys.modules


# rule 40 (project-imports-only)
def test_get_job_imports_a_module_job_modules_lists(probe: Path) -> None:
    with override_settings(ULTJOBS={"JOB_MODULES": ["ultjobs_unit_probe"]}):
        assert get_job("ultjobs_unit_probe.job") is None  # imported, but no job there
    assert probe.exists()
    unregister("ultjobs_unit_probe.job")


def _ids(**ultjobs: object) -> list[str]:
    """The ids of the unknown-job checks ``check_settings`` reports (the others, about the test
    database, are not this file's)."""
    with override_settings(ULTJOBS=ultjobs):
        return [m.id for m in check_settings()
                if m.id in ("django_ultjobs.E020", "django_ultjobs.E021")]


# rule 12 (unknown-job-parked)
@pytest.mark.parametrize("value", [0, -1, float("nan"), float("inf"), "7d", True])
def test_a_bad_unknown_job_timeout_or_delay_is_e020(value: object) -> None:
    assert _ids(UNKNOWN_JOB_TIMEOUT=value) == ["django_ultjobs.E020"]
    assert _ids(UNKNOWN_JOB_DELAY=value) == ["django_ultjobs.E020"]


def test_sound_unknown_job_settings_pass() -> None:  # rule 12 (unknown-job-parked)
    assert _ids(UNKNOWN_JOB_TIMEOUT=None) == []  # park for ever
    assert _ids(UNKNOWN_JOB_TIMEOUT=3600, UNKNOWN_JOB_DELAY=0.5, JOB_MODULES=["a.b", "c"]) == []
    assert _ids(UNKNOWN_JOB_DELAY=None) == ["django_ultjobs.E020"]


@pytest.mark.parametrize("value", ["myproject.tasks", ["my project"], [1], ["a..b"], None])
def test_bad_job_modules_are_e021(value: object) -> None:  # rule 40 (project-imports-only)
    assert _ids(JOB_MODULES=value) == ["django_ultjobs.E021"]
