"""Fixtures of the e2e suite: a real cluster, reached only through KUBECONFIG.

Each test gets a fresh namespace that enforces Pod Security "restricted". When
a test fails, its namespace's objects, events and pod logs are printed (pytest
shows them under the failure), with the tails of the test cluster's component
logs (.cluster/logs, or $KDIST_CLUSTER_LOGS); the namespace is deleted after.
"""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

from kdist import backends

REPO = Path(__file__).resolve().parents[2]
CLUSTER_LOGS = Path(os.environ.get("KDIST_CLUSTER_LOGS", REPO / ".cluster" / "logs"))
TERMINAL_PHASES = ("Succeeded", "Failed")
#: Client-side bound of every API call: a dead connection must not hang a test.
REQUEST_TIMEOUT = 30
#: kdist's container in a pod, by backend (``Backend.container``: `node` on a TrainJob,
#: where Trainer and the Kubeflow SDK look for it; `pytorch` elsewhere)
KDIST_CONTAINERS = frozenset(b.container for b in backends.BACKENDS)


def kdist_container(namespace: str, pod: str | client.V1Pod) -> str:
    """The name of kdist's container in `pod` (its name, read with kubectl, or the object)."""
    if isinstance(pod, str):
        names = subprocess.run(
            ["kubectl", "-n", namespace, "get", "pod", pod, "-o",
             "jsonpath={.spec.containers[*].name}"],
            capture_output=True, text=True, check=True, timeout=REQUEST_TIMEOUT).stdout.split()
    else:
        names = [c.name for c in pod.spec.containers]
    found = [n for n in names if n in KDIST_CONTAINERS]
    assert len(found) == 1, f"pod {pod if isinstance(pod, str) else pod.metadata.name}: " \
                            f"containers {names}, kdist's one of {sorted(KDIST_CONTAINERS)}"
    return found[0]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.fspath).parents:
            item.add_marker(pytest.mark.e2e)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"report_{report.when}", report)


@dataclass(frozen=True)
class Kube:
    """The API clients of one cluster, and the waits the e2e tests share."""

    api: client.ApiClient

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    def wait_for(
        self,
        list_fn: Callable[..., Any],
        *args: object,
        name: str,
        done: Callable[[Any], bool],
        timeout: float,
    ) -> Any:
        """Return the object `name` that `list_fn(*args)` lists, once `done(object)`.

        Lists it, then watches from that resourceVersion; a watch that ends or
        expires (410) is resumed from a fresh list. TimeoutError after `timeout` s.
        Objects are models for typed lists and dicts for custom objects.
        """
        deadline = time.monotonic() + timeout
        selector = f"metadata.name={name}"
        while (remaining := deadline - time.monotonic()) > 0:
            listing = list_fn(*args, field_selector=selector, _request_timeout=REQUEST_TIMEOUT)
            items, version = _items_and_version(listing)
            for obj in items:
                if done(obj):
                    return obj
            stream = watch.Watch().stream(
                list_fn,
                *args,
                field_selector=selector,
                resource_version=version,
                timeout_seconds=max(1, int(min(remaining, 60))),
                _request_timeout=min(remaining, 60) + 10,
            )
            try:
                for event in stream:
                    if event["type"] in ("ADDED", "MODIFIED") and done(event["object"]):
                        return event["object"]
            except ApiException as e:
                if e.status != 410:
                    raise
        raise TimeoutError(f"{name} in {args} not done after {timeout:.0f}s")

    def wait_for_pod(
        self,
        namespace: str,
        name: str,
        phases: tuple[str, ...] = TERMINAL_PHASES,
        timeout: float = 180,
    ) -> client.V1Pod:
        """Return the pod once its phase is one of `phases`."""
        return self.wait_for(
            self.core.list_namespaced_pod,
            namespace,
            name=name,
            timeout=timeout,
            done=lambda pod: pod.status.phase in phases,
        )

    def pod_log(self, namespace: str, name: str, container: str | None = None) -> str:
        return self.core.read_namespaced_pod_log(
            name, namespace, container=container, _request_timeout=REQUEST_TIMEOUT
        )


