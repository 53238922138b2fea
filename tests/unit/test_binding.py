"""Rule 16 (bad-input-refused): a call its body could never take names the keywords it got wrong,
with the parameter each most likely meant."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import pytest

from django_ultjobs.core.binding import binding_error


def refusal(func: Callable[..., Any], *args: Any, takes_context: bool = False,
            **kwargs: Any) -> str:
    signature = inspect.signature(func)
    context = (None,) if takes_context else ()
    with pytest.raises(TypeError) as caught:
        signature.bind(*context, *args, **kwargs)
    return binding_error(signature, caught.value, kwargs, takes_context=takes_context)


def send_receipt(order_id: int, *, copy_to: str = "") -> None: ...


def takes_anything(order_id: int, **extra: Any) -> None: ...


def with_context(ctx: object, order_id: int) -> None: ...


def test_a_misspelt_keyword_is_named_beside_the_missing_argument() -> None:
    assert refusal(send_receipt, orderid=1) == (
        "missing a required argument: 'order_id'; unexpected keyword 'orderid' (did you mean "
        "'order_id'?)")


def test_a_keyword_only_parameter_is_a_match_and_pythons_own_words_get_the_hint() -> None:
    assert refusal(send_receipt, 1, copyto="a") == (
        "got an unexpected keyword argument 'copyto' (did you mean 'copy_to'?)")


def test_a_keyword_like_no_parameter_is_named_without_a_guess() -> None:
    assert refusal(send_receipt, zzz=1) == (
        "missing a required argument: 'order_id'; unexpected keyword 'zzz'")


def test_a_body_taking_any_keyword_adds_nothing() -> None:
    assert refusal(takes_anything, orderid=1) == "missing a required argument: 'order_id'"


def test_the_context_is_never_suggested() -> None:
    assert refusal(with_context, takes_context=True, ctx=1) == (
        "multiple values for argument 'ctx'; unexpected keyword 'ctx'")
