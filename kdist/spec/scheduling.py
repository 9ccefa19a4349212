"""spec.scheduling: where and when the pods may run (node selector, tolerations, priority,
Kueue queue, affinity, topology spread, scheduler)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StrictInt, field_validator, model_validator

from kdist.spec import checks as C
from kdist.spec.affinity import Affinity, TopologySpreadConstraint
from kdist.spec.checks import INT64_MAX
from kdist.spec.pod import PodModel as _Model


class Toleration(_Model):
    """A taint the pods tolerate, as Kubernetes has it."""

    key: str | None = Field(
        default=None, description="The taint's key; none: every taint (Exists).")
    operator: Literal["Exists", "Equal"] | None = Field(default=None, description="Default Equal.")
    value: str | None = Field(default=None, description="The taint's value (Equal).")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute", ""] | None = Field(
        default=None, description="The taint effect to match; empty: all.")
    toleration_seconds: Annotated[StrictInt, Field(ge=-INT64_MAX - 1, le=INT64_MAX)] | None = \
        Field(default=None, description="NoExecute only: how long the pod stays after the taint.")

    @model_validator(mode="after")
    def _consistent(self) -> Toleration:
        if self.operator == "Exists" and self.value:
            raise ValueError("value must be empty when operator is Exists")
        if self.key is None and self.operator != "Exists":
            raise ValueError("a toleration without key needs operator: Exists")
        if self.key is not None:
            C.label_key(self.key)
        if self.value:
            C.label_value(self.key or "", self.value)
        if self.toleration_seconds is not None and self.effect != "NoExecute":
            raise ValueError("tolerationSeconds needs effect: NoExecute")
        return self


class Scheduling(_Model):
    """Where and when the pods may run."""

    node_selector: dict[str, str] = Field(default={}, description="Node labels the pods need.")
    tolerations: list[Toleration] = Field(default=[], description="Taints the pods tolerate.")
    priority_class_name: str = Field(default="", description="The pods' PriorityClass.")
    queue: str = Field(default="", description="A Kueue LocalQueue: the kueue.x-k8s.io/queue-name "
                       "label.")
    affinity: Affinity | None = Field(default=None, description="As Kubernetes: nodeAffinity, "
                                      "podAffinity, podAntiAffinity.")
    topology_spread_constraints: list[TopologySpreadConstraint] = Field(
        default=[], description="As Kubernetes; labelSelector defaults to this job's pods.")
    scheduler_name: str = Field(default="", description="Another scheduler (e.g. volcano).")

    @field_validator("node_selector")
    @classmethod
    def _selector(cls, v: dict[str, str]) -> dict[str, str]:
        return C.labels(v)

    @field_validator("priority_class_name")
    @classmethod
    def _priority(cls, v: str) -> str:
        return C.subdomain(v, "priorityClassName") if v else v

    @field_validator("scheduler_name")
    @classmethod
    def _scheduler(cls, v: str) -> str:
        return C.subdomain(v, "schedulerName") if v else v

    @field_validator("queue")
    @classmethod
    def _queue(cls, v: str) -> str:
        return C.queue_name(v) if v else v
