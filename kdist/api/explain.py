"""`kdist explain`, `kdist schema` and `kdist init`'s schema line: job.yaml described from
the spec model."""

from __future__ import annotations

from kdist.spec.schema import API_VERSION, KIND, SCHEMA_FILE, FieldDoc, explain, schema_text

__all__ = ["API_VERSION", "KIND", "SCHEMA_MODELINE", "FieldDoc", "explain", "schema_text"]

#: The yaml-language-server line `kdist init` writes first: the schema beside the job
#: file, where `kdist schema > job.schema.json` puts it. Never a path into this install
#: (site-packages moves with every venv and upgrade), nor a URL (kdist publishes none,
#: and a cluster's network often reaches none): a file the project keeps, offline.
SCHEMA_MODELINE = f"# yaml-language-server: $schema=./{SCHEMA_FILE}\n"
