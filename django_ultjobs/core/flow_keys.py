"""The keys of per-key caps and rate limits: ``concurrency_key=`` and ``rate_limit_key=``.

A key option names one of the job's parameters (positional or keyword) or is a callable taking
the job's ``(*args, **kwargs)`` and returning a string. It is checked when the job is declared
(rule 54 (bad-flow-option-refused)): a name that is no parameter of the body would otherwise fail
every enqueue, or worse, cap nothing. Its value for one call is computed at enqueue, before any SQL,
and a value the queue cannot keep (not text or an int, too long, a NUL) is refused there by name
(rule 16 (bad-input-refused)).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..exceptions import JobArgumentError, JobOptionError
from .jsonargs import is_unicode
from .slot_keys import MAX_SLOT_KEY, keyed_slot_key

#: What a key option may be: a parameter's name, or a function of the call's arguments.
KeyOption = str | Callable[..., Any]

_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
_NAMED = (*_POSITIONAL, inspect.Parameter.KEYWORD_ONLY)


def check_key_option(job: str, option: str, key: Any, *, needs: str, given: Any,
                     signature: inspect.Signature | None, takes_context: bool) -> None:
    """Refuse a key option that can never name a key of this job
    (rule 54 (bad-flow-option-refused))."""
    if key is None:
        return
    if given is None:
        raise JobOptionError(f"job {job!r}: {option}= needs {needs}= as well (a key of what?)")
    if callable(key) and not isinstance(key, str):
        return
    if not isinstance(key, str) or not key:
        raise JobOptionError(
            f"job {job!r}: {option} must be the name of one of the job's parameters or a "
            f"callable taking the job's (*args, **kwargs) and returning a str, not {key!r}")
    params = _parameters(signature, takes_context)
    if params is None:
        raise JobOptionError(
            f"job {job!r}: {option}={key!r} names a parameter, but the body's parameters "
            "cannot be read; give a callable instead")
    if key not in params or params[key].kind not in _NAMED:
        names = [n for n, p in params.items() if p.kind in _NAMED]
        raise JobOptionError(
            f"job {job!r}: {option}={key!r} is not a parameter of the job; its parameters are "
            f"{names or 'none'}")


def key_value(job: str, option: str, key: KeyOption, signature: inspect.Signature | None,
              takes_context: bool, args: Sequence[Any], kwargs: Mapping[str, Any]) -> str:
    """The key of one call, as text; ``JobArgumentError`` naming the option when it has none
    the queue can keep."""
    if isinstance(key, str):
        assert signature is not None  # check_key_option refused a name it could not resolve
        context = (None,) if takes_context else ()
        bound = signature.bind(*context, *args, **kwargs)
        bound.apply_defaults()
        value = bound.arguments[key]
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            raise JobArgumentError(
                f"job {job!r}: {option} {key!r} is {type(value).__name__} {value!r}; a key "
                "parameter must be a str or an int (give a callable to make a key of anything "
                "else)")
        return str(value)
    value = key(*args, **kwargs)
    if not isinstance(value, str):
        raise JobArgumentError(
            f"job {job!r}: {option} {_callable_name(key)} returned {type(value).__name__} "
            f"{value!r}; it must return a str")
    return value


def stored_key(job: str, option: str, key: str) -> str:
    """The stored form of ``job``'s key ``key`` (a slot's or a rate-limit bucket's), refused
    before any SQL when its column cannot keep it (rule 16 (bad-input-refused))."""
    if "\x00" in key or not (key.isascii() or is_unicode(key)):
        raise JobArgumentError(
            f"job {job!r}: {option} {key!r} cannot contain a NUL or a lone surrogate")
    stored = keyed_slot_key(job, key)
    if len(stored) > MAX_SLOT_KEY:
        raise JobArgumentError(
            f"job {job!r}: {option} {key[:40]!r}… is too long: with the job's name it "
            f"must fit {MAX_SLOT_KEY} characters")
    return stored


def _parameters(signature: inspect.Signature | None, takes_context: bool
                ) -> dict[str, inspect.Parameter] | None:
    if signature is None:
        return None
    params = dict(signature.parameters)
    if takes_context and params:
        params.pop(next(iter(params)))  # the context, passed by the worker
    return params


def _callable_name(func: Callable[..., Any]) -> str:
    return getattr(func, "__qualname__", None) or repr(func)
