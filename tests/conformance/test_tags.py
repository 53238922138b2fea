"""Rule 78 (tags-stored-whole): tags given at enqueue are stored by every enqueue statement,
searched on both engines, and bad tags are refused before any SQL, naming the option."""

from __future__ import annotations

import io
import json
import re
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connections
from django.test.utils import CaptureQueriesContext

from django_ultjobs import JobOptionError, bulk_enqueue
from django_ultjobs.core.tags import MAX_TAG, MAX_TAGS, tagged
from django_ultjobs.models import Job
from tests.testapp.jobs import add, counted, unique_touch

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__",
                                    available_apps=["django_ultjobs", "tests.testapp"])


def stored(alias: str, job_id: int) -> list[str]:
    return Job.objects.using(alias).get(id=job_id).tags


def test_every_enqueue_statement_writes_the_tags(alias: str, settings: Any) -> None:
    settings.ULTJOBS = {**getattr(settings, "ULTJOBS", {}), "DATABASE": alias}
    one = add.using(tags=["customer:42"]).enqueue(1, 2)              # enqueue / enqueue_one
    keyed = unique_touch.using(tags=["k"]).enqueue("a")              # enqueue_unique(_one)
    ids = bulk_enqueue([add.using(tags=["b1"]).call(1, 1), add.call(2, 2)])      # enqueue
    keyed_ids = bulk_enqueue([unique_touch.using(tags=["u1"]).call("b"),
                              unique_touch.using(tags=["u2"]).call("c")])  # enqueue_unique
    untagged = add.enqueue(3, 4)
    assert one.tags == ["customer:42"] and keyed.tags == ["k"]      # the returned rows
    assert stored(alias, one.id) == ["customer:42"] and stored(alias, keyed.id) == ["k"]
    assert [stored(alias, i) for i in ids] == [["b1"], []]
    assert [stored(alias, i) for i in keyed_ids] == [["u1"], ["u2"]]
    assert untagged.tags == [] and stored(alias, untagged.id) == []


def test_job_tags_are_merged_with_those_of_one_enqueue(alias: str, settings: Any) -> None:
    settings.ULTJOBS = {**getattr(settings, "ULTJOBS", {}), "DATABASE": alias}
    job = counted.using(tags=["customer:7", "testapp"]).enqueue(1)
    assert stored(alias, job.id) == ["testapp", "progress", "customer:7"]


def test_tagged_finds_the_jobs_carrying_a_tag(alias: str, settings: Any) -> None:
    settings.ULTJOBS = {**getattr(settings, "ULTJOBS", {}), "DATABASE": alias}
    a = add.using(tags=["customer:42", "x"]).enqueue(1, 1)
    add.using(tags=["customer:420"]).enqueue(1, 1)
    add.enqueue(1, 1)
    jobs = Job.objects.using(alias)
    assert list(tagged(jobs, "customer:42").values_list("id", flat=True)) == [a.id]
    assert not tagged(jobs, "customer").exists()  # whole tags, not substrings


BAD_TAGS: list[tuple[Any, str]] = [
    ("customer:42", "tags must be a list of strings"),
    ([42], "tags must hold only strings"),
    (["a\x00b"], "a tag cannot contain a NUL character"),
    (["a\udfffb"], "a tag cannot contain a lone surrogate"),
    (["x" * (MAX_TAG + 1)], f"each tag must be 1 to {MAX_TAG} characters"),
    ([""], f"each tag must be 1 to {MAX_TAG} characters"),
    ([str(i) for i in range(MAX_TAGS + 1)], f"tags must be at most {MAX_TAGS} strings"),
]


@pytest.mark.parametrize(("tags", "message"), BAD_TAGS, ids=[m for _, m in BAD_TAGS])
def test_bad_tags_are_refused_before_any_sql(alias: str, settings: Any, tags: Any,
                                             message: str) -> None:
    settings.ULTJOBS = {**getattr(settings, "ULTJOBS", {}), "DATABASE": alias}
    with (CaptureQueriesContext(connections[alias]) as queries,
          pytest.raises(JobOptionError, match=re.escape(f"job 'add': {message}"))):
        add.using(tags=tags).enqueue(1, 2)
    assert len(queries) == 0
    assert not Job.objects.using(alias).exists()


def test_ultjobs_list_tag(alias: str) -> None:
    a = Job.objects.using(alias).create(name="add", tags=["customer:42", "eu"])
    b = Job.objects.using(alias).create(name="add", tags=["customer:42"])
    Job.objects.using(alias).create(name="add")

    def listed(*args: str) -> list[int]:
        out = io.StringIO()
        call_command("ultjobs", "list", "--json", "--database", alias, *args, stdout=out)
        return [row["id"] for row in json.loads(out.getvalue())]

    assert listed("--tag", "customer:42") == [b.id, a.id]
    assert listed("--tag", "customer:42", "--tag", "eu") == [a.id]
    assert listed("--tag", "nope") == []
