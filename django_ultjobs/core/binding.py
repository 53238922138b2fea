"""What a call its body could never take is told: Python's own words, and the keywords it got
wrong, each with the parameter it most likely meant."""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Iterable

_NAMED = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


def binding_error(signature: inspect.Signature, error: TypeError, keywords: Iterable[str], *,
                  takes_context: bool = False) -> str:
    """``error`` (from ``signature.bind``) with every keyword of the call that names no
    parameter, and the close match of each: ``missing a required argument: 'order_id';
    unexpected keyword 'orderid' (did you mean 'order_id'?)``.

    Python names the first thing wrong only, and a missing argument before a misspelt keyword,
    so the misspelling, the actual mistake, would go unsaid."""
    text = str(error)
    for keyword, close in _unknown_keywords(signature, keywords, takes_context):
        hint = f" (did you mean {close!r}?)" if close else ""
        said = f"unexpected keyword argument {keyword!r}"
        if said in text:
            text = text.replace(said, said + hint)
        else:
            text += f"; unexpected keyword {keyword!r}{hint}"
    return text


def _unknown_keywords(signature: inspect.Signature, keywords: Iterable[str],
                      takes_context: bool) -> list[tuple[str, str | None]]:
    """The keywords no parameter takes, each with its closest parameter name (or None); none
    for a body that takes ``**kwargs``."""
    params = list(signature.parameters.values())
    if takes_context:
        params = params[1:]  # the context is the worker's to pass, never a caller's keyword
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return []
    names = [p.name for p in params if p.kind in _NAMED]
    return [(keyword, next(iter(difflib.get_close_matches(keyword, names, n=1)), None))
            for keyword in keywords if keyword not in names]
