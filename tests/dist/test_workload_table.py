"""kdist.spec.workloads (validate's torch-free table) agrees with the workloads' real parsers."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import kdist.workloads
from kdist.spec.workloads import WORKLOADS


def runnable() -> list[str]:
    """The modules under kdist.workloads that are workloads: they build a parser."""
    names = [m.name for m in pkgutil.iter_modules(kdist.workloads.__path__)]
    return sorted(n for n in names
                  if hasattr(importlib.import_module(f"kdist.workloads.{n}"), "build_parser"))


def test_the_table_names_every_workload():
    assert sorted(WORKLOADS) == runnable()


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_the_table_has_each_parsers_flags(name):
    parser = importlib.import_module(f"kdist.workloads.{name}").build_parser()
    valued = {s for a in parser._actions if a.nargs != 0 for s in a.option_strings}
    flags = {s for a in parser._actions if a.nargs == 0 for s in a.option_strings}
    assert (set(WORKLOADS[name][0]), set(WORKLOADS[name][1])) == (valued, flags)
    assert not any(a.nargs not in (None, 0) for a in parser._actions), \
        "a flag with nargs other than one value or none: teach kdist.spec.workloads"
    assert not any(not a.option_strings for a in parser._actions), \
        "a positional argument: teach kdist.spec.workloads"
    assert parser.allow_abbrev, "kdist.spec.workloads accepts prefixes as argparse does"
