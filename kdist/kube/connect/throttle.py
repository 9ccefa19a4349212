"""When an answer asks kdist to try again later (`Retry-After`), and when not.

As client-go does (`rest.Request`: `checkWait`, at most 10 retries): a 429, or a
5xx that carries `Retry-After: <seconds>`, is tried again after that many seconds.
kdist is stricter about what may be sent twice:

- a 429 is retried whatever the verb: the API server's priority-and-fairness and
  max-in-flight filters answer it before any handler runs, so the request was not
  processed (a create was not stored) and sending it again is safe;
- a 5xx is retried for a GET only: a create or delete answered 5xx may have been
  done (kdist's create finds out instead, `kdist.kube.write.creating`).

A server that asks for a longer wait than `MAX_PAUSE` (a throttling storm:
`Retry-After: 3600`) ends the command at once, as do more than `MAX_RETRIES`
retries or `MAX_WAITED` seconds of waiting in all for one request.
"""

from __future__ import annotations

from kdist.kube.errors import HttpError

MAX_RETRIES = 10  # client-go's default
MAX_PAUSE = 10.0
MAX_WAITED = 30.0


def retry_after(value: str | None) -> int | None:
    """A `Retry-After` header's seconds, as client-go reads it (an integer; an HTTP date
    or anything else is none)."""
    text = (value or "").strip()
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 9 else None


def pause(e: HttpError, method: str, tries: int, waited: float) -> float | None:
    """How long to wait before sending again the request answered `e`, after `tries`
    retries that waited `waited` seconds in all; None: not again."""
    if e.status != 429 and not (e.status >= 500 and method == "GET"):
        return None
    seconds = retry_after(e.retry_after)
    if seconds is None or seconds > MAX_PAUSE or tries >= MAX_RETRIES \
            or waited + seconds > MAX_WAITED:
        return None
    return float(seconds)
