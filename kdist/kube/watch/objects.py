"""Reading Kubernetes API objects (plain dicts, as the API sends them): pure functions.

What a job's pods, phase, ranks and log records are, for every backend; no
I/O, no clock. The tracker, the watch and the CLI's tables read objects here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kdist import backends
from kdist.backends.base import count  # noqa: F401 (read here)
from kdist.shared import exitcodes
from kdist.shared import labels as L
from kdist.shared.errors import ClusterError
from kdist.shared.records import parse_record, parse_time  # noqa: F401 (read here)
from kdist.shared.terminal import escape

SUCCEEDED, FAILED, DELETED = "Succeeded", "Failed", "Deleted"
IMAGE_PULL_REASONS = {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"}
CONFIG_ERROR_REASONS = {"CreateContainerConfigError", "CreateContainerError", "RunContainerError"}


def pod_rank(pod: dict[str, Any]) -> int | None:
    """A pod's node rank from its labels (never from its name), as its backend lays
    ranks out (`kdist.backends`)."""
    meta = pod.get("metadata") or {}
    return backends.pod_rank(meta.get("labels") or {}, meta.get("annotations") or {})


def pod_selector(job: dict[str, Any]) -> str:
    """The label selector of `job`'s pods: kdist's label, else the controller's own."""
    meta = job.get("metadata") or {}
    name = meta.get("name", "")
    if (meta.get("labels") or {}).get(L.JOB_NAME) == name:
        return L.selector_string(name)
    return backends.of(job).own_pod_selector(name)


def job_kind_backend(obj: dict[str, Any]) -> tuple[str, str]:
    return obj.get("kind", ""), backends.of(obj).name


def job_pod_templates(obj: dict[str, Any]) -> list[dict[str, Any]]:
    return backends.of(obj).pod_templates(obj)


#: The container restart rule action that restarts a pod in place (KEP-5532).
RESTART_ALL = "RestartAllContainers"
#: The reason of the lastState the kubelet leaves on each container it restarted in place:
#: exit code 137, no finishedAt, whatever the container's own exit was (seen only in its
#: terminated state before the restart).
RESTARTED_IN_PLACE = "RestartingAllContainers"


def restart_mode_of(obj: dict[str, Any]) -> str:
    """"inPlace" when the training object's pods carry kdist's in-place restart rule, as
    the API server kept it (one with the feature off drops the field), else "recreate"."""
    for template in job_pod_templates(obj):
        for c in ((template.get("spec") or {}).get("containers") or []):
            rules = c.get("restartPolicyRules") if isinstance(c, dict) else None
            if isinstance(rules, list) and any(
                    isinstance(r, dict) and r.get("action") == RESTART_ALL for r in rules):
                return "inPlace"
    return "recreate"


def job_nodes(obj: dict[str, Any]) -> int | None:
    """How many node ranks the job has; None when it does not say, or says something no
    kdist job can have (for a table; `checked_job_nodes` refuses such a job)."""
    try:
        return checked_job_nodes(obj)
    except ClusterError:
        return None


def shape_notes(obj: dict[str, Any]) -> list[str]:
    """A line for a training object of a shape kdist does not write (`Backend.shape_note`),
    escaped as read: none for kdist's own."""
    note = backends.of(obj).shape_note(obj)
    return [escape(note)] if note else []


def checked_job_nodes(obj: dict[str, Any]) -> int | None:
    """How many node ranks the job has (None when it does not say); ClusterError when the
    object says more than kdist's MAX_NODES, or not a count at all."""
    return backends.of(obj).nodes(obj)


def job_phase(obj: dict[str, Any]) -> str:
    """A job's phase from its object alone (for `kdist list`)."""
    done = terminal_condition(obj)
    if done is not None:
        return done[0]
    status = obj.get("status") or {}
    conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    if conditions.get("Suspended") == "True" or backends.of(obj).suspended(obj):
        # A suspended job with a queue label waits for Kueue's admission.
        return "Queued" if ((obj.get("metadata") or {}).get("labels") or {}).get(L.QUEUE) \
            else "Suspended"
    return "Running" if backends.of(obj).running(obj, conditions) else "Pending"