@pytest.fixture(scope="session")
def kube() -> Kube:
    path = os.environ.get("KUBECONFIG")
    if not path:
        pytest.skip("e2e tests need KUBECONFIG (make e2e brings a cluster up and sets it)")
    api = config.new_client_from_config(config_file=path)
    try:
        client.VersionApi(api).get_code(_request_timeout=10)
    except Exception as e:  # noqa: BLE001 - any failure here means: no cluster
        pytest.fail(f"cluster in {path} is unreachable: {e}", pytrace=False)
    return Kube(api)


HARNESS_NODE = "kdist-node"  # tests/cluster/lib.sh NODE_NAME


def require_backend(kube: Kube, name: str) -> None:
    """Backend `name`'s kind must be served: a failure on tests/cluster's own cluster (which
    runs every operator), a skip elsewhere (kind has no JobSet controller, say)."""
    b = backends.get(name)
    if not b.installs:
        return
    group, version = b.kind.api_version.split("/")
    try:
        found = client.CustomObjectsApi(kube.api).get_api_resources(
            group, version, _request_timeout=REQUEST_TIMEOUT)
        served = any(r.name == b.kind.plural for r in found.resources)
    except ApiException as e:
        if e.status != 404:
            raise
        served = False
    if served:
        return
    missing = f"backend {name}: this cluster does not serve {b.kind.api_version} {b.kind.kind}"
    nodes = kube.core.list_node(_request_timeout=REQUEST_TIMEOUT).items
    if [n.metadata.name for n in nodes] == [HARNESS_NODE]:
        pytest.fail(missing)
    pytest.skip(missing)


@pytest.fixture(autouse=True)
def _backend_served(request: pytest.FixtureRequest) -> None:
    """A test run on an operated backend (its `backend` parameter) needs its operator."""
    callspec = getattr(request.node, "callspec", None)
    name = callspec.params.get("backend") if callspec is not None else None
    if isinstance(name, str) and name in backends.NAMES and backends.get(name).installs:
        require_backend(request.getfixturevalue("kube"), name)


def create_namespace(kube: Kube, base: str) -> str:
    """A fresh namespace named after `base` that enforces Pod Security "restricted"."""
    base = re.sub(r"[^a-z0-9]+", "-", base.lower()).strip("-")[:40].strip("-")
    name = f"e2e-{base}-{secrets.token_hex(3)}"
    kube.core.create_namespace(
        client.V1Namespace(
            metadata=client.V1ObjectMeta(
                name=name,
                labels={
                    "pod-security.kubernetes.io/enforce": "restricted",
                    "pod-security.kubernetes.io/enforce-version": "latest",
                    "app.kubernetes.io/part-of": "kdist-e2e",
                },
            )
        ),
        _request_timeout=REQUEST_TIMEOUT,
    )
    _wait_for_default_service_account(kube, name)
    return name


def drop_namespace(kube: Kube, name: str, failed: bool) -> None:
    """Delete a test namespace, printing what was in it first when its test failed."""
    if failed:
        print(dump_namespace(kube, name))
        print(tail_cluster_logs())
    kube.core.delete_namespace(
        name, propagation_policy="Background", _request_timeout=REQUEST_TIMEOUT
    )


def _failed(node: pytest.Item) -> bool:
    return any(
        getattr(node, f"report_{when}", None) and getattr(node, f"report_{when}").failed
        for when in ("setup", "call")
    )


