"""What a pod tells the user, once: its scheduling, a lost node, an eviction, and its
containers' troubles (image pulls, config errors, CrashLoopBackOff, OOMKilled, restarts,
exit codes). The tracker's words about pods (`kdist.kube.watch.tracker`); pure: `warned`
holds what was said already.
"""

from __future__ import annotations

from typing import Any

from kdist.kube.watch.objects import (
    CONFIG_ERROR_REASONS,
    GANG_ECHO,
    IMAGE_PULL_REASONS,
    RESTARTED_IN_PLACE,
    PodView,
    count,
)
from kdist.shared import exitcodes

#: Warnings said one pod at a time, by kind (a key's first item), at most this many of each:
#: a 1,000-pod gang that restarts has 1,000 pods exit together, and 1,000 lines would bury
#: the one that matters. The state (`kdist status`, the failure line) keeps every rank's.
PER_POD_KINDS = frozenset({"node-lost", "evicted", "config", "crashloop", "oom", "restart",
                           "exit"})
MAX_PER_KIND = 8


class Warned(set[tuple[Any, ...]]):
    """The keys of the warnings said already (one tracker's), and how many of each
    per-pod kind were said and held back."""

    def __init__(self) -> None:
        super().__init__()
        self.said: dict[str, int] = {}
        self.held: dict[str, int] = {}


def once(warned: set[tuple[Any, ...]], key: tuple[Any, ...], text: str) -> list[str]:
    """[text] the first time `key` is seen, [] after; past MAX_PER_KIND of a per-pod
    kind, one line that says the rest are held back, then nothing."""
    if key in warned:
        return []
    warned.add(key)
    kind = key[0] if key else None
    if not isinstance(warned, Warned) or kind not in PER_POD_KINDS:
        return [text]
    if warned.said.get(kind, 0) < MAX_PER_KIND:
        warned.said[kind] = warned.said.get(kind, 0) + 1
        return [text]
    warned.held[kind] = warned.held.get(kind, 0) + 1
    if warned.held[kind] > 1:
        return []
    return [f"more pods than {MAX_PER_KIND} warn alike ({kind}): the others are not said one "
            "by one; `kdist status` shows every rank"]


def pod_warnings(warned: Warned, unit: str, pod: dict[str, Any], v: PodView) -> list[str]:
    """What `pod` (seen as `v`) tells the user: its scheduling, a lost node, an
    eviction, its containers' troubles; each once."""
    status = pod.get("status") or {}
    who = f"{unit} {v.rank} (pod {v.name})"
    out: list[str] = []
    conditions = {c.get("type"): c for c in status.get("conditions") or []
                  if c.get("status") in ("True", "False")}
    sched = conditions.get("PodScheduled") or {}
    if sched.get("status") == "False" and sched.get("reason") == "Unschedulable":
        msg = sched.get("message", "")
        # A gang's other pods only echo that it is incomplete ("minCount (2) cannot be
        # satisfied: ..."): the pod that does not fit says why, the PodGroup the rest.
        if not msg.startswith(GANG_ECHO):
            out += once(warned, ("sched", msg), f"FailedScheduling: {who}: {msg}")
    # A node that stopped reporting: the node controller marks its pods not Ready
    # while their containers' last known state is still running.
    ready, cready = conditions.get("Ready") or {}, conditions.get("ContainersReady") or {}
    if v.phase == "Running" and ready.get("status") == "False" and \
            cready.get("status") == "True":
        out += once(warned, ("node-lost", v.uid),
                            f"node {v.node or '?'} NotReady (its kubelet stopped reporting); "
                            f"{who} is lost with it: replaced once the node returns or is "
                            "tainted node.kubernetes.io/out-of-service")
    # The kubelet's eviction (status.reason) and the API's DisruptionTarget condition
    # tell the same story: one warning, the kubelet's words preferred.
    disrupted = (conditions.get("DisruptionTarget") or {}).get("status") == "True"
    evicted = status.get("reason") == "Evicted"
    if evicted:
        out += once(warned, ("evicted", v.uid), f"{who} was evicted: {status.get('message', '')}")
    elif disrupted:
        c = conditions["DisruptionTarget"]
        out += once(warned, ("evicted", v.uid),
                            f"{who} disrupted: {c.get('reason')}: {c.get('message', '')}")
    statuses = (status.get("initContainerStatuses") or []) + (
        status.get("containerStatuses") or [])
    for cs in statuses:
        out += container_warnings(warned, cs, v, who, evicted or disrupted)
    return out

