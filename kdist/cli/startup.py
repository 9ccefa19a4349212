"""What the `kdist` command sets up before anything imports pydantic.

pydantic looks for plugins the first time it builds a model: it imports
``importlib.metadata`` (and ``email`` under it) and reads the entry points of
every installed distribution. With the template cache, that was a tenth of a
cold `kdist render`'s CPU here (bench/README.md, "CLI"), more where more
packages are installed. The spec models are kdist's own and want no plugin,
so the command line gives pydantic a plugin loader that finds none, as
``PYDANTIC_DISABLE_PLUGINS=__all__`` does, without the scan's imports. Only
where the command line is imported (``kdist``, ``python -m kdist``): the
Python API (``import kdist``) leaves pydantic alone, and no child process
inherits it. tests/unit/test_cli_startup.py fails if a pydantic upgrade asks
its loader for more than ``get_plugins``.
"""

from __future__ import annotations

import sys
from importlib.abc import Loader, MetaPathFinder
from importlib.machinery import ModuleSpec
from types import ModuleType

_LOADER = "pydantic.plugin._loader"


class _NoPlugins(MetaPathFinder, Loader):
    """An import hook that answers for pydantic's plugin loader alone, when pydantic asks."""

    def find_spec(self, name: str, path: object = None,
                  target: object = None) -> ModuleSpec | None:
        return ModuleSpec(name, self) if name == _LOADER else None

    def create_module(self, spec: ModuleSpec) -> None:
        return None

    def exec_module(self, module: ModuleType) -> None:
        module.__doc__ = "kdist's stand-in (kdist.cli.startup): no pydantic plugins here."
        module.get_plugins = lambda: ()  # type: ignore[attr-defined]


def skip_pydantic_plugins() -> None:
    """Make pydantic's plugin lookup find none, unless pydantic has looked already."""
    if _LOADER in sys.modules or any(isinstance(f, _NoPlugins) for f in sys.meta_path):
        return
    sys.meta_path.insert(0, _NoPlugins())
