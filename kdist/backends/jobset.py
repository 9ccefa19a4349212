"""backend jobset: a JobSet (jobset.x-k8s.io/v1alpha2, v0.12), run by the JobSet controller.

One replicated Job, `node`, an Indexed Job of `nodes` pods: the completion index is
the node rank, and JobSet's network (a headless Service named after the JobSet,
not-ready addresses published) makes node 0 `<name>-node-0-0.<name>` and index k
`<name>-node-0-k.<name>` (where the store moves if node 0 is lost: kdist.runtime.hostmove).
kdist's restart rule is the JobSet's failurePolicy: the child Job fails at once on any pod
failure (backoffLimit 0), with reason PodFailurePolicy for a code error (its
podFailurePolicy's FailJob rule) or DeadlineExceeded for the spec's deadline, both
failing the JobSet; any other failure (a kill, a lost peer, a hang) restarts the
whole gang, up to maxRestarts. Evictions are ignored by the child Job (the pod is
replaced, no restart counted), and so is a lost peer (203): it only echoes the failure
of the pod that caused it, which decides (else a peer's 203, seen first, would restart a
gang whose real failure was a code error). The successPolicy: every node's pod succeeded. Each
restart recreates the Job; its pods carry the restart count as a label
(`jobset.sigs.k8s.io/restart-attempt`), which the launcher reads as
KDIST_RESTART_COUNT. Restarts are never in place and there is no native gang here:
JobSet recreates Jobs, and a Kueue queue admits the JobSet whole. An elastic job
(spec.minNodes): the Job succeeds once minNodes indexes have and ignores a fenced pod
(206), and the launchers restart their workers in process (kdist.rendering.restarts);
with warm spares (spec.distributed.spares) the Job runs nodes + spares pods and succeeds
once `nodes` indexes have.
"""

from __future__ import annotations

from typing import Any

from kdist.backends.base import (
    CONDITIONS,
    FAILED,
    POD_TEMPLATE,
    SUCCEEDED,
    TRAINING_VERBS,
    Backend,
    bad_answer,
    completion_index,
    count,
    field_path,
    index_failures,
    less_spares,
    node_count,
    shown,
    spec_of,
)
from kdist.shared import env as E
from kdist.shared import exitcodes
from kdist.shared import labels as L
from kdist.shared.kind import Kind

GROUP, VERSION, PLURAL = "jobset.x-k8s.io", "v1alpha2", "jobsets"
JOBSET = Kind("JobSet", f"{GROUP}/{VERSION}", PLURAL, "jobset.jobset.x-k8s.io")
#: The one replicated Job's name (short: hostnames are <name>-node-0-<rank>).
NODE_JOB = "node"
# The controller's pod labels.
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
RESTART_ATTEMPT = "jobset.sigs.k8s.io/restart-attempt"
REPLICATED_JOB = "jobset.sigs.k8s.io/replicatedjob-name"
JOB_INDEX = "jobset.sigs.k8s.io/job-index"
#: The child Job's failure reasons that fail the JobSet instead of restarting it.
FAIL_REASONS = ["PodFailurePolicy", "DeadlineExceeded"]


