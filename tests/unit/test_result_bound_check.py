"""``ULTJOBS["MAX_RESULT_BYTES"]`` is checked by ``manage.py check`` under ids of its own
(rule 31 (bounded-outcomes)): an unusable bound is an error, one past what PostgreSQL can store a
warning."""

from __future__ import annotations

import pytest
from django.test.utils import override_settings

from django_ultjobs.checks import check_settings


def _ids(limit: object) -> list[str]:
    """The ids ``check_settings`` reports about the result bound (not the other checks)."""
    with override_settings(ULTJOBS={"MAX_RESULT_BYTES": limit}):
        return [m.id for m in check_settings() if "MAX_RESULT_BYTES" in m.msg]


@pytest.mark.parametrize("limit", [0, -1, 1.5, "4MB", True, None])
def test_an_unusable_result_bound_is_e022(limit: object) -> None:  # rule 31 (bounded-outcomes)
    assert _ids(limit) == ["django_ultjobs.E022"]


def test_a_result_bound_past_postgresqls_limit_is_w022() -> None:  # rule 31 (bounded-outcomes)
    assert _ids(300 * 1024 * 1024) == ["django_ultjobs.W022"]


def test_a_sound_result_bound_passes() -> None:  # rule 31 (bounded-outcomes)
    assert _ids(4 * 1024 * 1024) == []
