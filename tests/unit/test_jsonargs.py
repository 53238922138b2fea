"""jsonargs: JSON only, never pickle; every refusal names the argument and says what to do."""

from __future__ import annotations

import datetime
import decimal
import json
import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from django_ultjobs import JobArgumentError
from django_ultjobs.core.jsonargs import check_arguments, check_result, dumps


def _refusal(args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None) -> str:
    with pytest.raises(JobArgumentError) as caught:
        check_arguments("send_receipt", args, kwargs or {})
    assert isinstance(caught.value, TypeError)  # what callers of json.dumps already catch
    return str(caught.value)


def test_a_positional_argument_is_named_by_index() -> None:
    message = _refusal((1, object()))
    assert message.startswith("argument 1 of send_receipt() is a builtins.object, which is not "
                              "JSON")
    assert "(str, int, float, bool, None, list, dict)" in message


def test_a_keyword_argument_is_named_by_name() -> None:
    assert _refusal(kwargs={"order": {1, 2}}).startswith(
        "argument 'order' of send_receipt() is a builtins.set")


def test_a_nested_value_is_named_by_its_path() -> None:
    message = _refusal(kwargs={"order": {"lines": [{"sku": "a"}, {"sku": b"raw"}]}})
    assert message.startswith(
        "argument 'order' of send_receipt() at ['lines'][1]['sku'] is a builtins.bytes")


def test_the_first_bad_argument_is_the_one_named() -> None:
    assert _refusal((1, 2, object()), {"a": object()}).startswith("argument 2 of")


@pytest.mark.parametrize(("key", "type_name"), [(1, "int"), (1.5, "float"), (True, "bool"),
                                                (None, "NoneType"), ((1, 2), "tuple")])
def test_a_dict_key_that_is_not_a_string_is_refused(key: Any, type_name: str) -> None:
    message = _refusal(({"ok": {key: "v"}},))
    assert message.startswith(f"argument 0 of send_receipt() at ['ok'] has the key {key!r} "
                              f"({type_name})")
    assert "Use str keys" in message


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_nan_and_infinities_are_refused(value: float) -> None:
    assert _refusal(([1.0, value],)) == (
        f"argument 0 of send_receipt() at [1] is {value!r}, which JSON cannot hold")


def test_a_model_instance_hint_says_pass_the_pk() -> None:
    from django.contrib.auth.models import User

    assert "Pass its primary key (.pk)" in _refusal((User(pk=1),))


@pytest.mark.parametrize("value", [datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC),
                                   datetime.date(2024, 1, 1), datetime.time(12, 0)])
def test_a_date_hint_says_pass_isoformat(value: Any) -> None:
    assert "Pass value.isoformat()" in _refusal((value,))


@pytest.mark.parametrize("value", [decimal.Decimal("1.5"), uuid.uuid4(), 1 + 2j, b"x",
                                   bytearray(b"x"), frozenset(), range(3), type, print])
def test_other_types_are_refused(value: Any) -> None:
    assert "which is not JSON" in _refusal((value,))


@pytest.mark.parametrize(("value", "problem"), [
    ("a\x00b", "contains a NUL character"),
    ("\ud83d", "contains a lone surrogate"),
])
def test_text_postgresql_cannot_store_is_refused_on_every_engine(value: str,
                                                                 problem: str) -> None:
    assert _refusal(kwargs={"note": ["fine", value]}).startswith(
        f"argument 'note' of send_receipt() at [1] is a string that {problem}")
    assert _refusal(({value: 1},)).startswith(
        f"argument 0 of send_receipt() has a key that {problem}")


def test_json_values_pass() -> None:
    check_arguments("send_receipt", (1, -2**80, 1.5, "é😀", True, None, [], {}, (1, 2)),
                    {"nested": {"a": [{"b": [None, 0.0, -0.0, 1e-300]}]}})


def test_results_are_checked_the_same_way() -> None:
    check_result("send_receipt", {"ok": [1, 2]})
    with pytest.raises(JobArgumentError, match=r"^the return value of send_receipt\(\) at "
                                               r"\['when'\] is a datetime\.datetime"):
        check_result("send_receipt", {"when": datetime.datetime.now(datetime.UTC)})


def test_dumps_is_compact_and_refuses_nan() -> None:
    assert dumps({"a": [1, "b"]}) == '{"a":[1,"b"]}'
    with pytest.raises(ValueError):
        dumps(float("nan"))


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text()
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=5), children, max_size=4),
    max_leaves=20,
)


def _large_float(value: Any) -> bool:
    if isinstance(value, float):
        return abs(value) >= 1e16
    if isinstance(value, list):
        return any(_large_float(v) for v in value)
    if isinstance(value, dict):
        return any(_large_float(v) for v in value.values())
    return False


def _storable(value: Any) -> bool:
    """Whether PostgreSQL can hold ``value`` as given: no NUL, no lone surrogate, and no float
    that jsonb would turn into an int."""
    if _large_float(value):
        return False
    text = json.dumps(value, ensure_ascii=False)  # control characters stay escaped
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return "\\u0000" not in text


@settings(deadline=None)  # a loaded CI machine must not turn slowness into a failure
@given(_json)
def test_every_json_value_passes_and_round_trips(value: Any) -> None:
    if not _storable(value):
        with pytest.raises(JobArgumentError):
            check_arguments("j", (value,), {})
        return
    check_arguments("j", (value,), {"k": value})
    assert json.loads(dumps(value)) == value


# -- rule 16 (bad-input-refused): depth, long ints, keyword names
# ------------------------------------------------------


@pytest.mark.parametrize("value", [10**4300 - 1, -(10**4300 - 1), 2**14284, 2**14283],
                         ids=["10**4300-1", "-(10**4300-1)", "2**14284", "2**14283"])
def test_an_int_of_at_most_4300_digits_passes(value: int) -> None:
    check_arguments("j", (value,), {})


@pytest.mark.parametrize("value", [10**4300, -(10**4300), 2**14285, 10**100_000],
                         ids=["10**4300", "-(10**4300)", "2**14285", "10**100_000"])
def test_an_int_past_4300_digits_is_refused_without_converting_it(value: int) -> None:
    assert "is an int of more than 4300 digits" in _refusal((value,))


def test_nesting_is_refused_past_max_depth_with_its_path() -> None:
    from django_ultjobs.core.jsonargs import MAX_DEPTH, check_nesting

    deep: Any = "leaf"
    for _ in range(MAX_DEPTH):
        deep = {"a": deep}
    check_arguments("j", (deep,), {})
    message = _refusal(({"top": deep},))
    assert message.startswith("argument 0 of send_receipt() at ['top']" + "['a']" * 99
                              + f" nests lists or objects deeper than {MAX_DEPTH} levels")
    # The pre-check for code that walks arguments itself: any Mapping or Sequence counts.
    check_nesting("j", (deep,), {})
    with pytest.raises(JobArgumentError, match=f"nests lists or objects deeper than {MAX_DEPTH}"):
        check_nesting("j", (), {"k": ((deep,),)})


@pytest.mark.parametrize(("name", "problem"), [("a\x00", "contains a NUL character"),
                                               ("k\udfff", "contains a lone surrogate")])
def test_a_keyword_name_the_database_cannot_store_is_refused(name: str, problem: str) -> None:
    assert _refusal(kwargs={name: 1}).startswith(
        f"argument {name!r} of send_receipt() has a name that {problem}")
