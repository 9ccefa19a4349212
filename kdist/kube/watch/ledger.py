"""The goodput ledger, read and written by the watch: it lives in ``kdist.shared.ledger`` (a
local run keeps one too, and the local runner imports nothing of kube)."""

from kdist.shared.ledger import (
    ANNOTATION,
    MAX_ENTRIES,
    Ledger,
    Restart,
    in_process_restart,
    iso,
)
from kdist.shared.ledgerread import read

__all__ = ["ANNOTATION", "MAX_ENTRIES", "Ledger", "Restart", "in_process_restart", "iso",
           "read"]
