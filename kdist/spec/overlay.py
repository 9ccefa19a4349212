"""``spec.podTemplateOverlay``: the rules an overlay must follow, checked on the
overlay itself when the spec is loaded (so ``kdist validate`` names the field).

The overlay is a strategic-merge-style patch on the rendered pod template
(``kdist.rendering.overlay`` applies it). It may add or change anything kdist
has no field for, but not what kdist's launcher relies on: the ``pytorch``
container's name, command, args and image, the environment contract (its env
and envFrom keep spec.env's and spec.envFrom's rules), the pod's restartPolicy
and subdomain, and kdist's labels.
"""

from __future__ import annotations

import math
import re
from typing import Any

from kdist.shared.labels import RESERVED_LABEL_PREFIXES, is_reserved
from kdist.spec import checks as C

CONTAINER = "pytorch"
# Fields of a v1.37 PodSpec and Container (tests/unit/test_overlay.py keeps these
# equal to the Kubernetes schema): a misspelt key fails here with its path, not
# as a silently pruned field on the server.
POD_SPEC_FIELDS = frozenset({
    "activeDeadlineSeconds", "affinity", "automountServiceAccountToken", "containers",
    "dnsConfig", "dnsPolicy", "enableServiceLinks", "ephemeralContainers", "evictionResponders",
    "hostAliases",
    "hostIPC", "hostNetwork", "hostPID", "hostUsers", "hostname", "hostnameOverride",
    "imagePullSecrets", "initContainers", "nodeName", "nodeSelector", "os", "overhead",
    "preemptionPolicy", "priority", "priorityClassName", "readinessGates", "resourceClaims",
    "resources", "restartPolicy", "runtimeClassName", "schedulerName", "schedulingGates",
    "schedulingGroup",
    "securityContext", "serviceAccount", "serviceAccountName", "setHostnameAsFQDN",
    "shareProcessNamespace", "subdomain", "terminationGracePeriodSeconds", "tolerations",
    "topologySpreadConstraints", "volumes",
})
CONTAINER_FIELDS = frozenset({
    "args", "command", "env", "envFrom", "image", "imagePullPolicy", "lifecycle",
    "livenessProbe", "name", "ports", "readinessProbe", "resizePolicy", "resources",
    "restartPolicy", "restartPolicyRules", "securityContext", "startupProbe", "stdin",
    "stdinOnce", "terminationMessagePath", "terminationMessagePolicy", "tty", "volumeDevices",
    "volumeMounts", "workingDir",
})
# Lists merged item by item, by this key (Kubernetes' own patch merge keys);
# every other list is replaced whole.
MERGE_KEYS = {
    "containers": "name", "initContainers": "name", "ephemeralContainers": "name",
    "volumes": "name", "env": "name", "volumeMounts": "mountPath", "ports": "containerPort",
    "imagePullSecrets": "name", "hostAliases": "ip", "resourceClaims": "name",
    "schedulingGates": "name", "topologySpreadConstraints": "topologyKey",
    "volumeDevices": "devicePath",
}
CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")
PATCH = "$patch"
_DECIMAL = re.compile(r"-?(0|[1-9][0-9]*)")
# Set by kdist from the spec; the overlay must leave them alone (what to use instead).
_PROTECTED_POD = {"restartPolicy": "the backend decides it",
                  "subdomain": "the rendezvous DNS name depends on it",
                  "schedulingGroup": "use spec.distributed.gang"}
_PROTECTED_CONTAINER = {"name": "kdist's container is `pytorch`",
                        "command": "it is kdist's launcher; use spec.workload",
                        "args": "use spec.workload.args",
                        "image": "use spec.image",
                        "restartPolicy": "use spec.distributed.restartMode",
                        "restartPolicyRules": "use spec.distributed.restartMode"}


def check_overlay(doc: dict[str, Any]) -> dict[str, Any]:
    """`doc` as plain JSON values; ValueError naming every rule it breaks (paths relative
    to the overlay)."""
    problems: list[str] = []
    doc = _plain(doc, "", problems)
    _directives(doc, "", problems)
    if not doc:
        problems.append("is empty; give metadata and/or spec")
    for key in doc:
        if key not in ("metadata", "spec"):
            problems.append(f"{key}: unknown field (an overlay has metadata and spec)")
    meta = doc.get("metadata")
    if meta is not None:
        _metadata(meta, problems)
    spec = doc.get("spec")
    if spec is not None:
        _pod_spec(spec, problems)
    if problems:
        raise ValueError("; ".join(problems))
    return doc


