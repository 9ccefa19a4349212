"""The command line's stand-in for pydantic's plugin loader (kdist.cli.startup)."""

from __future__ import annotations

import ast
import os
import resource
import subprocess
import sys
from pathlib import Path

import pydantic
import pytest

from tests.unit import golden


def test_pydantic_asks_its_plugin_loader_for_get_plugins_only():
    """The stand-in has get_plugins alone: a pydantic that imports more from it must fail here."""
    asked: set[str] = set()
    for path in Path(pydantic.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").endswith("_loader"):
                asked |= {a.name for a in node.names}
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                    and node.value.id == "_loader":
                asked.add(node.attr)
    assert asked == {"get_plugins"}, asked


def _run(code: str) -> None:
    subprocess.run([sys.executable, "-c", code], check=True, cwd=golden.ROOT)


def test_the_command_renders_without_scanning_installed_packages():
    _run("import sys, json; from click.testing import CliRunner; from kdist.cli import main; "
         "r = CliRunner().invoke(main, ['render', 'examples/ddp-cpu.yaml', '-o', 'json']); "
         "assert r.exit_code == 0, r.output; "
         "assert json.loads(r.output)['items'][0]['kind'] == 'Job'; "
         "assert 'importlib.metadata' not in sys.modules, 'pydantic scanned entry points'")


def test_the_python_api_keeps_pydantics_own_loader():
    _run("import sys, kdist; kdist.render(kdist.load_job('examples/ddp-cpu.yaml')); "
         "assert hasattr(sys.modules['pydantic.plugin._loader'], 'PYDANTIC_ENTRY_POINT_GROUP')")


#: What `kdist render` must not import: the cluster client and the cluster verbs (their
#: modules load when one of them runs), the run-time side, and what only those need.
NOT_FOR_RENDER = ("kdist.kube", "kdist.api.types", "kdist.api.clients", "kdist.api.jobs",
                  "kdist.api.many",
                  "kdist.api.shortcuts", "kdist.api.stream", "kdist.api.steps",
                  "kdist.api.calls", "kdist.cli.cluster_verbs", "kdist.cli.listing",
                  "kdist.cli.logs", "kdist.cli.check", "kdist.cli.submitting",
                  "kdist.cli.progress", "kdist.local", "kdist.runtime", "kubernetes",
                  "urllib3", "rich", "torch")


def _imported(args: list[str], env: dict[str, str]) -> set[str]:
    out = subprocess.run([sys.executable, "-X", "importtime", *args], cwd=golden.ROOT, env=env,
                         capture_output=True, text=True, check=True)
    return {line.rsplit("|", 1)[1].strip() for line in out.stderr.splitlines()
            if line.startswith("import time:") and "|" in line}


def _env(tmp_path: Path) -> dict[str, str]:
    """Bytecode written and read under tmp_path, as an installed kdist has it (pip compiles
    on install): a run without it measures the compiler, not kdist's imports."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(tmp_path / "pycache")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(golden.ROOT),
                                                      env.get("PYTHONPATH")]))
    return env


def test_render_imports_no_cluster_code(tmp_path):
    imported = _imported(["-m", "kdist", "render", "examples/ddp-cpu.yaml"], _env(tmp_path))
    assert "kdist.rendering.render" in imported  # importtime did watch the render
    loaded = sorted(m for m in imported if m.startswith(NOT_FOR_RENDER))
    assert loaded == [], f"kdist render imported {loaded}: import them where they are used"


def _cpu_seconds(args: list[str], env: dict[str, str]) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, *args], cwd=golden.ROOT, env=env, check=True,
                   stdout=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


@pytest.mark.timeout(120)
def test_render_starts_within_three_times_bare_imports(tmp_path):
    """docs: a cold `kdist render` costs at most 3x `import click, jinja2, yaml` (bench/cli.py
    measures the wall time; here CPU time, the best of several runs, which a busy machine
    disturbs least)."""
    env = _env(tmp_path)
    render, bare = ["-m", "kdist", "render", "examples/ddp-cpu.yaml"], \
        ["-c", "import click, jinja2, yaml"]
    subprocess.run([sys.executable, "-m", "compileall", "-q", "kdist"], cwd=golden.ROOT,
                   env=env, check=True, stdout=subprocess.DEVNULL)
    _cpu_seconds(render, env)  # the bytecode of everything it imports, written once
    times: dict[str, list[float]] = {"render": [], "bare": []}
    for _ in range(7):  # interleaved: a load spike hits both
        times["render"].append(_cpu_seconds(render, env))
        times["bare"].append(_cpu_seconds(bare, env))
    ratio = min(times["render"]) / min(times["bare"])
    assert ratio < 3.0, f"cold kdist render is {ratio:.2f}x bare imports: {times}"
