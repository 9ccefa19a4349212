"""Whether a cluster restarts pods in place: asked with a server dry run, never a version.

For ``restartMode: inPlace``, which is refused where it is not served (``auto`` needs
no question: ``kdist.api.jobs.create``). A Job rendered to restart in place
(``kdist.rendering.restarts``) is sent with ``dryRun=All``. An API server whose
ContainerRestartRules gate is off drops the container's ``restartPolicyRules`` from
its answer (disabled fields are dropped, not refused); one that knows the field but
not the ``RestartAllContainers`` action (RestartAllContainersOnContainerExits off)
refuses it as invalid. Either way the cluster does not serve in-place restarts; only
a rule that comes back is served.
"""

from __future__ import annotations

from typing import Any, Protocol

from kdist.kube import kinds
from kdist.kube.creating import FIELD_MANAGER
from kdist.kube.errors import Action
from kdist.kube.objects import restart_mode_of
from kdist.shared.errors import ClusterError

WHAT = ("container restart rules with the RestartAllContainers action (Kubernetes >= 1.36, "
        "gates ContainerRestartRules and RestartAllContainersOnContainerExits)")


class Cluster(Protocol):
    server: str

    def request(self, action: Action, method: str, path: str,
                query: dict[str, Any] | None = None, body: Any = None) -> dict[str, Any]: ...


def serves_in_place(cluster: Cluster, job: dict[str, Any]) -> tuple[bool, str]:
    """(whether the cluster keeps `job`'s restart rule, why not when it does not).

    `job` is the Indexed Job rendered in place. An error that is not about the rule
    (no such namespace, no permission) is raised: the create itself would fail the same.
    """
    kind, meta = kinds.of(job), job["metadata"]
    ns = meta["namespace"]
    # Under a generated name: a job of this name may exist (replaced next, or refused by
    # the create itself, whose error says so better).
    probe = {**job, "metadata": {k: v for k, v in meta.items() if k != "name"}
             | {"generateName": f"{meta['name'][:50]}-"}}
    try:
        answer = cluster.request(Action("create", kind.plural, ns, meta["name"]), "POST",
                                 kind.collection(ns),
                                 {"fieldManager": FIELD_MANAGER, "dryRun": "All"}, probe)
    except ClusterError as e:
        if "restartPolicyRules" in str(e) or "RestartAllContainers" in str(e):
            return False, f"the API server at {cluster.server} refused {WHAT}: {e}"
        raise
    if restart_mode_of(answer) == "inPlace":
        return True, ""
    return False, f"the API server at {cluster.server} dropped {WHAT} from a dry run"
