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
