"""The command line's stand-in for pydantic's plugin loader (kdist.cli.startup)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pydantic

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