def _plain(node: Any, path: str, problems: list[str]) -> Any:
    """YAML's numbers as plain int/float (they are written out again as YAML), refusing
    the ones whose text is not their value (010 is 8, 1:30 is 90) and inf/nan."""
    if isinstance(node, dict):
        return {k: _plain(v, f"{path}.{k}" if path else str(k), problems)
                for k, v in node.items()}
    if isinstance(node, list):
        return [_plain(v, f"{path}[{i}]", problems) for i, v in enumerate(node)]
    if isinstance(node, bool) or node is None or isinstance(node, str):
        return node
    if isinstance(node, int):
        text = getattr(node, "yaml_text", str(int(node)))
        if not _DECIMAL.fullmatch(text.replace("+", "", 1)):
            problems.append(f"{path}: YAML reads {text} as the number {int(node)}; write "
                            f"{int(node)} (or quote it if it is text)")
        return int(node)
    if isinstance(node, float):
        if not math.isfinite(node):
            problems.append(f"{path}: {node} is not a number Kubernetes accepts")
        return float(node)
    problems.append(f"{path}: {type(node).__name__} values are not allowed")
    return node


def _directives(node: Any, path: str, problems: list[str]) -> None:
    """Only `$patch: replace|delete` (maps) and `$patch: delete` (named list items)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if not isinstance(key, str):
                problems.append(f"{path or 'overlay'}: key {key!r} is not a string")
            elif key == PATCH:
                if value not in ("replace", "delete"):
                    problems.append(f"{path}.$patch: must be replace or delete, got {value!r}")
            elif key.startswith("$"):
                problems.append(f"{path}.{key}: only $patch is supported")
            else:
                _directives(value, f"{path}.{key}" if path else key, problems)
    elif isinstance(node, list):
        for i, item in enumerate(node):
            if isinstance(item, dict) and item.get(PATCH) == "replace":
                problems.append(f"{path}[{i}].$patch: a list item can only be deleted")
            _directives(item, f"{path}[{i}]", problems)


def _metadata(meta: Any, problems: list[str]) -> None:
    if not isinstance(meta, dict):
        problems.append("metadata: must be a mapping")
        return
    for key in meta:
        if key not in ("labels", "annotations"):
            problems.append(f"metadata.{key}: an overlay may set labels and annotations only")
    if PATCH in meta:
        problems.append("metadata.$patch: would drop kdist's labels")
    for field in ("labels", "annotations"):
        values = meta.get(field)
        if values is None:
            continue
        if not isinstance(values, dict) or PATCH in values:
            problems.append(f"metadata.{field}: must be a mapping of additions")
            continue
        for key, value in values.items():
            try:
                C.label_key(key)
                if field == "labels":
                    if is_reserved(key):
                        raise ValueError(f"label {key!r} is set by kdist or the Job controller")
                    if value is not None:
                        C.label_value(key, value if isinstance(value, str) else str(value))
                elif key.startswith(RESERVED_LABEL_PREFIXES):
                    raise ValueError(f"annotation {key!r} is set by kdist or the Job controller")
            except ValueError as e:
                problems.append(f"metadata.{field}: {e}")
            if value is not None and not isinstance(value, str):
                problems.append(f"metadata.{field}[{key!r}]: must be a string (quote it)")


def _pod_spec(spec: Any, problems: list[str]) -> None:
    if not isinstance(spec, dict):
        problems.append("spec: must be a mapping")
        return
    if PATCH in spec:
        problems.append("spec.$patch: would drop kdist's pod spec")
    for key in spec:
        if key == PATCH:
            continue
        if key not in POD_SPEC_FIELDS:
            problems.append(f"spec.{key}: unknown pod spec field")
        elif key in _PROTECTED_POD:
            problems.append(f"spec.{key}: set by kdist ({_PROTECTED_POD[key]})")
    for key, merge_key in MERGE_KEYS.items():
        if key in spec and key not in ("env", "volumeMounts", "ports", "volumeDevices"):
            _named_list(spec[key], f"spec.{key}", merge_key, problems)
    if "containers" in spec and spec["containers"] is None:
        problems.append("spec.containers: cannot be removed")
    for key in CONTAINER_LISTS:
        items = spec.get(key)
        if isinstance(items, list):
            for i, item in enumerate(items):
                if isinstance(item, dict):
                    _container(item, f"spec.{key}[{i}]", key == "containers", problems)


def _named_list(items: Any, path: str, merge_key: str, problems: list[str]) -> None:
    if items is None:
        return
    if not isinstance(items, list):
        problems.append(f"{path}: must be a list")
        return
    seen: set[Any] = set()
    for i, item in enumerate(items):
        if not isinstance(item, dict) or item.get(merge_key) is None:
            problems.append(f"{path}[{i}]: needs {merge_key} (items are merged by it)")
            continue
        if item[merge_key] in seen:
            problems.append(f"{path}[{i}]: {merge_key} {item[merge_key]!r} appears twice")
        seen.add(item[merge_key])


def _container(item: dict[str, Any], path: str, main: bool, problems: list[str]) -> None:
    ours = main and item.get("name") == CONTAINER
    for key in item:
        if key != PATCH and key not in CONTAINER_FIELDS:
            problems.append(f"{path}.{key}: unknown container field")
        elif ours and key in _PROTECTED_CONTAINER and key != "name":
            problems.append(f"{path}.{key}: set by kdist ({_PROTECTED_CONTAINER[key]})")
    if ours and PATCH in item:
        problems.append(f"{path}.$patch: kdist's container cannot be deleted or replaced")
    for key in ("env", "volumeMounts", "ports", "volumeDevices"):
        if key in item:
            _named_list(item[key], f"{path}.{key}", MERGE_KEYS[key], problems)
    if ours:
        _contract_env(item, path, problems)


def _contract_env(item: dict[str, Any], path: str, problems: list[str]) -> None:
    """The pytorch container's env and envFrom: held to spec.env's and spec.envFrom's rules."""
    env = item.get("env", [])
    if env is None:
        problems.append(f"{path}.env: cannot be removed (the env contract)")
    for i, var in enumerate(env if isinstance(env, list) else []):
        if isinstance(var, dict) and var.get("name") is not None:  # else _named_list says so
            try:
                _contract_var(var)
            except ValueError as e:
                problems.append(f"{path}.env[{i}]: {e} (the env contract)")
    sources = item.get("envFrom")
    if sources is not None and not isinstance(sources, list):
        problems.append(f"{path}.envFrom: must be a list")
    for i, source in enumerate(sources if isinstance(sources, list) else []):
        if not (isinstance(source, dict) and source.get(PATCH) == "delete"):
            problems += [f"{path}.envFrom[{i}]{p} (the env contract)"
                         for p in _env_from_problems(source)]


