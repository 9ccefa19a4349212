"""Every string field of the spec against hostile strings (issue 14's broad fuzz pass).

For each field, values come from strategies of YAML-special words, numbers YAML
rewrites, unicode line breaks, control characters and huge numbers, written
both quoted (as PyYAML dumps them) and bare (as a user would type them). A
case passes when the spec is refused with one-line, field-path problems, or
when it is accepted and the value reaches the rendered objects exactly as the
user wrote it (a container never gets `8` for `010`), and those objects
survive kdist's YAML output unchanged.
"""

from __future__ import annotations

import json
import os
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kdist.rendering import render, to_yaml
from kdist.shared.errors import SpecError
from kdist.spec import parse_job
from tests.unit.helpers import spec_with

YAML_WORDS = ["y", "Y", "n", "N", "yes", "No", "on", "OFF", "true", "False", "null", "Null",
              "~", "", " ", "<<", "=", "-", "?", ":", "!", "&a", "*a", "|", ">", "%", "@", "`",
              "#x", "- x", "? x", "k: v", "a #b", "[x]", "{x: 1}", "'", '"', "\\", "---", "..."]
NUMBERS = ["1.10", "010", "0o17", "0x1F", "0b101", "1_000", "1:30", "190:20:30", ".nan", ".inf",
           "-.inf", "+1", "-0", "1e3", "1.0e+3", "2001-12-14", "2001-12-14t21:59:43.10-05:00",
           "9" * 400, "1" * 5000, "0x" + "f" * 300, "1e99999"]
BREAKS = ["\u0085", "\u2028", "\u2029", "\n", "\r", "\r\n", "\t", "\x0b", "\x0c"]
# More with KDIST_FUZZ_EXAMPLES=N (the closing notes quote such runs).
EXAMPLES = int(os.environ.get("KDIST_FUZZ_EXAMPLES", "1500"))
CONTROLS = [chr(c) for c in range(0, 32)] + ["\x7f", "\x80", "\x9f", "\ufeff", "\ufffe"]

special = st.sampled_from(YAML_WORDS + NUMBERS)
mixed = st.builds(lambda a, b, c: a + b + c, st.sampled_from(["", "x", "a-1", "1"]),
                  st.sampled_from(BREAKS + CONTROLS + ["", " "]),
                  st.sampled_from(["", "y", "x", "0"]))
values = st.one_of(special, mixed, st.text(max_size=40),
                   st.text(alphabet=st.sampled_from([c for c in BREAKS + CONTROLS if len(c) == 1]
                                                    + list("ab1: -")),
                           max_size=12))

# Where each value goes: the path in the spec and how to read it back from a rendered pod.
FIELDS: dict[str, tuple[str, Any]] = {
    "name": ("metadata.name", None),
    "namespace": ("metadata.namespace", None),
    "label_value": ("metadata.labels", lambda v: {"team": v}),
    "label_key": ("metadata.labels", lambda v: {v: "x"}),
    "image": ("spec.image", None),
    "module": ("spec.workload", lambda v: {"module": v}),
    "command": ("spec.workload", lambda v: {"command": [v, "x"]}),
    "arg": ("spec.workload", lambda v: {"module": "m", "args": ["--a", v]}),
    "env_value": ("spec.env", lambda v: {"A": v}),
    "env_name": ("spec.env", lambda v: {v: "x"}),
    "secret": ("spec.envFrom", lambda v: [{"secretRef": {"name": v}}]),
    "prefix": ("spec.envFrom", lambda v: [{"configMapRef": {"name": "c"}, "prefix": v}]),
    "ckpt_path": ("spec.checkpoint", lambda v: {"path": v, "volume": {"emptyDir": {}}}),
    "claim": ("spec.checkpoint", lambda v: {"path": "/c", "volume": {
        "persistentVolumeClaim": {"claimName": v}}}),
    "selector": ("spec.scheduling", lambda v: {"nodeSelector": {"k": v}}),
    "toleration": ("spec.scheduling", lambda v: {"tolerations": [
        {"key": "k", "operator": "Equal", "value": v}]}),
    "priority": ("spec.scheduling", lambda v: {"priorityClassName": v}),
    "queue": ("spec.scheduling", lambda v: {"queue": v}),
    "cpu": ("spec.resources", lambda v: {"cpu": v}),
    "memory": ("spec.resources", lambda v: {"memory": v}),
}


def checked(text: bytes) -> list[dict[str, Any]] | None:
    """The rendered objects, or None when refused; fails on anything else."""
    try:
        job = parse_job(text, "fuzz.yaml")
    except SpecError as e:
        assert e.problems, "a refusal names at least one problem"
        for p in e.problems:
            assert p.startswith("fuzz.yaml: ") and "\n" not in p, p
        return None
    objects = render(job)
    reread = list(yaml.safe_load_all(to_yaml(objects)))
    assert reread == json.loads(json.dumps(objects)), "kdist's YAML changed a value"
    return objects


def bare_yaml(field: str, value: str) -> bytes | None:
    """The spec with `value` typed unquoted where YAML allows it (what a user writes)."""
    if any(c in value for c in "\n\r{}[],#&*!|>'\"%@`") or value.strip() != value or not value:
        return None
    path, wrap = FIELDS[field]
    placeholder = "PLACEHOLDER-7f3a"
    doc = spec_with(**{path: wrap(placeholder) if wrap else placeholder})
    text = yaml.safe_dump(doc, allow_unicode=True, width=1 << 20)
    return text.replace(placeholder, value).encode("utf-8", "surrogatepass")


VERBATIM = {"env_value", "arg", "image", "command", "selector", "toleration", "queue",
            "label_value", "name", "namespace", "module", "secret", "claim", "priority"}


def lands_exactly(field: str, value: str, objects: list[dict[str, Any]]) -> None:
    """An accepted value reaches the pod (or object) as the very same string ("" = unset)."""
    blob = json.dumps(objects, ensure_ascii=False)
    if value and field in VERBATIM:
        assert json.dumps(value, ensure_ascii=False) in blob, (field, value)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(field=st.sampled_from(sorted(FIELDS)), value=values)
def test_every_string_field_quoted(field, value):
    path, wrap = FIELDS[field]
    doc = spec_with(**{path: wrap(value) if wrap else value})
    text = yaml.safe_dump(doc, allow_unicode=True).encode("utf-8", "surrogatepass")
    objects = checked(text)
    if objects is not None:
        lands_exactly(field, value, objects)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(field=st.sampled_from(sorted(FIELDS)), value=st.one_of(special, mixed))
def test_every_string_field_bare(field, value):
    text = bare_yaml(field, value)
    if text is None:
        return
    objects = checked(text)
    if objects is not None and field in ("env_value", "arg"):
        # A bare value that YAML would turn into another value must have been refused.
        assert json.dumps(value, ensure_ascii=False) in json.dumps(objects, ensure_ascii=False)
