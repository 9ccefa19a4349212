"""job.yaml described from the spec model itself, so the description never drifts from
what `kdist validate` accepts: the JSON Schema editors read, and the field tree behind
`kdist explain` and docs/reference.md (``kdist.spec.docsgen`` writes both files).
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass, field
from typing import Any

from kdist.shared.errors import UsageError
from kdist.shared.names import DNS1035_LABEL, DNS1123_LABEL, MAX_JOB_NAME
from kdist.spec.model import TrainingJob
from kdist.spec.quantity import QUANTITY_PATTERN

API_VERSION = "kdist/v1alpha1"
KIND = "TrainingJob"
SCHEMA_FILE = "job.schema.json"  # beside this module: package data, shipped with pip
_MISSING = object()
EACH_DEFAULT = "each field's default"  # an object's default is its fields' defaults


def job_schema() -> dict[str, Any]:
    """The JSON Schema (draft-07, what yaml-language-server reads) of a job.yaml."""
    schema = _portable(TrainingJob.model_json_schema(by_alias=True, mode="validation"))
    _add_patterns(schema["definitions"])
    return {"$schema": "http://json-schema.org/draft-07/schema#",
            "title": "kdist TrainingJob (job.yaml)", **schema}


def _label(pattern: str, most: int) -> dict[str, Any]:
    return {"pattern": f"^{pattern}$", "maxLength": most}


#: What the model checks in its validators (code the schema cannot see), said again as
#: patterns so an editor flags a bad name or quantity where `kdist validate` would:
#: (definition, property) -> the keywords its string takes.
_PATTERNS: dict[tuple[str, str], dict[str, Any]] = {
    ("Metadata", "name"): _label(DNS1035_LABEL.pattern, MAX_JOB_NAME),
    ("Metadata", "namespace"): _label(DNS1123_LABEL.pattern, 63),
    ("PodVolume", "name"): _label(DNS1123_LABEL.pattern, 63),
    **{("Resources", q): {"pattern": QUANTITY_PATTERN} for q in ("cpu", "memory", "shm")},
    ("ScratchSource", "sizeLimit"): {"pattern": QUANTITY_PATTERN},
}


def _add_patterns(definitions: dict[str, Any]) -> None:
    """Each pattern of _PATTERNS onto its property (the string branch of an anyOf); a
    property that is gone from the model is an error here, not a pattern lost quietly."""
    for (name, prop), keywords in _PATTERNS.items():
        node = definitions[name]["properties"][prop]
        branches = [b for b in node.get("anyOf", [node]) if "string" in (
            b.get("type") if isinstance(b.get("type"), list) else [b.get("type")])]
        if not branches:
            raise ValueError(f"{name}.{prop}: no string in its schema to take a pattern")
        branches[0].update(keywords)


def schema_text() -> str:
    """job_schema() as the committed file holds it: stable key order, one trailing newline."""
    return json.dumps(job_schema(), indent=2, ensure_ascii=False) + "\n"


def _portable(node: Any) -> Any:
    """pydantic's 2020-12 schema as draft-07 says it, which every editor reads: types under
    "definitions", and a $ref with a description or default beside it wrapped in allOf
    (draft-07 ignores a $ref's siblings). pydantic's titles ("Procspernode") only repeat
    the key, worse: dropped. Only schema keywords are touched, never values (defaults)."""
    if isinstance(node, list):
        return [_portable(n) for n in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "title":
            continue
        if key in ("properties", "$defs"):
            out["definitions" if key == "$defs" else key] = {
                name: _portable(sub) for name, sub in value.items()}
        elif key in ("items", "additionalProperties", "anyOf", "allOf", "oneOf"):
            out[key] = _portable(value)
        elif key == "$ref":
            out[key] = value.replace("#/$defs/", "#/definitions/")
        else:
            out[key] = value  # default, enum, const...: values, kept as they are
    if "$ref" in out and len(out) > 1:
        out = {"allOf": [{"$ref": out.pop("$ref")}], **out}
    return out


@dataclass(frozen=True)
class FieldDoc:
    """One field of job.yaml, as `kdist explain` shows it."""

    path: str                   # "spec.checkpoint"; "" for the whole TrainingJob
    type: str                   # "Object", "[]Object", "integer", "map[string]string", ...
    description: str            # the field's own words
    type_doc: str = ""          # what its object type says of itself (a class docstring)
    required: bool = False
    default: Any = _MISSING     # a JSON value; _MISSING when there is none
    values: str = ""            # "one of: auto, nccl, gloo", "1 to 1000"
    fields: tuple[FieldDoc, ...] = field(default=(), repr=False)
    ref: str = ""               # the named type it is ("Checkpoint"); "" when inline

    @property
    def name(self) -> str:
        return self.path.rsplit(".", 1)[-1] if self.path else KIND

    @property
    def has_default(self) -> bool:
        return self.default is not _MISSING

    @property
    def doc(self) -> str:
        """Everything said about it: the field's words, then its type's."""
        return "\n".join(dict.fromkeys(d for d in (self.description, self.type_doc) if d))

    def default_text(self) -> str:
        """The default as YAML would spell it ("" when there is none, or it is unset)."""
        if not self.has_default or self.default is None:
            return ""
        if isinstance(self.default, dict) and self.fields and self.default:
            return EACH_DEFAULT
        return json.dumps(self.default)


def tree(schema: dict[str, Any] | None = None) -> FieldDoc:
    """The whole TrainingJob as a FieldDoc tree."""
    schema = schema or job_schema()
    return _doc("", schema, schema["definitions"], required=True, depth=0)


def _resolve(node: dict[str, Any], defs: dict[str, Any]) -> tuple[dict[str, Any], str, str]:
    """The node with its $ref and optional-null wrapper undone, the named type,
    and that type's own description (the field's stays in "description")."""
    options = [o for o in node.get("anyOf", []) if o != {"type": "null"}]
    if len(options) == 1:
        node = {**{k: v for k, v in node.items() if k != "anyOf"}, **options[0]}
    wrapped = node.get("allOf", [])
    if len(wrapped) == 1 and "$ref" in wrapped[0]:  # draft-07's $ref with siblings
        node = {**{k: v for k, v in node.items() if k != "allOf"}, **wrapped[0]}
    ref = node.get("$ref", "")
    if not ref:
        return node, "", ""
    name = ref.rsplit("/", 1)[-1]
    target = defs[name]
    merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
    merged["description"] = node.get("description", "")
    return merged, name, _oneline(target.get("description", ""))


def _oneline(text: str) -> str:
    return " ".join(text.split())


def _type(node: dict[str, Any], defs: dict[str, Any]) -> str:
    node, _, _ = _resolve(node, defs)
    if "anyOf" in node:
        return " | ".join(_type(o, defs) for o in node["anyOf"])
    if "const" in node:
        return json.dumps(node["const"])
    kind = node.get("type")
    if isinstance(kind, list):  # ["string", "number"]: a YAML number is read as its text
        kind = kind[0]
    if kind == "array":
        return "[]" + _type(node.get("items", {}), defs)
    if kind == "object":
        extra = node.get("additionalProperties")
        if "properties" in node or not isinstance(extra, dict):
            return "Object"
        return "map[string]" + _type(extra, defs)
    return str(kind or "any")


def _values(node: dict[str, Any]) -> str:
    if "enum" in node:
        return "one of: " + ", ".join(json.dumps(v) if v == "" else str(v) for v in node["enum"])
    low, high = node.get("minimum"), node.get("maximum")
    if low is not None and high is not None:
        return f"{low} to {high}"
    return ""


def _doc(path: str, node: dict[str, Any], defs: dict[str, Any], *, required: bool,
         depth: int) -> FieldDoc:
    node, ref, type_doc = _resolve(node, defs)
    inner = node
    while inner.get("type") == "array":  # a list's fields are its items' fields
        inner, ref, type_doc = _resolve(inner.get("items", {}), defs)
    props = inner.get("properties", {})
    need = set(inner.get("required", []))
    subs = tuple(_doc(f"{path}.{name}" if path else name, sub, defs, required=name in need,
                      depth=depth + 1) for name, sub in props.items()) if depth < 32 else ()
    return FieldDoc(path=path, type=_type(node, defs),
                    description=_oneline(node.get("description", "")), type_doc=type_doc,
                    required=required, default=node.get("default", _MISSING),
                    values=_values(inner), fields=subs, ref=ref)


def explain(path: str) -> FieldDoc:
    """The field at `path` ("spec.checkpoint"; "" or "trainingjob" for the whole job).

    An unknown field is a UsageError naming the closest field there is.
    """
    node = tree()
    parts = [p for p in path.strip().split(".") if p] if path.strip() else []
    if parts and parts[0].lower() in (KIND.lower(), "trainingjobs"):
        parts = parts[1:]
    for i, part in enumerate(parts):
        by_name = {f.name: f for f in node.fields}
        if part in by_name:
            node = by_name[part]
            continue
        where = ".".join(parts[:i])
        raise UsageError(_unknown(".".join(parts[: i + 1]), where, node, part))
    return node


def _unknown(wrong: str, where: str, node: FieldDoc, part: str) -> str:
    if not node.fields:
        return f"{wrong}: no such field: {where} is {node.type}, it has no fields"
    names = [f.name for f in node.fields]
    squash = {n.lower().replace("_", ""): n for n in names}
    close = [squash[part.lower().replace("_", "").replace("-", "")]] \
        if part.lower().replace("_", "").replace("-", "") in squash else \
        difflib.get_close_matches(part, names, n=1, cutoff=0.6)
    prefix = f"{where}." if where else ""
    if close:
        return f"{wrong}: no such field; did you mean {prefix}{close[0]}?"
    return f"{wrong}: no such field; {where or KIND} has: {', '.join(names)}"
