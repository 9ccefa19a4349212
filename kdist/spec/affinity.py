"""``spec.scheduling.affinity`` and ``topologySpreadConstraints``, as Kubernetes has
them, validated enough that a mistake names its field path (the operator/values
pairing, label keys and values, weights); the API server checks the rest.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field, StrictInt, field_validator, model_validator

from kdist.spec import checks as C
from kdist.spec.pod import PodModel

Weight = Annotated[StrictInt, Field(ge=1, le=100)]


def _values_fit(operator: str, values: list[str] | None, *, numeric: bool = False) -> None:
    """The operator/values pairing the API server enforces on selector requirements."""
    values = values or []
    if operator in ("In", "NotIn") and not values:
        raise ValueError(f"operator {operator} needs at least one value")
    if operator in ("Exists", "DoesNotExist") and values:
        raise ValueError(f"operator {operator} takes no values")
    if operator in ("Gt", "Lt"):
        if len(values) != 1 or not (numeric and re.fullmatch(r"-?[0-9]{1,18}", values[0])):
            raise ValueError(f"operator {operator} needs exactly one integer value")


class NodeSelectorRequirement(PodModel):
    """A node label requirement (as Kubernetes)."""

    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]
    values: list[str] | None = None

    @model_validator(mode="after")
    def _fits(self) -> NodeSelectorRequirement:
        C.label_key(self.key)
        _values_fit(self.operator, self.values, numeric=True)
        if self.operator not in ("Gt", "Lt"):
            for v in self.values or []:
                C.label_value(self.key, v)
        return self


class NodeFieldRequirement(PodModel):
    """A node field requirement (as Kubernetes)."""

    key: Literal["metadata.name"]  # the only node field the scheduler matches
    operator: Literal["In", "NotIn"]
    values: Annotated[list[str], Field(min_length=1, max_length=1)]


class NodeSelectorTerm(PodModel):
    """Node requirements, all of which must hold (as Kubernetes)."""

    match_expressions: list[NodeSelectorRequirement] | None = None
    match_fields: list[NodeFieldRequirement] | None = None

    @model_validator(mode="after")
    def _not_empty(self) -> NodeSelectorTerm:
        if not self.match_expressions and not self.match_fields:
            raise ValueError("a node selector term needs matchExpressions or matchFields")
        return self


class NodeSelector(PodModel):
    """Node selector terms, one of which must match (as Kubernetes)."""

    node_selector_terms: Annotated[list[NodeSelectorTerm], Field(min_length=1)]


class PreferredSchedulingTerm(PodModel):
    """A weighted node preference (as Kubernetes)."""

    weight: Weight
    preference: NodeSelectorTerm


class NodeAffinity(PodModel):
    """Which nodes the pods may or prefer to run on (as Kubernetes)."""

    required_during_scheduling_ignored_during_execution: NodeSelector | None = None
    preferred_during_scheduling_ignored_during_execution: list[PreferredSchedulingTerm] | None \
        = None


class LabelSelectorRequirement(PodModel):
    """A label requirement (as Kubernetes)."""

    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: list[str] | None = None

    @model_validator(mode="after")
    def _fits(self) -> LabelSelectorRequirement:
        C.label_key(self.key)
        _values_fit(self.operator, self.values)
        for v in self.values or []:
            C.label_value(self.key, v)
        return self


class LabelSelector(PodModel):
    """Selects objects by label (as Kubernetes)."""

    match_labels: dict[str, str] | None = None
    match_expressions: list[LabelSelectorRequirement] | None = None

    @field_validator("match_labels")
    @classmethod
    def _labels(cls, v: dict[str, str] | None) -> dict[str, str] | None:
        return v if v is None else C.labels(v)


class PodAffinityTerm(PodModel):
    """Pods to run near (or away from), as Kubernetes has it."""

    label_selector: LabelSelector | None = None
    namespaces: list[str] | None = None
    namespace_selector: LabelSelector | None = None
    topology_key: str
    match_label_keys: list[str] | None = None
    mismatch_label_keys: list[str] | None = None

    @model_validator(mode="after")
    def _keys(self) -> PodAffinityTerm:
        C.label_key(self.topology_key)
        for ns in self.namespaces or []:
            C.namespace(ns)
        for key in [*(self.match_label_keys or []), *(self.mismatch_label_keys or [])]:
            C.label_key(key)
        if (self.match_label_keys or self.mismatch_label_keys) and self.label_selector is None:
            raise ValueError("matchLabelKeys and mismatchLabelKeys need a labelSelector")
        return self


class WeightedPodAffinityTerm(PodModel):
    """A weighted pod (anti-)affinity term (as Kubernetes)."""

    weight: Weight
    pod_affinity_term: PodAffinityTerm


class PodAffinity(PodModel):
    """Pod affinity or anti-affinity (as Kubernetes)."""

    required_during_scheduling_ignored_during_execution: list[PodAffinityTerm] | None = None
    preferred_during_scheduling_ignored_during_execution: list[WeightedPodAffinityTerm] | None \
        = None


class Affinity(PodModel):
    """The pods' affinity, as Kubernetes has it."""

    node_affinity: NodeAffinity | None = None
    pod_affinity: PodAffinity | None = None
    pod_anti_affinity: PodAffinity | None = None


class TopologySpreadConstraint(PodModel):
    """As Kubernetes has it, except that labelSelector defaults to this job's pods
    (without one, a constraint counts no pods and spreads nothing)."""

    max_skew: Annotated[StrictInt, Field(ge=1, le=2**31 - 1)]
    topology_key: str
    when_unsatisfiable: Literal["DoNotSchedule", "ScheduleAnyway"]
    label_selector: LabelSelector | None = None
    min_domains: Annotated[StrictInt, Field(ge=1, le=2**31 - 1)] | None = None
    node_affinity_policy: Literal["Honor", "Ignore"] | None = None
    node_taints_policy: Literal["Honor", "Ignore"] | None = None
    match_label_keys: list[str] | None = None

    @model_validator(mode="after")
    def _fits(self) -> TopologySpreadConstraint:
        C.label_key(self.topology_key)
        for key in self.match_label_keys or []:
            C.label_key(key)
        if self.min_domains is not None and self.when_unsatisfiable != "DoNotSchedule":
            raise ValueError("minDomains needs whenUnsatisfiable: DoNotSchedule")
        return self
