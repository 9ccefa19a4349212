"""spec.backend's choices (the CLI's --backend), from the registry (kdist.backends), in a
module of their own: the CLI reads them for every verb, `kdist render` too, and must not
load the rest of `kdist.api.types` (the observer protocol, the connection) to do so."""

from __future__ import annotations

from kdist import backends

BACKEND_NAMES, BACKEND_DEFAULT = backends.NAMES, backends.DEFAULT

__all__ = ["BACKEND_DEFAULT", "BACKEND_NAMES"]
