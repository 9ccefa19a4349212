"""The cluster target as kubectl's global flags name it, standard library only: the CLI
builds one for every verb, and `kdist render` must not pay for the cluster client to do so
(`kdist.kube.connect.config` reads the kubeconfig it names)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from kdist.shared.errors import UsageError

#: Seconds one request may take, connection included, before the server counts as dead.
DEFAULT_REQUEST_TIMEOUT = 15.0
REQUEST_TIMEOUT_ENV = "KDIST_REQUEST_TIMEOUT"


@dataclass(frozen=True)
class ClusterOptions:
    """Where to talk to, as kubectl's global flags say (None = the kubeconfig's default)."""

    kubeconfig: str | None = None
    context: str | None = None
    namespace: str | None = None
    request_timeout: float | None = None

    def timeout(self) -> float:
        """The per-request deadline: the option, else $KDIST_REQUEST_TIMEOUT, else 15 s."""
        if self.request_timeout is not None:
            return self.request_timeout
        return parse_timeout(os.environ.get(REQUEST_TIMEOUT_ENV), REQUEST_TIMEOUT_ENV) \
            or DEFAULT_REQUEST_TIMEOUT


def parse_timeout(text: str | None, what: str) -> float | None:
    """A positive, finite number of seconds (at most a day), or None when unset."""
    if text is None or text == "":
        return None
    try:
        value = float(text)
    except ValueError:
        raise UsageError(f"{what}: {text!r} is not a number of seconds") from None
    if not (0 < value <= 86400):  # also refuses nan and inf
        raise UsageError(f"{what}: {text!r} must be more than 0 and at most 86400 seconds")
    return value
