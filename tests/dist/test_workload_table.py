"""kdist.spec.workloads (validate's torch-free table) agrees with the workloads' real parsers."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import kdist.workloads
from kdist.spec.workloads import AT_LEAST, VALUES, WORKLOADS, value_problem


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


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_the_table_has_each_parsers_value_types_and_choices(name):
    parser = importlib.import_module(f"kdist.workloads.{name}").build_parser()
    for action in parser._actions:
        if action.nargs == 0:
            continue
        flag = max(action.option_strings, key=len)
        want = tuple(action.choices) if action.choices else (action.type or str)
        assert VALUES.get(flag, str) == want, (name, flag)


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_the_least_values_are_the_workloads_own(name):
    """A value just under the table's least is refused by the workload's own checks in the
    words validate uses (kdist.spec.workloads.value_problem); the least itself is not."""
    module = importlib.import_module(f"kdist.workloads.{name}")
    checks = [importlib.import_module("kdist.workloads.common").check_args]
    if name == "fsdp":
        checks.append(importlib.import_module("kdist.workloads.transformer").check_model_args)
    valued = WORKLOADS[name][0]

    def refused(args: list[str]) -> str | None:
        parser = module.build_parser()
        parser.error = lambda message: (_ for _ in ()).throw(ValueError(message))
        try:
            parsed = parser.parse_args(args)
            for check in checks:
                check(parser, parsed)
        except ValueError as e:
            return str(e)
        return None

    for flag, least in AT_LEAST.items():
        if flag not in valued:
            continue
        below = least - (1 if VALUES[flag] is int else 0.5)
        assert refused([f"{flag}={below:g}"]) == value_problem(flag, f"{below:g}"), flag
        # The least itself is not refused for this flag (other rules, such as --heads
        # dividing --hidden, may still apply).
        assert not (refused([f"{flag}={least:g}"]) or "").startswith(f"{flag} must be"), flag
        assert value_problem(flag, f"{least:g}") is None, flag
    assert refused(["--step-delay=3601"]) == value_problem("--step-delay", "3601")