def workload_state(workload: dict[str, Any]) -> tuple[str, str]:
    """Kueue's verdict on a job: ("admitted" | "queued" | "never-fits", in its words).

    QuotaReserved=False says why a job waits; Kueue says "... > maximum
    capacity" when the job asks for more than the ClusterQueue can ever give.
    """
    status = workload.get("status") or {}
    conditions = {c.get("type"): c for c in status.get("conditions") or []}
    if (conditions.get("Admitted") or {}).get("status") == "True":
        queue = escape((status.get("admission") or {}).get("clusterQueue", ""))
        return "admitted", f"admitted by ClusterQueue {queue}".strip()
    reserved = conditions.get("QuotaReserved") or {}
    message = escape(" ".join(str(reserved.get("message") or "").split()))
    if "maximum capacity" in message:
        return "never-fits", message
    return "queued", message or "waiting for admission"


def gang_of(obj: dict[str, Any]) -> str:
    """The PodGroup the training object's pods are gang-scheduled in (the pod template's
    ``schedulingGroup``, as the API server kept it: one without the feature drops the
    field), "" when none (distributed.gang none, or not served)."""
    for template in job_pod_templates(obj):
        group = ((template.get("spec") or {}).get("schedulingGroup") or {})
        name = group.get("podGroupName") if isinstance(group, dict) else None
        if isinstance(name, str) and name:
            return name
    return ""


#: PodGroup's condition that the scheduler placed the gang (KEP-4671, v1.37).
GANG_SCHEDULED = "PodGroupInitiallyScheduled"
#: How kube-scheduler (v1.37) begins the Unschedulable message of a gang's pods that
#: would fit but wait for the rest: "minCount (2) cannot be satisfied: 0 scheduled, ...",
#: or, once a pod was placed and its gang's others were not, "pod group is unschedulable,
#: minCount (2) cannot be satisfied: ..." (both seen on the test cluster).
GANG_ECHO = ("minCount (", "pod group is unschedulable, minCount (")


def gang_state(podgroup: dict[str, Any]) -> tuple[str, int | None, str]:
    """The scheduler's verdict on a gang's PodGroup: ("placed" | "waiting" |
    "unschedulable", its minCount, in its words)."""
    spec = podgroup.get("spec") or {}
    gang = ((spec.get("schedulingPolicy") or {}).get("gang") or {})
    minimum = gang.get("minCount")
    minimum = minimum if isinstance(minimum, int) and not isinstance(minimum, bool) else None
    conditions = {c.get("type"): c for c in (podgroup.get("status") or {}).get("conditions") or []}
    placed = conditions.get(GANG_SCHEDULED) or {}
    message = escape(" ".join(str(placed.get("message") or "").split()))[:300]
    if placed.get("status") == "True":
        return "placed", minimum, message or "all pods placed at once"
    if placed.get("status") == "False":
        reason = escape(str(placed.get("reason") or "Unschedulable"))
        return "unschedulable", minimum, f"{reason}: {message}" if message else reason
    return "waiting", minimum, message or "waiting for all its pods to exist and fit at once"