def container_warnings(warned: Warned, cs: dict[str, Any], v: PodView, who: str,
                       evicted: bool) -> list[str]:
    """Image pulls, config errors, CrashLoopBackOff, OOMKilled, restarts, exit codes.

    An evicted/disrupted pod's exit code is the eviction's, already reported.
    """
    name, image = cs.get("name", ""), cs.get("image", "")
    state, last = cs.get("state") or {}, cs.get("lastState") or {}
    waiting, term = state.get("waiting") or {}, state.get("terminated") or {}
    last_term = last.get("terminated") or {}
    restarts = count(cs.get("restartCount"))
    out: list[str] = []
    reason = waiting.get("reason")
    if reason in IMAGE_PULL_REASONS:
        out += once(warned, ("image", image), f"{who}: cannot pull image {image!r}: {reason}: "
                                              f"{waiting.get('message', '')}".rstrip(": "))
    elif reason in CONFIG_ERROR_REASONS:
        out += once(warned, ("config", v.uid, name),
                            f"{who}: {reason}: {waiting.get('message', '')}")
    elif reason == "CrashLoopBackOff":
        code = last_term.get("exitCode")
        out += once(warned, ("crashloop", v.uid, name),
                            f"{who}: container {name} is in CrashLoopBackOff (last exit code "
                            f"{code})")
    for t in (term, last_term):  # once per container: later ones show as restarts
        if t.get("reason") == "OOMKilled":
            out += once(warned, ("oom", v.uid, name),
                                f"{who}: container {name} was OOMKilled (exit code "
                                f"{t.get('exitCode')}): raise spec.resources.memory")
    if restarts and last_term.get("reason") == RESTARTED_IN_PLACE:
        # The kubelet's record says nothing of the exit (its terminated state did).
        out += once(warned, ("restart", v.uid, name, restarts),
                            f"{who}: container {name} restarted in place ({restarts}x)")
    elif restarts and last_term:
        # Restarted: its exit says why, unless it was seen (and said) already.
        said = v.last_exit[2] if v.last_exit and name == v.container else ""
        exited = exit_warning(warned, last_term, v, name, who, said)
        if exited:
            out.append(exited[0] if exited[0].startswith("more pods than") else
                       f"{exited[0]}; restarted ({restarts}x)")
            warned.add(("restart", v.uid, name, restarts))
        else:
            out += once(warned, ("restart", v.uid, name, restarts),
                                f"{who}: container {name} restarted ({restarts}x), last exit "
                                f"code {last_term.get('exitCode')} "
                                f"({last_term.get('reason', '')})")
    if term and not evicted:
        out += exit_warning(warned, term, v, name, who, v.said if name == v.container else "")
    return out

def exit_warning(warned: Warned, term: dict[str, Any], v: PodView, name: str, who: str,
                 said: str) -> list[str]:
    """`who`'s container exited non-zero (once per exit; OOMKilled is said apart)."""
    code = term.get("exitCode")
    if code in (0, None) or term.get("reason") == "OOMKilled":
        return []
    hint = f": {exitcodes.describe(code)}" if isinstance(code, int) else ""
    if code in (exitcodes.HUNG, exitcodes.RESTARTS_SPENT) and said:
        hint += f"; {said.removeprefix('kdist.launch: ')}"  # which rank, as the launcher said
    return once(warned, ("exit", v.uid, name, str(term.get("finishedAt") or "")),
                        f"{who}: container {name} exited with code {code} "
                        f"({term.get('reason', 'Error')}){hint}")
