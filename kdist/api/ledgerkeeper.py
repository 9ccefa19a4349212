"""The goodput ledger a watch keeps on its job (``kdist.shared.ledger``), as `follow` writes it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kdist.api.types import Observer
from kdist.shared import strictjson

if TYPE_CHECKING:
    from kdist.kube.client import Cluster


class LedgerKeeper:
    """Writes the watch's goodput ledger onto the job (``kdist.shared.ledger``) when it
    changes, so that any client reads it; a cluster that refuses (no patch permission)
    is told of once, and the watch goes on."""

    def __init__(self, cluster: Cluster, job: dict[str, Any], observer: Observer) -> None:
        self.cluster, self.job, self.observer = cluster, job, observer
        self.written, self.off = 0, False

    def keep(self, tracker: Any, final: bool = False) -> None:
        from kdist.shared.errors import KdistError
        from kdist.shared.ledger import ANNOTATION

        ledger = tracker.ledger
        if final and ledger.restarts:
            tracker.ledger_changed()
            ledger.version += 1
        if self.off or ledger.version == self.written or tracker.state.ledger is None:
            return
        self.written = ledger.version
        try:
            self.cluster.annotate(self.job, {ANNOTATION: strictjson.dumps(
                tracker.state.ledger, separators=(",", ":"))})
        except KdistError as e:
            self.off = True
            self.observer.warning(f"the goodput ledger is not kept on the job: {e}")
