"""The environment contract's variable names, in one place (docs/DESIGN.md, "Env contract").

A rendered pod, a local process group and the launcher all spell them from
here; the workloads and a user's script read them.
"""

from __future__ import annotations

JOB_NAME = "KDIST_JOB_NAME"
NNODES = "KDIST_NNODES"
NPROC_PER_NODE = "KDIST_NPROC_PER_NODE"
NODE_RANK = "KDIST_NODE_RANK"
MASTER_ADDR = "KDIST_MASTER_ADDR"
MASTER_PORT = "KDIST_MASTER_PORT"
DIST_BACKEND = "KDIST_DIST_BACKEND"
MAX_RESTARTS = "KDIST_MAX_RESTARTS"
RDZV_TIMEOUT = "KDIST_RDZV_TIMEOUT"
PG_TIMEOUT = "KDIST_PG_TIMEOUT"
CHECKPOINT_DIR = "KDIST_CHECKPOINT_DIR"
#: Set by ``kdist run --local``: the launcher prefixes its workers' lines with ``[rank N]``.
LOG_PREFIX = "KDIST_LOG_PREFIX"
#: Fault drills: ``RANK:STEP`` makes that rank SIGKILL itself at that step.
FAULT_KILL_AT = "KDIST_FAULT_KILL_AT"

#: Every name a user's spec.env or envFrom prefix may not set or shadow.
PREFIX = "KDIST_"

#: Variables the launcher owns: a user value would silently break rank wiring.
LAUNCHER_OWNED = frozenset({
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK",
    "GROUP_WORLD_SIZE", "ROLE_WORLD_SIZE", "ROLE_NAME",
    "MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "JOB_COMPLETION_INDEX",
})
LAUNCHER_OWNED_PREFIXES = (PREFIX, "PET_", "TORCHELASTIC_")
