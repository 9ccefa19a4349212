"""kdist's own bounds: what a spec may ask for is also all a cluster answer is believed.

A Job kdist made never has more than MAX_NODES ranks, so an object in the
cluster that says otherwise (a hand-edited or forged kdist-labelled Job with
``completions: 2147483647``) is refused as a cluster answer, not followed
rank by rank.
"""

from __future__ import annotations

MAX_NODES = 1000
#: processes per node: the spec's procsPerNode and the launcher's KDIST_NPROC_PER_NODE
MAX_PROCS_PER_NODE = 64
#: The largest JSON answer kdist reads from the API server (a list of every kdist pod
#: in every namespace stays far below), and the longest watch event line.
MAX_ANSWER_BYTES = 128 << 20
MAX_EVENT_BYTES = 16 << 20
#: How many nodes' logs a watch follows (`submit --wait`, `wait`, `logs -f`) and `status`
#: reads, unless told otherwise (--all-nodes, --node): every log of a 1,000-node job is
#: 1,000 connections and threads (a watch) or 1,000 requests (a status). Nodes 0 to
#: LOG_NODES - 1 are the ones followed; `status` reads the failed ones first.
LOG_NODES = 32
#: How many logs `status` reads at a time.
STATUS_LOG_READERS = 8
#: Pods per request where a job's pods are read once (`status`, `logs`): listed in pages
#: (limit and continue, as kubectl's --chunk-size), so that only one page's decoded
#: objects are held at a time, not a 1,000-pod job's ~6 MB answer whole.
POD_PAGE = 250

# Shipped code (spec.workdir): the packer (``kdist.rendering.workdir``) refuses what the
# launcher's unpacker (``kdist.runtime.workdir``) would, against these same numbers, so a
# workdir that ``render`` accepts unpacks in every pod.
CODE_MAX_FILES = 20_000
CODE_MAX_UNPACKED_BYTES = 256 * 2**20
# The tar itself: a 512-byte header (plus up to two for long names) and up to 511 bytes
# of padding per member, then the end-of-archive record.
CODE_MAX_TAR_BYTES = CODE_MAX_UNPACKED_BYTES + CODE_MAX_FILES * 2048 + 2**20


def code_name_problem(name: str) -> str | None:
    """Why the unpacker refuses a member named ``name`` (a posix path in the tree), or None."""
    parts = name.split("/")
    if not name or name.startswith("/") or ".." in parts or "\0" in name:
        return "an unsafe path"
    if "\\" in name:
        return "a backslash in its name"
    return None
