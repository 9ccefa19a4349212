"""One line of `kdist check` (`kdist.kube.probe.check`), and the raw request its probes make."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from kdist.kube.connect import bodies
from kdist.kube.errors import HttpError, Unanswered, not_the_api
from kdist.kube.watch.answers import refused
from kdist.shared import jsonread
from kdist.shared.limits import MAX_ANSWER_BYTES

OK, FAIL, ABSENT, UNKNOWN, SKIPPED = "ok", "fail", "not served", "unknown", "skipped"


@dataclass(frozen=True)
class Verdict:
    """One line of `kdist check`: what was checked, how it stands, and the fix when failed."""

    check: str
    status: str  # OK, FAIL, ABSENT (an optional feature), UNKNOWN or SKIPPED
    detail: str
    fix: str = ""

    @property
    def failed(self) -> bool:
        return self.status == FAIL

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


def dig(answer: Any, *keys: str) -> Any:
    """`answer[k1][k2]...`, or None where a step is missing or not an object: a probe reads
    an answer of any shape (a Status's `status` is the text "Failure") without a crash."""
    for key in keys:
        if not isinstance(answer, dict):
            return None
        answer = answer.get(key)
    return answer


def brief(value: Any) -> str:
    """`value` as JSON, cut to a few words: what a misshapen answer held, for its line."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


#: ask(method, path, body=None, **query) -> (HTTP status, JSON answer)
Ask = Callable[..., tuple[int, dict[str, Any]]]


def ask_raw(cluster: Any, method: str, path: str, body: Any,
            query: dict[str, str]) -> tuple[int, dict[str, Any]]:
    """One request's HTTP status and JSON answer, whatever the status (the probes read
    401, 403 and 404 as verdicts); a transport failure raises its ClusterError."""
    where = f"the API server at {cluster.server} answered {method} {path}"

    def once() -> tuple[int, bytearray]:
        with cluster.exchange(method, path, query or None, body,
                              what=f"{method} {path}") as (resp, _):
            return resp.status, bodies.whole(bodies.pieces(resp, where), MAX_ANSWER_BYTES,
                                             where)

    try:
        code, data = cluster.retrying(method, once)
    except HttpError as e:
        return e.status, e.status_object()
    except Unanswered as u:
        raise u.error from None
    try:
        answer = jsonread.loads(data or b"{}", limit=MAX_ANSWER_BYTES)
    except jsonread.OutOfBounds as e:
        raise refused(f"the answer to {method} {path}", str(e)) from None
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        raise not_the_api(cluster.server, f"{method} {path}", "", data)
    return code, answer
