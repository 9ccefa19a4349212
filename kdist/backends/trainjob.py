"""backend trainjob: a Kubeflow Trainer v2 TrainJob (trainer.kubeflow.org/v1alpha1, v2.3.0).

Trainer builds a JobSet from a runtime: here the job's own TrainingRuntime (named after
the job), whose template is the JobSet spec backend jobset renders (one include,
`_jobset_spec.yaml.j2`). Trainer copies that spec whole into the JobSet it makes
(named after the TrainJob, owned by it): its network, successPolicy, failurePolicy and
the child Job's podFailurePolicy all pass through, so node 0, ranks, restarts and exit
codes are backend jobset's (`kdist.backends.jobset`), and the pods are that JobSet's.
The runtime is one the Kubeflow SDK reads (`TrainerClient().get_job`, `get_job_logs`):
the label `trainer.kubeflow.org/framework: torch`, `spec.mlPolicy.numNodes`, the
replicated Job (and its pods) labelled `trainer.kubeflow.org/trainjob-ancestor-step:
trainer`, and kdist's container named `node` (the SDK reads the logs of the container
named after the step). Its mlPolicy names no framework policy (torch, mpi...), so
Trainer's PlainML plugin alone applies: it sets the pod count from the TrainJob's
numNodes (the same) and adds the TrainJob's env (none here); no PET_* env, no command
rewritten. The TrainJob must find its runtime when created (Trainer's
webhook looks it up), so the runtime is created first and owned by the TrainJob just
after (`created_first`). A TrainJob is deleted in background: in foreground the
controller, seeing its JobSet gone while the TrainJob still exists, makes it again.

With spec.trainjob.runtimeRef (`kdist.spec.trainjob`) only the TrainJob is rendered, on an
existing ClusterTrainingRuntime: kdist's image, command, env and resources in its
spec.trainer, the rest of the pod (labels, volumes, mounts, security contexts, placement) in
its runtimePatches, a strategic-merge patch of the runtime's replicated Job `node` and its
container `node`; the runtime's JobSet (its failurePolicy) decides restarts. Submit reads
the runtime first (`runtime_problem`). Such a TrainJob's pod template, as kdist reads it
back, is its trainer and its patch (`pod_templates`).

What Trainer cannot do: restart in place (its JobSet recreates Jobs), a native gang
(Trainer gangs only through its coscheduling or Volcano plugins, podGroupPolicy; a
Kueue queue admits a TrainJob whole).
"""

from __future__ import annotations

from typing import Any

from kdist.backends import jobset
from kdist.backends.base import (
    CONDITIONS,
    FAILED,
    SUCCEEDED,
    TRAINING_VERBS,
    Backend,
    count,
    node_count,
    shown,
    spec_of,
)
from kdist.shared import labels as L
from kdist.shared.kind import Kind

GROUP, VERSION = "trainer.kubeflow.org", "v1alpha1"
TRAINJOB = Kind("TrainJob", f"{GROUP}/{VERSION}", "trainjobs", "trainjob.trainer.kubeflow.org")
TRAINING_RUNTIME = Kind("TrainingRuntime", f"{GROUP}/{VERSION}", "trainingruntimes",
                        "trainingruntime.trainer.kubeflow.org")
#: Cluster-scoped: a TrainJob on spec.trainjob.runtimeRef names one; kdist only reads it.
CLUSTER_TRAINING_RUNTIME = Kind("ClusterTrainingRuntime", f"{GROUP}/{VERSION}",
                                "clustertrainingruntimes",
                                "clustertrainingruntime.trainer.kubeflow.org")
#: Who wrote kdist's runtimePatches entry (Trainer asks for a domain-prefixed path).
PATCH_MANAGER = "kdist.dev/kdist"
#: The runtime's object role (app.kubernetes.io/component).
RUNTIME_COMPONENT = "training-runtime"
#: Trainer's (and the Kubeflow SDK's) names: the runtime's framework label, and the label
#: of the replicated Job whose `node` container the TrainJob's spec.trainer overrides.
FRAMEWORK = f"{GROUP}/framework"
ANCESTOR = f"{GROUP}/trainjob-ancestor-step"
TRAINER_STEP = "trainer"
#: The container Trainer's webhook and the SDK look for in the trainer step's pods.
NODE_CONTAINER = "node"


