"""``spec.podTemplateOverlay`` applied to every replica's rendered pod template.

Strategic-merge style, as ``kubectl patch`` and Kustomize do it: mappings
merge key by key; lists Kubernetes merges by a key (containers, volumes, env
by ``name``, volumeMounts by ``mountPath``, ports by ``containerPort``, ...;
``kdist.spec.overlay.MERGE_KEYS``) merge item by item, new items appended;
every other list is replaced. ``null`` removes a key, ``$patch: delete`` a
mapping or a named list item, ``$patch: replace`` replaces a mapping whole.

The overlay's own rules were checked when the spec was loaded; here the merged
pod is checked for what only the merge shows (a mount of a volume that is not
there, kdist's container displaced), and kdist's contract is verified intact.
The API server (``--dry-run=server``) validates the rest.
"""

from __future__ import annotations

import copy
from typing import Any

from kdist.shared import env as E
from kdist.shared.errors import RenderError, SpecError
from kdist.spec.overlay import CONTAINER, CONTAINER_LISTS, MERGE_KEYS, PATCH

FIELD = "spec.podTemplateOverlay"


def merge(base: Any, patch: Any, key: str | None = None) -> Any:
    """`patch` merged onto `base` (neither is modified)."""
    if isinstance(patch, dict) and isinstance(base, dict):
        if patch.get(PATCH) == "replace":
            return _clean(patch)
        out = dict(base)
        for k, v in patch.items():
            if k == PATCH:
                continue
            if v is None or (isinstance(v, dict) and v.get(PATCH) == "delete"):
                out.pop(k, None)
            elif k in out:
                out[k] = merge(out[k], v, k)
            else:
                out[k] = _clean(v)
        return out
    if isinstance(patch, list) and isinstance(base, list) and key in MERGE_KEYS:
        return _merge_named(base, patch, MERGE_KEYS[key], key)
    return _clean(patch)


def _merge_named(base: list[Any], patch: list[Any], merge_key: str, key: str) -> list[Any]:
    out = list(base)
    for item in patch:
        at = next((i for i, b in enumerate(out)
                   if isinstance(b, dict) and b.get(merge_key) == item[merge_key]), None)
        if item.get(PATCH) == "delete":
            if at is not None:
                del out[at]
        elif at is None:
            out.append(_clean(item))
        else:
            out[at] = merge(out[at], item, key)
    return out


def _clean(value: Any) -> Any:
    """A patch value as an object: directives and nulls dropped, deep-copied."""
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()
                if k != PATCH and v is not None
                and not (isinstance(v, dict) and v.get(PATCH) == "delete")}
    if isinstance(value, list):
        return [_clean(v) for v in value
                if not (isinstance(v, dict) and v.get(PATCH) == "delete")]
    return copy.deepcopy(value)


def apply(template: dict[str, Any], overlay: dict[str, Any],
          container: str = CONTAINER) -> dict[str, Any]:
    """The pod template with `overlay` merged, kdist's contract verified intact.

    The overlay names kdist's container `pytorch` on every backend (its load-time rules
    hold for that name); where the backend's is another (`container`: a TrainJob's
    `node`), the overlay's item is renamed to it, and an item of that other name is
    refused, as it would merge into kdist's container unchecked."""
    overlay = _renamed(overlay, container)
    merged = merge(template, overlay)
    if not isinstance(merged.get("spec"), dict) or not merged["spec"].get("containers"):
        raise SpecError([f"{FIELD}: the merged pod template has no containers"])
    _check_contract(template, merged, container)
    return merged


def _renamed(overlay: dict[str, Any], container: str) -> dict[str, Any]:
    spec = overlay.get("spec")
    if container == CONTAINER or not isinstance(spec, dict) or \
            not isinstance(spec.get("containers"), list):
        return overlay
    items = spec["containers"]
    for i, item in enumerate(items):
        if isinstance(item, dict) and item.get("name") == container:
            raise SpecError([f"{FIELD}.spec.containers[{i}].name: {container!r} is kdist's "
                             f"container on this backend; the overlay names it {CONTAINER!r}"])
    renamed = [{**item, "name": container}
               if isinstance(item, dict) and item.get("name") == CONTAINER else item
               for item in items]
    return {**overlay, "spec": {**spec, "containers": renamed}}


