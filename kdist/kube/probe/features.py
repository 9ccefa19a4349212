"""What the cluster serves beyond core Kubernetes, for `kdist check` (`kdist.kube.probe.check`).

Each is asked of the API itself, never read off a version string: discovery for
each operated backend's kind (PyTorchJob, JobSet), Kueue and PodGroup (a native gang), and for
container restart rules a server-side dry-run create of a tiny pod whose container
has `restartPolicyRules`: an API server that does not serve the field (older, or its
feature gate off) drops it, so whether it survives the dry run is the answer. None of these is
required: absent is "not served", never a failure.
"""

from __future__ import annotations

from typing import Any

from kdist import backends
from kdist.kube import kinds
from kdist.kube.probe.restarts import restart_rules
from kdist.kube.probe.verdict import ABSENT, OK, UNKNOWN, Ask, Verdict, brief, dig
from kdist.shared.errors import KdistError

#: The backends whose kind an operator serves (`kdist check` asks about each, by name).
OPERATED = tuple(b for b in backends.BACKENDS if b.installs)


def served_features(cluster: Any) -> dict[str, bool | str]:
    """Which optional resources the cluster serves, by discovery (asked once each): True,
    False, or why discovery could not tell (a misshapen answer, a 403 or 500: one line
    of its own, and the other checks go on). PodGroups are asked in v1, then v1beta1
    (`kinds.podgroup`): "podgroup" is whether either is served, "podgroup-v1" the first."""
    wanted = {**{b.name: b.kind for b in OPERATED}, "kueue": kinds.LOCALQUEUE,
              "podgroup-v1": kinds.PODGROUP_V1, "podgroup": kinds.PODGROUP}
    served: dict[str, bool | str] = {}
    for name, kind in wanted.items():
        if name == "podgroup" and served["podgroup-v1"] is True:
            served[name] = True  # v1beta1 is not asked where v1 is served
            continue
        try:
            served[name] = cluster.serves(kind)
        except KdistError as e:
            served[name] = str(e)
    return served


def _unknown(name: str, kind: kinds.Kind, why: str) -> Verdict:
    return Verdict(name, UNKNOWN, f"could not tell whether {kind.api_version} {kind.kind} is "
                   f"served: {why}")


def _backend(b: backends.Backend, served: bool | str) -> Verdict:
    if isinstance(served, str):
        return _unknown(b.name, b.kind, served)
    if served:
        caveats = f"; {b.caveats}" if b.caveats else ""
        return Verdict(b.name, OK, f"served ({b.kind.api_version}): --backend {b.name} "
                       f"works{caveats}")
    return Verdict(b.name, ABSENT, f"no {b.kind.api_version} {b.kind.kind}: backend {b.name} "
                   f"needs {b.installs} ({backends.DEFAULT} works anywhere)")


def features(ask: Ask, ns: str, served: dict[str, bool | str]) -> list[Verdict]:
    """One verdict per optional backend or feature."""
    operated = [_backend(b, served[b.name]) for b in OPERATED]
    gang = _gang(served["podgroup"], served["podgroup-v1"] is True)
    return [*operated, _kueue(ask, ns, served["kueue"]), gang, restart_rules(ask, ns)]


def _gang(served: bool | str, v1: bool) -> Verdict:
    if isinstance(served, str):
        return _unknown("gang", kinds.PODGROUP, served)
    if served:
        kind = kinds.PODGROUP_V1 if v1 else kinds.PODGROUP
        return Verdict("gang", OK, f"{kind.api_version} PodGroups are served: jobs "
                       "are scheduled as a gang, all pods at once or none (distributed.gang "
                       "auto)")
    return Verdict("gang", ABSENT, f"no {kinds.PODGROUP_V1.api_version} or "
                   f"{kinds.PODGROUP.api_version} PodGroup (feature gate "
                   "GenericWorkload off, or Kubernetes < 1.37): pods are scheduled one by "
                   "one; spec.queue (Kueue) admits a job whole")


def _kueue(ask: Ask, ns: str, served: bool | str) -> Verdict:
    if isinstance(served, str):
        return _unknown("kueue", kinds.LOCALQUEUE, served)
    if not served:
        return Verdict("kueue", ABSENT, f"no {kinds.LOCALQUEUE.api_version} LocalQueue: "
                       "spec.queue needs Kueue")
    code, answer = ask("GET", kinds.LOCALQUEUE.collection(ns))
    if code >= 300:
        return Verdict("kueue", UNKNOWN, f"Kueue is served, but listing LocalQueues in "
                       f"namespace {ns} answered {code}")
    items = answer.get("items")
    if items is not None and not isinstance(items, list):
        return Verdict("kueue", UNKNOWN, f"Kueue is served, but the LocalQueue list of "
                       f"namespace {ns} is malformed: items is {brief(items)}, not a list")
    names = [dig(q, "metadata", "name") for q in items or []]
    bad = [n for n in names if not (isinstance(n, str) and n)]
    if bad:
        return Verdict("kueue", UNKNOWN, f"Kueue is served, but the LocalQueue list of "
                       f"namespace {ns} is malformed: an item's metadata.name is "
                       f"{brief(bad[0])}")
    names.sort()
    if not names:
        return Verdict("kueue", OK, f"Kueue is served; no LocalQueue in namespace {ns} "
                       "(spec.queue names one: an admin makes it)")
    shown = ", ".join(names[:10]) + (f" and {len(names) - 10} more" if len(names) > 10 else "")
    return Verdict("kueue", OK, f"Kueue is served; LocalQueues in namespace {ns} for "
                   f"spec.queue: {shown}")