class TrainJobBackend(Backend):
    name = "trainjob"
    kind = TRAINJOB
    templates = ("trainjob.yaml.j2", "trainingruntime.yaml.j2")
    summary = ("a Kubeflow Trainer v2 TrainJob and its own TrainingRuntime (Trainer v2.3.0, "
               "on the JobSet controller)")
    installs = "Kubeflow Trainer v2 (with the JobSet controller)"
    no_in_place_why = "Kubeflow Trainer's JobSet recreates its Jobs to restart"
    no_gang_why = ("Kubeflow Trainer gangs only through its coscheduling or Volcano plugins; "
                   "a Kueue queue admits a TrainJob whole")
    no_elastic_why = ("Kubeflow Trainer removed elastic training in v2.2; its runtime's "
                      "JobSet is Trainer's to shape")
    caveats = ("restarts recreate the gang (never in place); no native gang (a Kueue queue "
               "admits a TrainJob whole)")
    created_first = (TRAINING_RUNTIME,)
    # Trainer's webhook reads the runtime from its informer's cache.
    settling = "must be created before the TrainJob is created"
    background_delete = True
    container = NODE_CONTAINER
    terminal = {"Complete": SUCCEEDED, "Failed": FAILED}
    rbac = [{"apiGroups": [GROUP], "resources": [TRAINJOB.plural], "verbs": [*TRAINING_VERBS]},
            # Created before the TrainJob, then patched to be owned by it; `kdist delete`
            # waits until it is gone too.
            {"apiGroups": [GROUP], "resources": [TRAINING_RUNTIME.plural],
             "verbs": ["create", "get", "list", "watch", "patch", "delete"]}]
    shape = {"spec": {"runtimeRef": {"name": str, "kind": str},
                      "trainer": {"image": str, "command": [str], "args": [str], "env": [dict],
                                  "resourcesPerNode": dict},
                      "runtimePatches": [dict]},
             "status": {"conditions": CONDITIONS, "jobsStatus": [dict]}}

    def master_addr(self, name: str) -> str | None:
        return jobset.BACKEND.master_addr(name)  # the JobSet is named after the TrainJob

    def rank_env(self, max_restarts: int) -> list[dict[str, str]]:
        return jobset.BACKEND.rank_env(max_restarts)

    def context(self, ctx: dict[str, Any]) -> dict[str, Any]:
        runtime_labels = {k: v for k, v in ctx["job_labels"].items() if k != L.QUEUE}
        runtime_labels[L.COMPONENT] = RUNTIME_COMPONENT
        runtime_labels[FRAMEWORK] = "torch"
        step = {ANCESTOR: TRAINER_STEP}
        pod = {**ctx["pod_spec"], "labels": {**ctx["pod_spec"]["labels"], **step}}
        return {**jobset.BACKEND.context(ctx), "runtime_name": ctx["name"],
                "runtime_labels": runtime_labels, "node_job_labels": step, "pod_spec": pod,
                "patch_manager": PATCH_MANAGER}

    def rendered_kinds(self) -> list[str]:
        return [TRAINJOB.kind, TRAINING_RUNTIME.kind]

    def templates_for(self, ctx: dict[str, Any]) -> tuple[str, ...]:
        return self.templates[:1] if ctx.get("runtime_ref") else self.templates

    def kinds_for(self, ctx: dict[str, Any]) -> list[str]:
        return self.rendered_kinds()[:1] if ctx.get("runtime_ref") else self.rendered_kinds()

    def pod_templates(self, obj: dict[str, Any]) -> list[dict[str, Any]]:
        """A TrainingRuntime's (its JobSet template's); a TrainJob on a ClusterTrainingRuntime
        its trainer and kdist's patch as one pod template; another TrainJob none of its own."""
        if obj.get("kind") == TRAINJOB.kind:
            return _patched_pod(spec_of(obj))
        if obj.get("kind") != TRAINING_RUNTIME.kind:
            return []
        template = spec_of(obj).get("template") or {}
        return jobset.BACKEND.pod_templates(template if isinstance(template, dict) else {})

    def runtime_problem(self, runtime: Any) -> str:
        """What makes a ClusterTrainingRuntime (as the API sent it) unfit for kdist's TrainJob,
        "" when nothing: one replicated Job labelled as the trainer step, named `node` (the
        pods reach node 0 as <job>-node-0-0.<job>), with a container `node`."""
        template = _dict(_dict(_dict(runtime).get("spec")).get("template")).get("spec")
        jobs = _dict(template).get("replicatedJobs")
        if not isinstance(jobs, list) or not jobs:
            return "has no spec.template.spec.replicatedJobs"
        steps = [j for j in jobs if _dict(_dict(_dict(j).get("template")).get("metadata")).get(
            "labels", {}).get(ANCESTOR) == TRAINER_STEP]
        if len(steps) != 1:
            return f"has {len(steps)} replicated Jobs labelled {ANCESTOR}: {TRAINER_STEP}, not 1"
        if steps[0].get("name") != jobset.NODE_JOB:
            return (f"names its trainer's replicated Job {shown(steps[0].get('name'))}, not "
                    f"{jobset.NODE_JOB!r}")
        pod = _dict(_dict(_dict(_dict(steps[0].get("template")).get("spec")).get(
            "template")).get("spec"))
        names = [_dict(c).get("name") for c in pod.get("containers") or []] \
            if isinstance(pod.get("containers"), list) else []
        if NODE_CONTAINER not in names:
            return f"has no container {NODE_CONTAINER!r} in its replicated Job {jobset.NODE_JOB!r}"
        return ""

    def nodes(self, obj: dict[str, Any]) -> int | None:
        trainer = spec_of(obj).get("trainer") or {}
        value = trainer.get("numNodes") if isinstance(trainer, dict) else None
        return None if value is None else node_count(obj, "spec.trainer.numNodes", value)

    def own_pod_selector(self, name: str) -> str:
        return jobset.BACKEND.own_pod_selector(name)

    def running(self, obj: dict[str, Any], conditions: dict[str, Any]) -> bool:
        statuses = (obj.get("status") or {}).get("jobsStatus") or []
        return any(count(s.get("active")) + count(s.get("ready")) > 0
                   for s in statuses if isinstance(s, dict))


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _patched_pod(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """The pod template of a TrainJob on a ClusterTrainingRuntime as kdist reads it back:
    the runtime patch's pod for replicated Job `node`, its container `node` given the
    trainer's image, command, args, env and resources. [] for a TrainJob on another kind."""
    if _dict(spec.get("runtimeRef")).get("kind") != CLUSTER_TRAINING_RUNTIME.kind:
        return []
    trainer, pod = _dict(spec.get("trainer")), None
    for patch in spec.get("runtimePatches") or []:
        jobs = _dict(_dict(_dict(_dict(patch).get("trainingRuntimeSpec")).get("template")).get(
            "spec")).get("replicatedJobs")
        for job in jobs if isinstance(jobs, list) else []:
            if _dict(job).get("name") == jobset.NODE_JOB:
                pod = _dict(_dict(_dict(job.get("template")).get("spec")).get("template"))
    if pod is None:
        return []
    pod_spec = _dict(pod.get("spec"))
    containers = [c for c in pod_spec.get("containers") or [] if isinstance(c, dict)]
    ours = next((c for c in containers if c.get("name") == NODE_CONTAINER),
                {"name": NODE_CONTAINER})
    given = {"image": trainer.get("image"), "command": trainer.get("command") or [],
             "args": trainer.get("args") or [], "env": trainer.get("env") or [],
             "resources": trainer.get("resourcesPerNode") or {}}
    others = [c for c in containers if c is not ours]
    return [{"metadata": _dict(pod.get("metadata")),
             "spec": {**pod_spec, "containers": [{**ours, **given}, *others]}}]


BACKEND = TrainJobBackend()