def terminal_condition(obj: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """(Succeeded|Failed, the condition) when the job object says it is over."""
    backend = backends.of_kind(obj.get("kind", ""))
    table = backend.terminal if backend is not None else {}
    conditions = (obj.get("status") or {}).get("conditions") or []
    # Failure wins if both appear (a Job can carry FailureTarget then Failed).
    for want in (FAILED, SUCCEEDED):
        for c in conditions:
            if c.get("status") == "True" and table.get(c.get("type")) == want:
                return want, c
    return None


@dataclass
class PodView:
    uid: str
    name: str
    rank: int | None
    created: str
    phase: str
    reason: str
    node: str
    restarts: int
    earlier_pods: int  # the rank's pods before this one, as its controllers count them
    exit_code: int | None
    finished_at: str | None
    said: str
    # The main container's exit before its last restart (restarted in place): code, when, said
    last_exit: tuple[int, str, str] | None
    # The kubelet's record of the exit before its last restart in place (137), if it was one
    in_place_exit: int | None
    running: bool
    started: bool  # the main container has run (logs can be read)
    gone: bool = False  # being deleted, evicted or disrupted (`went_away`)
    container: str = "pytorch"  # kdist's container, as the job's backend names it


def last_words(message: str, limit: int = 300) -> str:
    """The line of a termination message that says why: kdist's own, else the last one.

    With ``FallbackToLogsOnError`` the message is the log's tail; the launcher
    ends it with one ``kdist.launch: ...`` line naming the failed worker. Lines are
    split at ``\\n`` alone and kdist's own start with its words, nothing before them
    (a worker's line never does: ``kdist.shared.records.launcher_said``).
    """
    raw = [line.removesuffix("\r") for line in message.split("\n") if line.strip()]
    lines = [" ".join(line.split()) for line in raw]
    ours = [tidy for line, tidy in zip(raw, lines, strict=True)
            if line.startswith(("kdist.launch:", "kdist:"))]
    pick = (ours or lines or [""])[-1]
    return pick if len(pick) <= limit else pick[: limit - 3] + "..."


def main_container(statuses: list[dict[str, Any]], container: str) -> dict[str, Any] | None:
    """kdist's container's status (`container`: its backend's name), else the first."""
    for cs in statuses:
        if cs.get("name") == container:
            return cs
    return statuses[0] if statuses else None


def went_away(pod: dict[str, Any]) -> bool:
    """Whether the pod is being deleted, was evicted or disrupted (preempted, drained): its
    SIGTERM came from outside, where its peers' same exit (143) is their preemption vote's."""
    status = pod.get("status") or {}
    disrupted = any(c.get("type") == "DisruptionTarget" and c.get("status") == "True"
                    for c in status.get("conditions") or [] if isinstance(c, dict))
    return bool((pod.get("metadata") or {}).get("deletionTimestamp")) or disrupted or \
        status.get("reason") == "Evicted"


def pod_view(pod: dict[str, Any], container: str) -> PodView:
    """What the watch reads of a pod; `container` is kdist's, as the job's backend names it."""
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    annotations = meta.get("annotations") or {}
    phase = status.get("phase") or "Pending"
    reason = status.get("reason") or ""
    cs = main_container(status.get("containerStatuses") or [], container)
    # A null member is not set (the answer's shape is checked in `kdist.kube.watch.answers`).
    state = {k: v for k, v in ((cs or {}).get("state") or {}).items() if v is not None}
    exit_code = finished = None
    said = ""
    if "waiting" in state:
        reason = state["waiting"].get("reason") or reason
    elif "terminated" in state:
        term = state["terminated"]
        reason = term.get("reason") or reason
        exit_code, finished = term.get("exitCode"), term.get("finishedAt")
        said = last_words(term.get("message") or "")
    last = ((cs or {}).get("lastState") or {}).get("terminated") or {}
    in_place_exit = None
    if last.get("reason") == RESTARTED_IN_PLACE:
        code = last.get("exitCode")  # the kubelet's record of removing it, not how it exited
        in_place_exit = code if isinstance(code, int) and exitcodes.is_retryable(code) else 137
        last = {}
    last_code = last.get("exitCode")
    last_exit = (last_code, str(last.get("finishedAt") or ""),
                 escape(last_words(last.get("message") or ""))) \
        if isinstance(last_code, int) and not isinstance(last_code, bool) else None
    if cs is None:
        for ics in status.get("initContainerStatuses") or []:
            waiting = (ics.get("state") or {}).get("waiting")
            if waiting and waiting.get("reason") != "PodInitializing":
                reason = waiting.get("reason") or reason
            elif "running" in (ics.get("state") or {}):
                reason = "Init"
        for c in status.get("conditions") or []:
            if c.get("type") == "PodScheduled" and c.get("status") == "False":
                reason = c.get("reason") or reason
    if meta.get("deletionTimestamp") and phase not in (SUCCEEDED, FAILED):
        phase = "Terminating"
    # The words shown to the user are escaped here, as read (kdist.shared.terminal);
    # the pod's name is not: it names the pod in requests (escaped where it is shown).
    return PodView(
        uid=meta.get("uid") or meta.get("name", ""), name=meta.get("name", ""),
        rank=pod_rank(pod), created=meta.get("creationTimestamp") or "", phase=escape(phase),
        reason=escape(reason), node=escape((pod.get("spec") or {}).get("nodeName") or ""),
        restarts=count((cs or {}).get("restartCount")),
        earlier_pods=backends.earlier_pods(meta.get("labels") or {}, annotations),
        exit_code=exit_code,
        finished_at=finished, said=escape(said), last_exit=last_exit,
        in_place_exit=in_place_exit,
        running="running" in state,
        started="running" in state or "terminated" in state,
        gone=went_away(pod),
        container=container,
    )


