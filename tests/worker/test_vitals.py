"""The probes' judgments on a clock the test moves, the flags refused by name, and the health
server of an in-process worker stopping with it (rules 121 (probe-alive) to 123 (probes-only)).
``tests/operating/test_health_probes.py`` proves the same on real processes and real locks."""

from __future__ import annotations

import http.client
import threading

import pytest
from django.db import OperationalError

from django_ultjobs.exceptions import JobConfigurationError
from django_ultjobs.worker.health import HealthServer
from django_ultjobs.worker.options import WorkerOptions
from django_ultjobs.worker.vitals import Vitals, outage_backoff
from tests.conftest import running_worker


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def started(clock: Clock) -> Vitals:
    vitals = Vitals(heartbeat_interval=10.0, clock=clock)
    vitals.registered()
    vitals.claim_round(1.0)
    return vitals


def ready(vitals: Vitals) -> str | None:
    return vitals.not_ready(started=True, stopping=False)


def test_a_starting_worker_is_alive_and_not_ready() -> None:
    vitals = Vitals(heartbeat_interval=10.0, clock=Clock())
    assert vitals.not_alive() is None
    assert vitals.not_ready(started=False, stopping=False) == \
        "starting: the worker is not registered yet"


def test_a_claim_round_overdue_past_its_wait_and_a_heartbeat_interval() -> None:
    clock = Clock()
    vitals = started(clock)
    vitals.beat()
    clock.now += 11.0
    vitals.beat()
    assert vitals.not_alive() is None  # 1 s wait + 10 s slack: not yet
    clock.now += 0.5
    assert vitals.not_alive() == "claim loop: no round for 11.5 s (bound 11.0 s)"
    assert ready(vitals) == vitals.not_alive()
    vitals.claim_round(outage_backoff(9))  # after failed claims the wait is the backoff
    clock.now += 39.0
    vitals.beat()
    assert vitals.not_alive() is None
    vitals.claims_done()  # a drain's claim loop is not judged
    clock.now += 100.0
    vitals.beat()
    assert vitals.not_alive() is None
    assert ready(vitals) == "draining: the worker is stopping"


def test_a_heartbeat_silent_past_three_intervals() -> None:
    clock = Clock()
    vitals = started(clock)
    clock.now += 30.0
    vitals.claim_round(1.0)
    assert vitals.not_alive() is None
    clock.now += 1.2
    vitals.claim_round(1.0)
    assert vitals.not_alive() == "heartbeat: no beat for 31.2 s (bound 30.0 s)"


def test_readiness_follows_the_heartbeats_answers() -> None:
    clock = Clock()
    vitals = started(clock)
    assert ready(vitals) is None
    clock.now += 2.0
    vitals.beat(OperationalError("server closed the connection\n unexpectedly"))
    clock.now += 1.5
    vitals.claim_round(1.0)
    # A failed beat is still a beat: not ready, but alive.
    assert vitals.not_alive() is None
    assert ready(vitals) == ("database: the heartbeat failed 1.5 s ago: OperationalError: "
                             "server closed the connection unexpectedly")
    vitals.beat()
    assert ready(vitals) is None
    # No answer at all (a beat still in its statement): unready past two intervals.
    clock.now += 20.5
    vitals.claim_round(1.0)
    assert ready(vitals) == "database: no answer for 20.5 s (bound 20.0 s)"
    assert vitals.not_ready(started=True, stopping=True) == "draining: the worker is stopping"


@pytest.mark.parametrize(("flags", "message"), [
    ({"health_port": 65536}, "--health-port must be a port number from 1 to 65535"),
    ({"health_port": -1}, "--health-port must be a port number"),
    ({"health_port": True}, "--health-port must be a port number"),
    ({"health_port": 0, "health_host": " "}, "--health-host must be an address to listen on"),
])
def test_bad_health_flags_are_refused_by_name(flags: dict, message: str) -> None:
    with pytest.raises(JobConfigurationError, match=message):
        WorkerOptions(**flags)


@pytest.mark.django_db(transaction=True, databases="__all__")
def test_the_server_stops_with_the_worker(alias: str) -> None:
    """rule 13 (nothing-leaks): no thread of the server left, its port closed."""
    before = set(threading.enumerate())
    with running_worker(alias, health_port=0) as worker:
        (server,) = [t for t in threading.enumerate() if t.name == "ultjobs-health"]
        assert worker.health is not None
        port = worker.health.port
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        conn.request("GET", "/readyz")
        assert conn.getresponse().status == 200
        conn.close()
    assert not server.is_alive()
    assert not {t for t in threading.enumerate() if t.name == "ultjobs-health"} - before
    with pytest.raises(ConnectionRefusedError):
        http.client.HTTPConnection("127.0.0.1", port, timeout=5).request("GET", "/livez")


def test_an_address_not_of_this_machine_is_refused_by_its_flag() -> None:
    """rule 123 (probes-only): 192.0.2.1 is a documentation address, never assigned."""
    with pytest.raises(JobConfigurationError, match=r"^--health-host '192\.0\.2\.1': cannot "
                       r"listen there \(.+\); give an address of this machine"):
        HealthServer({"/livez": lambda: None}, host="192.0.2.1", port=0, worker_id="w")
