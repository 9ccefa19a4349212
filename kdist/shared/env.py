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
# The defaults of the spec (spec.distributed) and of the launcher when a variable is unset.
DEFAULT_PORT = 29500
DEFAULT_RDZV_TIMEOUT_S = 300
# A dead peer must fail the job in minutes, not in torch's default 30 min.
DEFAULT_PG_TIMEOUT_S = 300
#: GPUs the pod requested (resources.gpus), set with procsPerNode auto: the launcher
#: starts that many workers instead of counting what the runtime happens to expose.
GPUS = "KDIST_GPUS"
#: Set by ``kdist run --local``: the launcher prefixes its workers' lines with ``[rank N]``.
LOG_PREFIX = "KDIST_LOG_PREFIX"
#: spec.distributed.progressTimeoutSeconds, when set: no output from any rank for this
#: long (after the first) ends the attempt as a hang (exitcodes.HUNG).
PROGRESS_TIMEOUT = "KDIST_PROGRESS_TIMEOUT"
#: spec.distributed.nodeLossSeconds, when not the default: a node whose launcher's
#: heartbeat is silent this long is lost (kdist.runtime.heartbeat).
NODE_LOSS = "KDIST_NODE_LOSS_SECONDS"
DEFAULT_NODE_LOSS_S = 10
#: spec.distributed.spares, when set: pods (local node groups) of index >= KDIST_NNODES
#: start as warm spares holding no rank (kdist.runtime.membership).
SPARES = "KDIST_SPARES"
#: With spares: each slot's address, ``{slot}`` standing for the slot (an Indexed Job pod's
#: stable DNS name, ``<job>-{slot}.<job>``). Where node 0 is lost, the survivors move the
#: store to another slot's address (kdist.runtime.hostmove); unset, it never moves.
SLOT_ADDR = "KDIST_SLOT_ADDR"
#: ``1`` (a local run, every node on one address): slot S's store listens on the master
#: port + S, not the master port.
SLOT_PORTS = "KDIST_SLOT_PORTS"
#: spec.minNodes, when below spec.nodes: a gang that lost a node and has no spare for it
#: goes on with the survivors, down to this many nodes (kdist.runtime.elastic).
MIN_NODES = "KDIST_MIN_NODES"
#: Launcher -> workers of an elastic job (minNodes below nodes): the world size at
#: spec.nodes, whatever the gang's size now; kdist's workloads keep their global batch at
#: --batch-size times it (kdist.workloads.global_batch), a script may do the same.
FULL_WORLD_SIZE = "KDIST_FULL_WORLD_SIZE"
#: Which whole-job restart this is (0 = the first run), as the workers see it; the
#: launcher sets TORCHELASTIC_RESTART_COUNT to the same. ``kdist run --local`` gives it to
#: the launcher; a pod's launcher works it out (kdist.runtime.restarts).
RESTART_COUNT = "KDIST_RESTART_COUNT"
#: Indexed Job pods: the Job controller's per-index failure counts (downward API
#: annotations batch.kubernetes.io/job-index-failure-count and -ignored-failure-count).
INDEX_FAILURES = "KDIST_INDEX_FAILURES"
INDEX_IGNORED_FAILURES = "KDIST_INDEX_IGNORED_FAILURES"
#: Restarts in place (distributed.restartMode, kdist.runtime.restarts): a directory on
#: an emptyDir, which an in-place restart keeps, where the launcher counts its starts.
#: Set only on pods rendered to restart in place; the launcher then also bounds the
#: restarts itself (the Job controller does not see them).
RESTART_DIR = "KDIST_RESTART_DIR"
#: Where a pod mounts that emptyDir.
DEFAULT_RESTART_DIR = "/var/run/kdist/restarts"
#: ``0``: a launcher whose pod restarts in place never restarts its workers itself; its
#: container restarts instead (``kdist.runtime.restarts.restart_workers``).
RESTART_WORKERS = "KDIST_RESTART_WORKERS"
#: ``1``: spec.distributed.warmWorkers, a standby worker per local rank that has imported
#: torch and becomes the rank's next worker (kdist.runtime.standby); ``first``:
#: spec.distributed.warmStart, the first start only from standbys, where the script imports
#: torch (kdist.runtime.warmstart); unset or ``0``: every worker starts cold.
WARM_WORKERS = "KDIST_WARM_WORKERS"
#: Launcher -> worker wrapper: the directory of one pipe per local rank that the
#: worker's stdout and stderr go to (kdist.runtime.output).
OUTPUT_PIPES = "KDIST_OUTPUT_PIPES"
#: Launcher -> worker hook: the file a worker keeps its count of collectives started in
#: (its default group's sequence number), read at a hang (kdist.runtime.stacks.collectives).
COLLECTIVE_COUNTS = "KDIST_COLLECTIVE_COUNTS"
#: Fault drills: ``RANK:STEP`` makes that rank SIGKILL itself at that step.
FAULT_KILL_AT = "KDIST_FAULT_KILL_AT"
#: Where kdist's DDP workload keeps each rank's newest state in memory
#: (kdist.workloads.memory_file; default /dev/shm, the pod's in-memory emptyDir, which a
#: restart in place keeps). ``kdist run --local`` gives each node one of its own, as each
#: pod has its own /dev/shm.
MEMORY_DIR = "KDIST_MEMORY_DIR"
DEFAULT_MEMORY_DIR = "/dev/shm"

