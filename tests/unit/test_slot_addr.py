"""Each backend's per-pod address (``KDIST_SLOT_ADDR``), where the store moves when node 0
is lost (issue 54, kdist.runtime.hostmove): an Indexed Job's and a JobSet's pods have a
stable DNS name per index; a PyTorchJob's and a TrainJob's get none rendered (their store
never moves: the survivors wait for node 0's replacement)."""

from __future__ import annotations

import pytest

from kdist import backends
from kdist.rendering import contract, render
from kdist.runtime.plan import resolve_env
from kdist.shared import env as E
from kdist.spec import validate_job
from tests.unit import crd

from .helpers import spec_with

NAME = "unit-job"  # helpers.BASE's
# An elastic job: the spec the store moves for (spares or minNodes); its env is the
# contract's whatever the backend.
MOVABLE = {"spec.nodes": 3, "spec.minNodes": 2, "spec.distributed": {"maxRestarts": 2}}


def _env(obj):
    (node,) = obj["spec"]["replicatedJobs"]
    container = node["template"]["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value") for e in container["env"]}


@pytest.mark.parametrize(("backend", "host_of_1"), [
    ("indexed-job", f"{NAME}-1.{NAME}"),
    # JobSet's controller names pod k of replicated Job `node`, job 0, this host under
    # the JobSet's headless Service (network.enableDNSHostnames)
    ("jobset", f"{NAME}-node-0-1.{NAME}"),
])
def test_a_pods_stable_name_is_its_slots_address_and_slot_0_is_node_0(backend, host_of_1):
    b = backends.get(backend)
    addr = b.slot_addr(NAME)
    assert addr is not None and addr.replace("{slot}", "0") == b.master_addr(NAME)
    env = contract.pod_env(validate_job(spec_with(**MOVABLE)), node_rank=None,
                           master_addr=b.master_addr(NAME), slot_addr=addr)
    assert env[E.SLOT_ADDR] == addr and E.SLOT_PORTS not in env
    env |= {E.NODE_RANK: "2", "KDIST_DIST_BACKEND": "gloo"}
    plan = resolve_env(env)
    port = int(env[E.MASTER_PORT])
    assert plan.store_moves and plan.address_of(1) == (host_of_1, port)


@pytest.mark.parametrize("backend", ["pytorchjob", "trainjob"])
def test_an_operator_run_kind_renders_no_address_its_store_never_moves(backend):
    assert backends.get(backend).slot_addr(NAME) is None


def test_a_jobset_without_spares_or_min_nodes_renders_no_address():
    (obj,) = render(validate_job(spec_with(**{"spec.backend": "jobset"})))
    assert E.SLOT_ADDR not in _env(obj)
    assert crd.errors(obj) == []


def test_an_elastic_jobset_renders_each_pods_address_and_its_crd_takes_it():
    (obj,) = render(validate_job(spec_with(**MOVABLE, **{"spec.backend": "jobset"})))
    env = _env(obj)
    assert env[E.SLOT_ADDR] == f"{NAME}-node-0-{{slot}}.{NAME}"
    assert env[E.MASTER_ADDR] == f"{NAME}-node-0-0.{NAME}"
    # the addresses resolve under the JobSet's own Service: no subdomain of kdist's
    assert "subdomain" not in obj["spec"]["network"]
    assert crd.errors(obj) == []