class JobSetBackend(Backend):
    name = "jobset"
    kind = JOBSET
    templates = ("jobset.yaml.j2",)
    summary = "a JobSet (the JobSet controller, v0.12; what Kubeflow Trainer v2 builds on)"
    installs = "the JobSet controller"
    no_in_place_why = "the JobSet controller recreates its Jobs to restart"
    no_gang_why = "the JobSet controller makes the Jobs; Kueue admits a JobSet whole"
    # Its one Job takes the Indexed Job's successPolicy and fenced rule; its launchers
    # restart their workers in process though its containers never restart in place.
    elastic = True
    terminal = {"Completed": SUCCEEDED, "Failed": FAILED}
    rbac = [{"apiGroups": [GROUP], "resources": [PLURAL], "verbs": [*TRAINING_VERBS]}]
    shape = {"spec": {"replicatedJobs": [{"name": str, "template": {
        "spec": {"template": POD_TEMPLATE}}}], "failurePolicy": dict, "network": dict},
             "status": {"conditions": CONDITIONS, "replicatedJobsStatus": [dict],
                        "restarts": int}}

    def master_addr(self, name: str) -> str | None:
        return f"{name}-{NODE_JOB}-0-0.{name}"

    def slot_addr(self, name: str) -> str | None:
        # The controller names each pod's host <jobset>-<replicatedJob>-<jobIndex>-<podIndex>
        # under the JobSet's headless Service (network.enableDNSHostnames): index k of the
        # one Job is <name>-node-0-k.<name>, whichever pod holds it after a replacement.
        return f"{name}-{NODE_JOB}-0-{{slot}}.{name}"

    def rank_env(self, max_restarts: int) -> list[dict[str, str]]:
        """The completion index; the JobSet's restart count, which its controller labels
        every pod of a restart with."""
        return [{"name": E.NODE_RANK, "path": field_path(L.COMPLETION_INDEX)},
                {"name": E.RESTART_COUNT, "path": f"metadata.labels['{RESTART_ATTEMPT}']"}]

    def context(self, ctx: dict[str, Any]) -> dict[str, Any]:
        return {"node_job": NODE_JOB, "node_job_labels": {}, "fail_reasons": FAIL_REASONS,
                "echo_exit_codes": [exitcodes.PEER_LOST]}

    def rendered_kinds(self) -> list[str]:
        return ["JobSet"]

    def _jobs(self, obj: dict[str, Any]) -> list[dict[str, Any]]:
        jobs = spec_of(obj).get("replicatedJobs") or []
        return [j for j in jobs if isinstance(j, dict)] if isinstance(jobs, list) else []

    def pod_templates(self, obj: dict[str, Any]) -> list[dict[str, Any]]:
        return [((j.get("template") or {}).get("spec") or {}).get("template") or {}
                for j in self._jobs(obj)]

    def foreign_shape(self, obj: dict[str, Any]) -> str:
        """What makes `obj` other than the JobSet kdist writes (one replicated Job, `node`,
        of one replica: one Indexed Job whose completion index is the rank), "" if nothing.
        Another shape's pods share completion indexes (two Jobs of `replicas: 2` each have
        a pod 0), which read as kdist's would show a restart that never happened."""
        jobs = spec_of(obj).get("replicatedJobs")
        if not isinstance(jobs, list):
            return ""  # not said (no ranks are made up), or refused as an answer (nodes)
        if len(jobs) != 1:
            return f"spec.replicatedJobs has {len(jobs)} Jobs, not 1"
        job = jobs[0] if isinstance(jobs[0], dict) else {}
        if job.get("name") != NODE_JOB:
            return f"spec.replicatedJobs[0].name is {shown(job.get('name'))}, not {NODE_JOB!r}"
        replicas = job.get("replicas", 1)
        if replicas != 1 or isinstance(replicas, bool):
            return f"spec.replicatedJobs[0].replicas is {shown(replicas)}, not 1"
        return ""

    def shape_note(self, obj: dict[str, Any]) -> str:
        why = self.foreign_shape(obj)
        name = (obj.get("metadata") or {}).get("name", "?")
        return (f"JobSet {name} is not of the shape kdist writes ({why}): its node count is "
                f"not read, and only the pods of its replicated Job {NODE_JOB!r} (job 0) are "
                "ranks") if why else ""

    def nodes(self, obj: dict[str, Any]) -> int | None:
        jobs = spec_of(obj).get("replicatedJobs")
        if jobs is None:
            return None
        if not isinstance(jobs, list):
            raise bad_answer(obj, "spec.replicatedJobs", jobs)
        if self.foreign_shape(obj):
            return None  # the ranks are the pods seen of kdist's one Job (pod_rank)
        total = 0
        for i, j in enumerate(self._jobs(obj)):
            where = f"spec.replicatedJobs[{i}]"
            replicas = node_count(obj, f"{where}.replicas", j.get("replicas", 1), minimum=0)
            spec = (j.get("template") or {}).get("spec") or {}
            pods = spec.get("completions", spec.get("parallelism", 1))
            total += replicas * node_count(obj, f"{where}.template.spec.completions", pods)
        if not total:
            return None
        return less_spares(obj, node_count(obj, "spec.replicatedJobs (pods in all)", total))

    def claims_pod(self, labels: dict[str, Any]) -> bool:
        return JOBSET_NAME in labels

    def pod_rank(self, labels: dict[str, Any], annotations: dict[str, Any]) -> int | None:
        """The completion index of a pod of kdist's one Job (replicated Job `node`, job 0;
        a label not there is taken as kdist's); a pod of any other Job is no rank."""
        if JOBSET_NAME not in labels or labels.get(REPLICATED_JOB, NODE_JOB) != NODE_JOB or \
                str(labels.get(JOB_INDEX, "0")) != "0":
            return None
        return completion_index(labels, annotations)

    def earlier_pods(self, labels: dict[str, Any], annotations: dict[str, Any]) -> int:
        """The JobSet's restarts before this pod's, and its Job's evicted pods."""
        if JOBSET_NAME not in labels:
            return 0
        return count(labels.get(RESTART_ATTEMPT)) + index_failures(annotations)

    def own_pod_selector(self, name: str) -> str:
        return f"{JOBSET_NAME}={name}"

    def running(self, obj: dict[str, Any], conditions: dict[str, Any]) -> bool:
        statuses = (obj.get("status") or {}).get("replicatedJobsStatus") or []
        return any(count(s.get("active")) + count(s.get("ready")) > 0
                   for s in statuses if isinstance(s, dict))


BACKEND = JobSetBackend()
