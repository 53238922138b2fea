"""The stats view (``/jobs/stats/``), on both engines: its figures, its bounded work and who may
read it (rule 120 (bounded-live-stats))."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.db import connections, transaction
from django.test import Client
from django.test.utils import CaptureQueriesContext, override_settings
from django.utils import timezone

from django_ultjobs import queue_stats
from django_ultjobs.checks import check_settings
from django_ultjobs.core.slot_keys import slot_key_for
from django_ultjobs.models import Job, QueuePause, RateLimitBucket, Slot, Worker
from django_ultjobs.queue_stats import stats
from django_ultjobs.store import get_store

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

URL = "/jobs/stats/"
TOKEN = "s3cret-token-for-the-autoscaler"


@pytest.fixture
def jobs_in(alias: str) -> Iterator[str]:
    """ULTJOBS pointed at ``alias``, with a stats token."""
    with override_settings(ULTJOBS={"DATABASE": alias, "STATS_TOKEN": TOKEN}):
        yield alias


def add(alias: str, n: int = 1, *, due_in: float = -60.0, status: str = "queued",
        name: str = "add", queue: str = "default") -> None:
    """Write ``n`` live rows due ``due_in`` seconds from now (negative: due already)."""
    visible = get_store(alias).db_now() + timedelta(seconds=due_in)
    Job.objects.using(alias).bulk_create(
        Job(name=name, queue=queue, status=status, visible_at=visible) for _ in range(n))


def test_each_figure_counts_its_own_jobs(jobs_in: str) -> None:
    """Runnable, scheduled, running, held back, waiting, oldest age, paused.

    Rule 120 (bounded-live-stats)."""
    alias = jobs_in
    add(alias, 3)                                        # runnable
    add(alias, 1, status="running", due_in=-5)           # a lapsed lease: runnable again
    add(alias, 2, due_in=3600)                           # scheduled
    add(alias, 4, status="running", due_in=30)           # running
    add(alias, 1, status="waiting", due_in=600)          # waiting for an event
    add(alias, 2, name="serial", due_in=-3600)           # capped, its one slot held
    add(alias, 1, name="rated_clocked", due_in=-10)      # rate limit spent
    add(alias, 1, queue="other", due_in=-2)
    Job.objects.using(alias).create(name="add", status="succeeded")  # finished: no figure
    Slot.objects.using(alias).create(key=slot_key_for("serial"), slot=0, holder="w",
                                     expires_at=timezone.now() + timedelta(minutes=5))
    far = 10 ** 18  # microseconds: tat far ahead of any clock
    RateLimitBucket.objects.using(alias).create(key=slot_key_for("rated_clocked"), tat=far,
                                                interval=1, tolerance=0)
    QueuePause.objects.using(alias).create(queue="idle")
    figures = stats(alias)
    default = figures["queues"]["default"]
    age = default.pop("oldest_runnable_age")
    assert default == {"runnable": 4, "scheduled": 2, "running": 4, "waiting_on_limit": 3,
                       "waiting_event": 1, "pending": 0, "paused": False, "more_than": []}
    assert 3590 < age < 3700  # the held-back serial jobs are the longest due
    assert figures["queues"]["other"]["runnable"] == 1
    assert figures["queues"]["idle"] == {
        "runnable": 0, "scheduled": 0, "running": 0, "waiting_on_limit": 0, "waiting_event": 0,
        "pending": 0, "oldest_runnable_age": None, "paused": True, "more_than": []}
    assert figures["count_cap"] == queue_stats.COUNT_CAP


def test_pending_jobs_have_a_figure_and_list_their_queue(jobs_in: str,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Jobs waiting for their dependencies are counted apart, up to the cap, and a queue holding
    nothing else is listed.

    Rule 120 (bounded-live-stats)."""
    monkeypatch.setattr(queue_stats, "COUNT_CAP", 3)
    add(jobs_in, 2)
    add(jobs_in, 2, status="pending")
    add(jobs_in, 5, status="pending", queue="flows")
    queues = stats(jobs_in)["queues"]
    assert (queues["default"]["runnable"], queues["default"]["pending"]) == (2, 2)
    assert queues["flows"]["pending"] == 4 and queues["flows"]["more_than"] == ["pending"]
    assert queues["flows"]["runnable"] == queues["flows"]["scheduled"] == 0


