"""``django_ultjobs.W045``: a ``unique_for`` that prunejobs would cut short
(rule 67 (unique-for-window))."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.test.utils import override_settings

from django_ultjobs import job
from django_ultjobs.checks import check_settings
from django_ultjobs.testing import unregister


@pytest.fixture
def weekly() -> Iterator[None]:
    job(name="t_weekly", unique_for=8 * 86400)(lambda: None)
    yield
    unregister("t_weekly")


def _w045() -> list[str]:
    return [m.msg for m in check_settings() if m.id == "django_ultjobs.W045"]


def test_a_window_longer_than_the_retention_is_warned_about(weekly: None) -> None:
    with override_settings(ULTJOBS={"RETENTION_DAYS": 7}):
        (message,) = _w045()
    assert "'t_weekly'" in message and "unique_for=691200 s" in message


def test_a_window_within_the_retention_or_no_retention_is_not(weekly: None) -> None:
    with override_settings(ULTJOBS={"RETENTION_DAYS": 14}):
        assert _w045() == []
    with override_settings(ULTJOBS={"RETENTION_DAYS": None}):
        assert _w045() == []
