"""How a benchmark records a failure: a row keeps the error's first line and the run goes on."""

from __future__ import annotations


def describe_error(e: BaseException) -> str:
    """``Type: first line of the message``, at most 200 characters."""
    first = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {first}"[:200]
