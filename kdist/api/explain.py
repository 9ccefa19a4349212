"""`kdist explain` and `kdist init`'s schema line: job.yaml described from the spec model."""

from __future__ import annotations

import os
from pathlib import Path

from kdist.spec import schema
from kdist.spec.schema import API_VERSION, KIND, FieldDoc, explain

__all__ = ["API_VERSION", "KIND", "FieldDoc", "explain", "schema_modeline"]


def schema_modeline(job_dir: Path) -> str:
    """The yaml-language-server line that points editors at job.yaml's JSON Schema.

    It names the schema file this kdist ships (package data), so the editor checks
    against the very rules `kdist validate` applies, offline, with no URL to keep alive
    (kdist publishes none, and a cluster's network often reaches none). The path is
    relative to the job file's directory when the schema lies below it (a checkout, a
    project's own .venv: the line stays true when the project moves or is cloned with
    its venv), else absolute (a system or user-wide install: a relative path with many
    `..` would break as soon as the job file moves). yaml-language-server resolves both.
    """
    target = Path(schema.__file__).resolve().with_name(schema.SCHEMA_FILE)
    base = job_dir.resolve()
    spelled = os.path.relpath(target, base) if target.is_relative_to(base) else str(target)
    return f"# yaml-language-server: $schema={Path(spelled).as_posix()}\n"