# spec.workdir: the shipped code (packed by kdist.rendering.workdir, unpacked by
# kdist.runtime.workdir). The hash being set is what tells the launcher code was shipped.
#: sha256 of the uncompressed tar: the code's identity (the unpacker checks it, status shows it).
CODE_SHA256 = "KDIST_CODE_SHA256"
#: Where to unpack (default DEFAULT_CODE_DIR): the workers' cwd and first PYTHONPATH entry.
CODE_DIR = "KDIST_CODE_DIR"
#: Where the parts are (default DEFAULT_CODE_MOUNT).
CODE_SRC = "KDIST_CODE_SRC"
#: Where a pod mounts the code's ConfigMaps (one projected volume, read-only).
DEFAULT_CODE_MOUNT = "/var/run/kdist/code"
#: Where the launcher unpacks the code in a pod (a writable emptyDir) and runs the workers.
DEFAULT_CODE_DIR = "/workspace"
#: HOME in a pod (an emptyDir) unless spec.env sets it: pods run as UID 1000, and an image
#: without that user would give it HOME=/, where no cache (Hugging Face, torch hub, triton)
#: can be written. kdist's own image has its user's home there too.
DEFAULT_HOME = "/home/kdist"

# spec.runtime: shipped (kdist.rendering.runtime_ship): kdist's container-side package as
# one zip in a job-owned ConfigMap, for an image without kdist. The pod's bootstrap (a
# `python3 -c` line in its command) checks the zip against the digest in its own command
# line, then runs the launcher from it; the digest is also set here for `status`.
#: sha256 of the shipped runtime zip (set only on pods with a shipped runtime).
RUNTIME_SHA256 = "KDIST_RUNTIME_SHA256"
#: Where the bootstrap looks for the zip (default DEFAULT_RUNTIME_MOUNT; tests set it).
RUNTIME_DIR = "KDIST_RUNTIME_DIR"
#: Where a pod mounts the runtime's ConfigMap (read-only).
DEFAULT_RUNTIME_MOUNT = "/var/run/kdist/runtime"
#: The ConfigMap's one binaryData key: the zip's file name in the mount.
RUNTIME_ZIP = "kdist-runtime.zip"

#: Every name a user's spec.env or envFrom prefix may not set or shadow.
PREFIX = "KDIST_"

#: Variables the launcher owns: a user value would silently break rank wiring.
LAUNCHER_OWNED = frozenset({
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK",
    "GROUP_WORLD_SIZE", "ROLE_WORLD_SIZE", "ROLE_NAME",
    "MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "JOB_COMPLETION_INDEX",
})
LAUNCHER_OWNED_PREFIXES = (PREFIX, "PET_", "TORCHELASTIC_")
#: The one kdist variable a local run's nodes take from the shell: the fault drills' hook
#: (tests set it around `kdist run --local`), read only by kdist's own workloads.
LOCAL_PASSTHROUGH = frozenset({FAULT_KILL_AT})
#: ``1``: start the workers on a torch outside the tested range anyway
#: (``kdist.runtime.torchcheck``). The user's to set (spec.env), though named KDIST_*.
ANY_TORCH = "KDIST_ANY_TORCH"
#: The KDIST_* names a spec's env may set: the user's switches, not the contract's.
USER_SETTABLE = frozenset({ANY_TORCH})


def contract_owned(name: str) -> bool:
    """Whether the contract (kdist, the launcher) owns variable `name`: a spec may not set
    it, and a local run's nodes do not inherit it from the shell."""
    if name in USER_SETTABLE:
        return False
    return name in LAUNCHER_OWNED or name.startswith(LAUNCHER_OWNED_PREFIXES)


def reserved_by_prefix(prefix: str) -> str | None:
    """A reserved name (or ``PREFIX*``) that some variable named ``prefix + KEY`` could be;
    None when none could.

    An envFrom source's keys are not known when a job is rendered: any non-empty run of
    ``[-._a-zA-Z0-9]`` (what a ConfigMap or Secret key may be). So a prefix is safe only
    when no reserved name starts with it and it starts no reserved prefix in either
    direction: ``KDIST`` reaches ``KDIST_X``, ``R`` reaches ``RANK``, ``PET_X`` is one.
    """
    for owned in LAUNCHER_OWNED_PREFIXES:
        if prefix.startswith(owned) or owned.startswith(prefix):
            return owned + "*"
    return next((n for n in sorted(LAUNCHER_OWNED) if n.startswith(prefix) and n != prefix),
                None)