def _contract_var(var: dict[str, Any]) -> None:
    """spec.env's rules for one overlay env item (a deleted one: its name only)."""
    name = var["name"]
    if not isinstance(name, str):
        raise ValueError(f"name {name!r} must be a string")
    C.env_name(name)
    value = var.get("value")
    if value is not None and var.get(PATCH) != "delete":
        if not isinstance(value, str):
            raise ValueError(f"{name}: value must be a string (quote it)")
        C.nccl_env({name: C.no_nul(value)})


_ENV_FROM_FIELDS = ("configMapRef", "secretRef", "prefix")


def _env_from_problems(source: Any) -> list[str]:
    """spec.envFrom's rules for one overlay envFrom item: a ConfigMap or a Secret, by a
    valid name, and a prefix that cannot make a name kdist's launcher owns."""
    if not isinstance(source, dict):
        return [": must be a mapping with configMapRef or secretRef"]
    out = [f".{k}: unknown field (an envFrom item has {', '.join(_ENV_FROM_FIELDS)})"
           for k in source if k not in _ENV_FROM_FIELDS]
    refs = [k for k in ("configMapRef", "secretRef") if source.get(k) is not None]
    if len(refs) != 1:
        out.append(": give exactly one of secretRef or configMapRef")
    for key in refs:
        ref = source[key]
        if not isinstance(ref, dict) or not isinstance(ref.get("name"), str):
            out.append(f".{key}: needs a name")
            continue
        out += [f".{key}.{k}: unknown field (a reference has name and optional)"
                for k in ref if k not in ("name", "optional")]
        if not isinstance(ref.get("optional", False), bool):
            out.append(f".{key}.optional: must be true or false")
        try:
            C.subdomain(ref["name"], "name")
        except ValueError as e:
            out.append(f".{key}: {e}")
    prefix = source.get("prefix")
    if prefix is not None:
        try:
            if not isinstance(prefix, str):
                raise ValueError(f"{prefix!r} must be a string")
            C.env_prefix(prefix)
        except ValueError as e:
            out.append(f".prefix: {e}")
    return out