def check_pod_template(template: dict[str, Any], overlaid: bool) -> None:
    """What the API server would refuse in any rendered pod: raise SpecError naming it.

    Names are unique, every mount names a volume of the pod, no two mounts of a
    container share a path (spec.pod.volumes, the checkpoint, spec.workdir and an
    overlay all add mounts).
    """
    spec = template["spec"]
    where = f"{FIELD}: the merged pod" if overlaid else "the rendered pod"
    problems: list[str] = []
    names: set[str] = set()
    containers = [c for key in CONTAINER_LISTS for c in spec.get(key) or []]
    for c in containers:
        if not isinstance(c, dict) or not isinstance(c.get("name"), str):
            problems.append(f"{where} has a container without a name")
        elif c["name"] in names:
            problems.append(f"{where} has two containers named {c['name']!r}")
        else:
            names.add(c["name"])
    volumes = [v.get("name") for v in spec.get("volumes") or [] if isinstance(v, dict)]
    dup = next((v for v in volumes if volumes.count(v) > 1), None)
    if dup is not None:
        problems.append(f"{where} has two volumes named {dup!r}")
    for c in containers:
        if not isinstance(c, dict):
            continue
        paths: list[str] = []
        for m in c.get("volumeMounts") or []:
            if not isinstance(m, dict):
                continue
            if m.get("name") not in volumes:
                problems.append(f"{where}: container {c.get('name')!r} mounts volume "
                                f"{m.get('name')!r}, which is not in spec.volumes")
            path = str(m.get("mountPath", "")).rstrip("/")
            if path in paths:
                problems.append(f"{where}: container {c.get('name')!r} mounts two volumes at "
                                f"{m.get('mountPath')!r}")
            paths.append(path)
    if problems:
        raise SpecError(problems)


def _check_contract(before: dict[str, Any], after: dict[str, Any], container: str) -> None:
    """kdist's container still comes first with its command, image and env contract
    (no launcher-owned name set or reachable through envFrom).

    The overlay's load-time rules make this hold; a failure here is a kdist bug.
    """
    old = before["spec"]["containers"][0]
    containers = after["spec"].get("containers") or []
    new = containers[0] if containers else {}
    if new.get("name") != container:
        raise RenderError(f"{FIELD}: the merged pod's first container is not {container}")
    for key in ("command", "args", "image"):
        if new.get(key) != old.get(key):
            raise RenderError(f"{FIELD}: the merged pod changed {container}'s {key}")
    new_env = {e.get("name"): e for e in new.get("env") or [] if isinstance(e, dict)}
    for var in old["env"]:
        if var["name"].startswith(E.PREFIX) and new_env.get(var["name"]) != var:
            raise RenderError(f"{FIELD}: the merged pod changed {var['name']}")
    old_env = {e["name"]: e for e in old["env"]}
    for name, var in new_env.items():
        owned = isinstance(name, str) and (name in E.LAUNCHER_OWNED
                                           or name.startswith(E.LAUNCHER_OWNED_PREFIXES))
        if owned and old_env.get(name) != var:
            raise RenderError(f"{FIELD}: the merged pod sets {name}, which the launcher owns")
    for source in new.get("envFrom") or []:
        prefix = source.get("prefix") if isinstance(source, dict) else None
        if not isinstance(source, dict) or not ({"configMapRef", "secretRef"} & set(source)) \
                or (prefix and E.reserved_by_prefix(prefix)):
            raise RenderError(f"{FIELD}: the merged pod's envFrom {source!r} can set names "
                              "the launcher owns")
    for key in ("restartPolicy", "subdomain"):
        if after["spec"].get(key) != before["spec"].get(key):
            raise RenderError(f"{FIELD}: the merged pod changed {key}")
    labels = after.get("metadata", {}).get("labels", {})
    if any(labels.get(k) != v for k, v in before["metadata"]["labels"].items()):
        raise RenderError(f"{FIELD}: the merged pod changed kdist's labels")