def test_a_lapsed_slot_or_a_fresh_budget_holds_nothing_back(jobs_in: str) -> None:
    """Only a full cap or a spent budget counts a job as held back.

    Rule 120 (bounded-live-stats)."""
    alias = jobs_in
    add(alias, 2, name="serial")
    add(alias, 1, name="rated_clocked")
    Slot.objects.using(alias).create(key=slot_key_for("serial"), slot=0, holder="w",
                                     expires_at=timezone.now() - timedelta(minutes=5))
    RateLimitBucket.objects.using(alias).create(key=slot_key_for("rated_clocked"), tat=0,
                                                interval=1, tolerance=0)
    default = stats(alias)["queues"]["default"]
    assert (default["runnable"], default["waiting_on_limit"]) == (3, 0)


def test_counts_stop_at_the_cap_and_say_so(jobs_in: str,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the cap a figure is what the cap's window read, at least, and named in more_than.

    Rule 120 (bounded-live-stats)."""
    monkeypatch.setattr(queue_stats, "COUNT_CAP", 3)
    add(jobs_in, 5, due_in=-30)
    add(jobs_in, 2, name="serial", due_in=-60)       # the longest due: in the window first
    add(jobs_in, 2, status="running", due_in=-1)     # a window of its own, not full
    add(jobs_in, 9, due_in=60)
    add(jobs_in, 3, status="running", due_in=60)     # exactly the cap: exact
    Slot.objects.using(jobs_in).create(key=slot_key_for("serial"), slot=0, holder="w",
                                       expires_at=timezone.now() + timedelta(minutes=5))
    default = stats(jobs_in)["queues"]["default"]
    # The free queued window read 4 of 5 (a lower bound), plus 2 lapsed leases; the held-back
    # window read both serial jobs, all there are: exact.
    assert (default["runnable"], default["waiting_on_limit"]) == (6, 2)
    assert (default["scheduled"], default["running"]) == (4, 3)
    assert default["more_than"] == ["runnable", "scheduled"]


def test_a_fixed_number_of_queries_whatever_the_tables_hold(jobs_in: str) -> None:
    """The same statements for one queue as for many, few jobs or more.

    Rule 120 (bounded-live-stats)."""
    alias = jobs_in
    add(alias, 1)

    def statements() -> int:
        with CaptureQueriesContext(connections[alias]) as captured:
            stats(alias)
        return len(captured.captured_queries)

    few = statements()
    for q in range(6):
        add(alias, 20, queue=f"q{q}")
        add(alias, 5, queue=f"q{q}", due_in=60, name="serial")
    QueuePause.objects.using(alias).create(queue="q0")
    # Three statements; on PostgreSQL the counts run in a transaction of their own with the JIT
    # compiler off (BEGIN, the setting, COMMIT).
    assert statements() == few == (3 if connections[alias].vendor == "sqlite" else 6)


def test_each_count_reads_the_live_index(jobs_in: str) -> None:
    """The live counts are ranges of ultjobs_job_live, never the table, on a table
    where most rows are finished (as the planner sees it after ANALYZE).

    Rule 120 (bounded-live-stats)."""
    alias = jobs_in
    for q in ("default", "mail", "reports"):
        add(alias, 300, queue=q)
        add(alias, 100, queue=q, name="serial", due_in=60)
    Job.objects.using(alias).bulk_create(Job(name="add", status="succeeded") for _ in range(3000))
    store = get_store(alias)
    params = {"now": None, "limit": 10, "blocked": store.queues_param(["serial"])}
    with transaction.atomic(using=alias), store.cursor() as cur:
        cur.execute("ANALYZE")
        if connections[alias].vendor == "postgresql":
            # A table this small is cheaper read whole, or through any index at all: leave the
            # planner the live index alone and ask whether every count can be a range of it
            # (benchmarks.scale shows the plans it picks at a million rows).
            cur.execute("DROP INDEX ultjobs_job_claim_kind, ultjobs_job_name_status")
            cur.execute("SET LOCAL enable_seqscan = off")
            cur.execute("SET LOCAL enable_bitmapscan = off")
            cur.execute("EXPLAIN " + store.sql["live_stats"], params)
            plan = [row[0] for row in cur.fetchall()]
        else:
            cur.execute("EXPLAIN QUERY PLAN " + store.sql["live_stats"], params)
            plan = [str(row[-1]) for row in cur.fetchall()]
        transaction.set_rollback(True, using=alias)
    # PostgreSQL names the table, SQLite its alias in the statement (j).
    job_reads = [line for line in plan if re.search(r"(?i)\b(scan|search)\b", line)
                 and re.search(r"\b(django_ultjobs_job|j)\b( |$)", line)]
    assert job_reads and all("ultjobs_job_live" in line or "ultjobs_job_claim" in line
                             or "ultjobs_job_pending" in line for line in job_reads), \
        "\n".join(plan)
    assert sum("ultjobs_job_live" in line for line in job_reads) >= 3, "\n".join(plan)


def test_workers_alive_are_the_ones_heard_from_in_time(jobs_in: str) -> None:
    alias = jobs_in
    now = timezone.now()
    for wid, seen, stopped in (("a", now, None), ("b", now - timedelta(minutes=5), None),
                               ("c", now, now)):
        Worker.objects.using(alias).create(id=wid, hostname="h", pid=1, threads=1,
                                           last_seen_at=seen, stopped_at=stopped,
                                           visibility_timeout=30, queues=[f"served-by-{wid}"])
    figures = stats(alias)
    assert figures["workers_alive"] == 1
    # A queue a running worker serves, or a registered job names, is there with no job in it.
    assert figures["queues"]["served-by-a"]["runnable"] == 0
    assert "served-by-b" not in figures["queues"] and "served-by-c" not in figures["queues"]
    assert figures["queues"]["default"]["runnable"] == 0


# -- who may read it ---------------------------------------------------------------------------


def _staff(username: str, *codenames: str, is_staff: bool = True) -> Client:
    user = User.objects.create_user(username, password="pw", is_staff=is_staff)
    user.user_permissions.set(Permission.objects.filter(
        content_type__app_label="django_ultjobs", codename__in=codenames))
    client = Client()
    client.force_login(user)
    return client


def _get(client: Client, **headers: Any) -> tuple[int, dict[str, Any]]:
    response = client.get(URL, headers=headers)
    return response.status_code, response.json()


def test_a_staff_session_with_the_view_permission_reads_it(jobs_in: str) -> None:
    add(jobs_in, 2)
    status, body = _get(_staff("viewer", "view_job"))
    assert status == 200 and body["queues"]["default"]["runnable"] == 2
    assert _get(_staff("operator", "change_job"))[0] == 200


@pytest.mark.parametrize("who", ["anonymous", "staff without the permission",
                                 "not staff, with the permission"])
def test_anyone_else_gets_403_and_no_figure(jobs_in: str, who: str) -> None:
    add(jobs_in, 2)
    client = {"anonymous": Client,
              "staff without the permission": lambda: _staff("s"),
              "not staff, with the permission": lambda: _staff("u", "view_job",
                                                               is_staff=False)}[who]()
    status, body = _get(client)
    assert (status, body) == (403, {"error": "forbidden"})


@pytest.mark.parametrize("header", [f"Bearer {TOKEN}", f"bearer {TOKEN}", f"Bearer  {TOKEN} "])
def test_the_token_reads_it(jobs_in: str, header: str) -> None:
    add(jobs_in, 1)
    status, body = _get(Client(), Authorization=header)
    assert status == 200 and body["queues"]["default"]["runnable"] == 1


@pytest.mark.parametrize("header", [f"Bearer {TOKEN}x", f"Bearer {TOKEN[:-1]}", TOKEN,
                                    f"Basic {TOKEN}", "Bearer ", "Bearer \u00e9t\u00e9"])
def test_a_wrong_token_gets_403(jobs_in: str, header: str) -> None:
    assert _get(Client(), Authorization=header) == (403, {"error": "forbidden"})


def test_no_token_is_accepted_when_none_is_set(alias: str) -> None:
    with override_settings(ULTJOBS={"DATABASE": alias}):
        assert _get(Client(), Authorization="Bearer None")[0] == 403
        assert _get(Client(), Authorization="Bearer ")[0] == 403


def test_only_get_and_head(jobs_in: str) -> None:
    client = Client(headers={"Authorization": f"Bearer {TOKEN}"})
    assert client.post(URL).status_code == 405
    assert client.head(URL).status_code == 200
    assert "no-cache" in client.get(URL)["Cache-Control"]


# -- the setting ----------------------------------------------------------------------------------


@pytest.mark.parametrize("token", [12345, b"bytes-token-of-enough-length", "short",
                                   " padded-token-with-a-space ", ["a" * 20]])
def test_a_bad_stats_token_is_a_check_error(token: object) -> None:
    with override_settings(ULTJOBS={"STATS_TOKEN": token}):
        errors = [m for m in check_settings() if m.id == "django_ultjobs.E060"]
    assert len(errors) == 1
    assert "STATS_TOKEN" in errors[0].msg
    if isinstance(token, str):
        assert token.strip() not in errors[0].msg  # never echoes the secret


@pytest.mark.parametrize("token", [None, TOKEN])
def test_a_good_stats_token_passes_the_check(token: object) -> None:
    with override_settings(ULTJOBS={"STATS_TOKEN": token}):
        assert not [m for m in check_settings() if m.id == "django_ultjobs.E060"]


@pytest.mark.django_db(transaction=True, databases="__all__")
def test_free_jobs_due_after_a_full_window_of_held_back_ones_are_counted(
        alias: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rule 120 (bounded-live-stats): more held-back jobs due first than the cap never hide
    the free ones due after them (an autoscaler would read 0 and scale the workers away)."""
    monkeypatch.setattr(queue_stats, "COUNT_CAP", 3)
    now = get_store(alias).db_now()
    Job.objects.using(alias).bulk_create(
        [Job(name="serial", queue="default", status="queued",
             visible_at=now - timedelta(hours=1)) for _ in range(4)]
        + [Job(name="add", queue="default", status="queued",
               visible_at=now - timedelta(seconds=30)) for _ in range(2)])
    Slot.objects.using(alias).create(key=slot_key_for("serial"), slot=0, holder="w",
                                     expires_at=timezone.now() + timedelta(minutes=5))
    with override_settings(ULTJOBS={"DATABASE": alias}):
        default = stats(alias)["queues"]["default"]
    assert default["runnable"] == 2, default
    assert default["waiting_on_limit"] == 4, default
    assert default["more_than"] == ["waiting_on_limit"], default


@pytest.mark.django_db(transaction=True, databases="__all__")
def test_a_window_of_free_jobs_alone_marks_only_runnable_as_a_lower_bound(
        alias: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(queue_stats, "COUNT_CAP", 3)
    now = get_store(alias).db_now()
    Job.objects.using(alias).bulk_create(
        [Job(name="add", queue="default", status="queued", visible_at=now - timedelta(seconds=30))
         for _ in range(5)])
    with override_settings(ULTJOBS={"DATABASE": alias}):
        default = stats(alias)["queues"]["default"]
    assert (default["runnable"], default["waiting_on_limit"]) == (4, 0), default
    assert default["more_than"] == ["runnable"], default


class _Explaining:
    """A store cursor that plans each statement instead of running it, and returns no rows."""

    def __init__(self, cur: Any, prefix: str, plans: list[str]) -> None:
        self.cur, self.prefix, self.plans = cur, prefix, plans

    def execute(self, sql: str, params: Any = None, **_: Any) -> None:
        self.cur.execute(self.prefix + sql, params)
        self.plans.extend(str(row[-1]) for row in self.cur.fetchall())

    def fetchall(self) -> list[Any]:
        return []

    def fetchone(self) -> None:
        return None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.cur, name)


@pytest.mark.parametrize("caps", [{}, {"serial": 1}], ids=["uncapped", "capped"])
def test_no_claim_can_take_the_live_index(jobs_in: str, caps: dict[str, int],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """With no statistics the planner costs the live index's (queue, status, due) range below
    the claim index's, and took it for every claim, sorting the queue's whole backlog each time
    (a drain of 50,000 jobs ran at a quarter of its speed). The live index's predicate holds a
    term no claim states, so no claim can use it: with the claim indexes gone, the claims'
    plans still never name it.

    Rule 120 (bounded-live-stats)."""
    alias = jobs_in
    add(alias, 300)
    add(alias, 50, name="serial")
    store = get_store(alias)
    postgres = connections[alias].vendor == "postgresql"
    plans: list[str] = []
    with transaction.atomic(using=alias):
        with store.cursor() as cur:
            cur.execute("DROP INDEX ultjobs_job_claim")
            cur.execute("DROP INDEX ultjobs_job_claim_kind")
            if postgres:
                cur.execute("SET LOCAL enable_seqscan = off")
                cur.execute("SET LOCAL enable_bitmapscan = off")
        real = store.cursor

        @contextmanager
        def explaining() -> Iterator[_Explaining]:
            with real() as cur:
                yield _Explaining(cur, "EXPLAIN " if postgres else "EXPLAIN QUERY PLAN ", plans)

        monkeypatch.setattr(store, "cursor", explaining)
        store.claim(worker_id="w", queues=["default"], limit=10, visibility_timeout=30,
                    caps=caps)
        monkeypatch.undo()
        transaction.set_rollback(True, using=alias)
    assert plans
    assert not [line for line in plans if "ultjobs_job_live" in line], "\n".join(plans)
