"""The per-run shortcuts of ``run_job`` give what the long way gives:
a body's ``None`` is stored as the encoder stores it, under the same size bound
(rule 31 (bounded-outcomes)), and a run without a tracer provider gets the invalid span without its
attributes being made."""

from __future__ import annotations

import pytest
from django.test.utils import override_settings
from opentelemetry.trace import INVALID_SPAN, ProxyTracerProvider

from django_ultjobs.core import jsonargs
from django_ultjobs.exceptions import JobResultTooLargeError
from django_ultjobs.observability import tracing
from django_ultjobs.observability.tracing import job_span_of, tracing_enabled
from django_ultjobs.worker.executor import check_result_size, result_as_json


def _the_long_way(result: object) -> str:
    jsonargs.check_result("j", result)
    result_json = jsonargs.dumps(result)
    check_result_size("j", result_json)
    return result_json


@pytest.mark.parametrize("result", [None, 0, "", [], {}, {"a": [1, None]}])
def test_a_result_is_stored_as_the_checker_and_encoder_store_it(result: object) -> None:
    assert result_as_json("j", result) == _the_long_way(result)


# rule 31 (bounded-outcomes)
@pytest.mark.parametrize("limit", [3, 4])
def test_none_is_held_to_the_result_bound_like_any_result(limit: int) -> None:
    with override_settings(ULTJOBS={"MAX_RESULT_BYTES": limit}):
        outcomes = []
        for way in (_the_long_way, lambda r: result_as_json("j", r)):
            try:
                outcomes.append(way(None))
            except JobResultTooLargeError as exc:
                outcomes.append(str(exc))
    assert outcomes[0] == outcomes[1]
    assert (outcomes[0] == "null") == (limit >= 4)


def test_a_result_that_is_not_json_still_fails_the_run() -> None:
    with pytest.raises(TypeError) as fast:
        result_as_json("j", {1, 2})
    with pytest.raises(TypeError) as slow:
        _the_long_way({1, 2})
    assert str(fast.value) == str(slow.value)
    check_result_size("j", "null")  # (the bound's default lets "null" through)


def test_without_a_tracer_provider_no_attributes_are_made(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # OpenTelemetry's provider is set once per process and an earlier test may have set one (the
    # tracing tests do): the API's answer before any is set stands in for it here.
    monkeypatch.setattr(tracing.trace, "get_tracer_provider", ProxyTracerProvider)
    assert not tracing_enabled()

    def attributes() -> dict[str, object]:
        raise AssertionError("made without a span to carry them")

    with job_span_of("j", attributes, "", "") as span:
        assert span is INVALID_SPAN
    with job_span_of("j", attributes, "", "") as again:  # reusable, on any thread
        assert again is INVALID_SPAN
