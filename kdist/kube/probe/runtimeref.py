"""The ClusterTrainingRuntime a TrainJob names (spec.trainjob.runtimeRef), read before submit.

Trainer's webhook refuses a TrainJob whose runtime is missing, but not one whose runtime
kdist's TrainJob cannot run on (its trainer step not the replicated Job `node`, or without
a container `node`): that job would be made and fail, or run without kdist's launcher.
So submit GETs the runtime first, and a missing, unreadable or misshapen one is one line,
with nothing created (`kdist.backends.trainjob.TrainJobBackend.runtime_problem`).
"""

from __future__ import annotations

from typing import Any

from kdist.backends import trainjob
from kdist.kube.errors import Action
from kdist.shared.errors import ClusterError, JobNotFound, KdistError

KIND = trainjob.CLUSTER_TRAINING_RUNTIME
FIELD = "spec.trainjob.runtimeRef"


def check_runtime(cluster: Any, name: str) -> None:
    """ClusterError (one line, naming the field) unless ClusterTrainingRuntime `name`
    exists and kdist's TrainJob can run on it."""
    what = f"{FIELD}: ClusterTrainingRuntime {name}"
    try:
        runtime = cluster.request(Action("get", KIND.plural, None, name), "GET",
                                  KIND.cluster_item(name))
    except JobNotFound:
        raise ClusterError(f"{what} is not in the cluster (`kubectl get "
                           f"{KIND.ref}`): nothing submitted") from None
    except KdistError as e:
        raise ClusterError(f"{what} could not be read: {e} (kdist reads it before "
                           "submitting: get on clustertrainingruntimes, a ClusterRole)") from None
    problem = trainjob.BACKEND.runtime_problem(runtime)
    if problem:
        raise ClusterError(f"{what} {problem}: kdist's TrainJob cannot run on it; nothing "
                           "submitted")