@pytest.fixture
def namespace(kube: Kube, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace enforcing Pod Security "restricted"; dumped on failure, then deleted."""
    name = create_namespace(kube, request.node.name)
    yield name
    drop_namespace(kube, name, _failed(request.node))


def _items_and_version(listing: Any) -> tuple[list[Any], str]:
    if isinstance(listing, dict):
        return listing["items"], listing["metadata"]["resourceVersion"]
    return listing.items, listing.metadata.resource_version


def _wait_for_default_service_account(kube: Kube, namespace: str, timeout: float = 30) -> None:
    # Pods are refused until the controller-manager made the "default" SA.
    stream = watch.Watch().stream(
        kube.core.list_namespaced_service_account,
        namespace,
        field_selector="metadata.name=default",
        timeout_seconds=int(timeout),
        _request_timeout=timeout + 10,
    )
    for event in stream:
        if event["type"] == "ADDED":
            return
    raise TimeoutError(f"no default ServiceAccount in {namespace} after {timeout:.0f}s")


def dump_namespace(kube: Kube, namespace: str) -> str:
    """Everything a failed test left in its namespace, as text."""
    core, api = kube.core, kube.api
    out = [f"\n===== namespace {namespace}: objects"]
    listings = [
        ("pods", core.list_namespaced_pod),
        ("services", core.list_namespaced_service),
        ("endpointslices", client.DiscoveryV1Api(api).list_namespaced_endpoint_slice),
        ("jobs", client.BatchV1Api(api).list_namespaced_job),
    ]
    for kind, list_fn in listings:
        out.append(
            _dump_list(api, kind, lambda f=list_fn: f(namespace, _request_timeout=REQUEST_TIMEOUT))
        )
    operated = [(b.kind.group, b.kind.api_version.split("/")[1], b.kind.plural)
                for b in backends.BACKENDS if b.installs]
    for group, version, plural in (*operated, ("kueue.x-k8s.io", "v1beta2", "workloads"),
                                   ("kueue.x-k8s.io", "v1beta2", "localqueues")):
        out.append(
            _dump_list(
                api,
                plural,
                lambda g=group, v=version, p=plural: client.CustomObjectsApi(
                    api).list_namespaced_custom_object(
                        g, v, namespace, p, _request_timeout=REQUEST_TIMEOUT),
            )
        )
    out.append(f"===== namespace {namespace}: events")
    try:
        events = core.list_namespaced_event(namespace, _request_timeout=REQUEST_TIMEOUT).items
        events.sort(
            key=lambda e: str(e.last_timestamp or e.event_time or e.metadata.creation_timestamp)
        )
        out += [
            f"{e.last_timestamp or e.event_time} {e.type} {e.involved_object.kind}/"
            f"{e.involved_object.name} {e.reason}: {e.message}"
            for e in events
        ]
    except ApiException as e:
        out.append(f"(events: {e.status} {e.reason})")
    out.append(f"===== namespace {namespace}: pod logs")
    try:
        pods = core.list_namespaced_pod(namespace, _request_timeout=REQUEST_TIMEOUT).items
    except ApiException:
        pods = []
    for pod in pods:
        containers = [c.name for c in (pod.spec.init_containers or []) + pod.spec.containers]
        for c in containers:
            try:
                text = core.read_namespaced_pod_log(
                    pod.metadata.name,
                    namespace,
                    container=c,
                    tail_lines=200,
                    _request_timeout=REQUEST_TIMEOUT,
                )
            except ApiException as e:
                text = f"(no log: {e.status} {e.reason})"
            out.append(f"--- {pod.metadata.name}/{c}\n{text}")
    return "\n".join(out)


def _dump_list(api: client.ApiClient, kind: str, list_fn) -> str:
    try:
        result = list_fn()
    except ApiException as e:
        return f"--- {kind}: ({e.status} {e.reason})"
    data = api.sanitize_for_serialization(result) if not isinstance(result, dict) else result
    items = data.get("items", [])
    for item in items:
        item.get("metadata", {}).pop("managedFields", None)
    return f"--- {kind} ({len(items)})\n" + (
        yaml.safe_dump(items, sort_keys=False) if items else ""
    )


def tail_cluster_logs(lines: int = 30) -> str:
    """The last lines of each test-cluster component's log, if this machine has them."""
    if not CLUSTER_LOGS.is_dir():
        return f"(no cluster logs at {CLUSTER_LOGS})"
    out = [f"===== cluster component logs ({CLUSTER_LOGS})"]
    for log in sorted(CLUSTER_LOGS.glob("*.log")):
        with log.open(errors="replace") as f:
            tail = deque(f, maxlen=lines)
        out.append(f"--- {log.name}\n{''.join(tail)}")
    return "\n".join(out)
