"""The tree at a glance stays true: no import cycles, small modules, a light runtime.

The layers themselves are import-linter's contracts (pyproject.toml, `make lint`).
"""

from __future__ import annotations

import json
import subprocess
import sys
from itertools import combinations
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "kdist"
MAX_LINES = 420
CLI_LIBRARIES = ("pydantic", "jinja2", "yaml", "click", "rich", "kubernetes")


def test_no_import_cycles_between_modules():
    graph = grimp.build_graph("kdist")
    modules = sorted(m for m in graph.modules if not m.endswith("__init__"))
    cycles = []
    for a, b in combinations(modules, 2):
        # Package __init__ files re-export; a cycle through one is still a cycle, so
        # only direct module-to-module chains count here.
        if graph.chain_exists(a, b, as_packages=False) and \
                graph.chain_exists(b, a, as_packages=False):
            cycles.append((a, b))
    assert cycles == [], cycles


def test_no_module_is_too_big_to_hold_in_your_head():
    sizes = {str(p.relative_to(ROOT)): len(p.read_text().splitlines())
             for p in PACKAGE.rglob("*.py")}
    big = {p: n for p, n in sizes.items() if n > MAX_LINES}
    assert big == {}, big


def loaded_by(statement: str) -> list[str]:
    code = (f"import sys; {statement}; import json; "
            "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT).stdout
    return json.loads(out)


@pytest.mark.parametrize("statement", ["import kdist.launch", "import kdist.workloads.ddp",
                                       "import kdist.workloads.pipeline"])
def test_the_runtime_loads_none_of_the_cli_libraries(statement):
    assert set(loaded_by(statement)) & set(CLI_LIBRARIES) == set()


def test_help_loads_neither_pydantic_nor_jinja_nor_the_kubernetes_client():
    top = loaded_by("from kdist.cli import main")
    assert {"pydantic", "jinja2", "kubernetes", "torch"} & set(top) == set()


def loaded_by_cli(*args: str) -> set[str]:
    """Every module a `kdist ARGS` run (in a fresh interpreter) has imported by its end."""
    code = ("import json, sys\nfrom kdist.cli import main\n"
            f"main({list(args)!r}, standalone_mode=False)\n"
            "print('\\nMODULES', json.dumps(sorted(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT).stdout
    return set(json.loads(out.rpartition("\nMODULES ")[2]))


def test_render_loads_no_cluster_client_nor_rich_nor_torch():
    # The cost of a cold `kdist render` is bench figure cli.render_vs_bare_imports.
    top = {m.split(".")[0] for m in loaded_by_cli("render", "examples/ddp-cpu.yaml")}
    assert {"kubernetes", "urllib3", "requests", "rich", "torch"} & top == set()


KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: 'http://127.0.0.1:9'}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""


def test_a_cluster_client_imports_only_the_pieces_of_the_official_package_it_uses(tmp_path):
    """`kubernetes/__init__` imports every subpackage (and the kubeconfig loader `requests`,
    for OIDC refreshes): most of `kdist submit`'s start-up. kdist loads the loaders and the
    connection pool alone, and the packages stay whole for anyone else in the process."""
    (tmp_path / "kubeconfig").write_text(KUBECONFIG)
    code = f"""
import json, sys
from kdist.kube.client import Cluster
from kdist.kube.connect.config import ClusterOptions
cluster = Cluster.connect(ClusterOptions(kubeconfig={str(tmp_path / "kubeconfig")!r}))
assert cluster.server == "http://127.0.0.1:9", cluster.server
before = sorted(sys.modules)
kube_config = sys.modules["kubernetes.config.kube_config"]
import kubernetes, kubernetes.client, requests_oauthlib
from kubernetes import watch
session = kube_config.OAuth2Session(client_id="x")
print(json.dumps({{
    "before": before,
    "whole": [kubernetes.dynamic.__name__, watch.Watch.__name__,
              kubernetes.client.CoreV1Api.__name__, kubernetes.client.V1Pod.__name__],
    "same": [type(session) is requests_oauthlib.OAuth2Session,
             kubernetes.client.Configuration is type(cluster.configuration),
             type(kube_config.ApiClient()) is kubernetes.client.ApiClient],
}}))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT).stdout
    seen = json.loads(out)
    before = set(seen["before"])
    assert {"kubernetes.config.kube_config", "kubernetes.client.rest"} <= before
    assert {"kubernetes.dynamic", "kubernetes.watch", "kubernetes.stream", "requests",
            "requests_oauthlib.oauth2_session", "jsonschema"} & before == set()
    assert not any(m.startswith("kubernetes.client.models.") for m in before)
    assert seen["whole"] == ["kubernetes.dynamic", "Watch", "CoreV1Api", "V1Pod"]
    assert seen["same"] == [True, True, True]
