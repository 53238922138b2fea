"""Settings: read once, read again after every change, never kept from a read a change crossed."""

from __future__ import annotations

import pytest
from django.test.utils import override_settings

from django_ultjobs import JobConfigurationError, conf


def test_settings_are_read_again_after_override_settings() -> None:
    assert conf.get_settings() is conf.get_settings()  # cached between changes
    with override_settings(ULTJOBS={"DATABASE": "postgres", "POLL_INTERVAL": 0.5}):
        assert (conf.get_settings().DATABASE, conf.get_settings().POLL_INTERVAL) == (
            "postgres", 0.5)
    assert conf.get_settings().POLL_INTERVAL == 1.0


def test_unknown_keys_are_refused_on_every_read() -> None:
    with override_settings(ULTJOBS={"DATABSE": "postgres"}), \
            pytest.raises(JobConfigurationError, match="unknown keys"):
        conf.get_settings()
    with override_settings(ULTJOBS={"DATABSE": "postgres"}), \
            pytest.raises(JobConfigurationError, match="unknown keys"):
        conf.get_settings()  # an error is never cached as settings


def test_a_read_that_a_change_crossed_is_not_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """A thread reads the overridden settings while another thread ends the override: what it
    read was current when it read it, but must not stay cached after the change."""
    override = override_settings(ULTJOBS={"DATABASE": "postgres"})
    override.enable()
    read = conf._read_settings

    def read_while_the_override_ends() -> conf.UltJobsSettings:
        value = read()
        override.disable()  # settings back to the test settings, setting_changed sent
        return value

    monkeypatch.setattr(conf, "_read_settings", read_while_the_override_ends)
    try:
        assert conf.get_settings().DATABASE == "postgres"
    finally:
        if conf.settings.ULTJOBS.get("DATABASE") == "postgres":
            override.disable()
    monkeypatch.setattr(conf, "_read_settings", read)
    assert conf.get_settings().DATABASE == "default"
