"""Spec -> Kubernetes objects: a pure function through the Jinja templates.

Python decides every value; the templates only lay them out. Every value
reaches the YAML text through `yaml_quote` (JSON, which is valid YAML flow),
and the text is parsed back and checked before anyone sees it.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import jinja2
import yaml

from kdist import backends
from kdist.rendering import facts, gang, overlay, podspec, restarts, runtime_ship
from kdist.rendering.contract import launch_argv, pod_env
from kdist.rendering.labels import object_labels
from kdist.rendering.template_cache import bytecode_cache
from kdist.rendering.yamlout import dump_objects
from kdist.shared import env as E
from kdist.shared import exitcodes
from kdist.shared import labels as L
from kdist.shared.errors import RenderError, SpecError
from kdist.spec.model import TrainingJob
from kdist.spec.quantity import format_bytes, parse_quantity

if TYPE_CHECKING:  # the packer imports pathspec: only when code is shipped
    from kdist.rendering.workdir import Packed

RUN_AS_UID = 1000
_YAML_UNSAFE = re.compile("[\x7f-\x9f\u2028\u2029\ufeff\ufffe\uffff]")


def yaml_quote(value: Any) -> str:
    """Any JSON-able value as one YAML flow scalar/collection that parses back exactly.

    JSON is YAML, except that YAML readers refuse or fold a few code points
    JSON leaves raw (C1 controls, U+2028/2029, BOMs); those are escaped.
    """
    text = json.dumps(value, ensure_ascii=False, separators=(", ", ": "))
    return _YAML_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


@lru_cache(maxsize=1)
def _env() -> jinja2.Environment:
    env = jinja2.Environment(
        # The shared pod template here; each training kind's own in kdist.backends.
        loader=jinja2.ChoiceLoader([jinja2.PackageLoader("kdist.rendering", "templates"),
                                    jinja2.PackageLoader("kdist.backends", "templates")]),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
        bytecode_cache=bytecode_cache(),
    )
    env.filters["q"] = yaml_quote
    return env


def with_backend(job: TrainingJob, backend: str | None) -> TrainingJob:
    """The same job on another backend (the `--backend` flag); the spec is not mutated."""
    if backend is None or backend == job.spec.backend:
        return job
    return job.model_copy(update={"spec": job.spec.model_copy(update={"backend": backend})})


def render(job: TrainingJob, code: Packed | None = None,
           restart_mode: str | None = None, gang_mode: str | None = None,
           podgroup_api: str = gang.API_VERSION) -> list[dict[str, Any]]:
    """Every Kubernetes object for `job`, in creation order. Pure and deterministic.

    `code` is the packed workdir (``kdist.rendering.workdir.pack``; reading the tree
    is the caller's, once per command): its ConfigMaps come last, so that the
    submitter makes them owned by the training object, the first; so does the shipped
    runtime's (spec.runtime, ``kdist.rendering.runtime_ship``). `restart_mode`
    ("inPlace" or "recreate") is what the submitter resolved for
    ``distributed.restartMode: auto``; None: ``restarts.resolve(job)``. `gang_mode`
    ("native" or "none") likewise for ``distributed.gang``; None: ``gang.resolve(job)``.
    A native gang's PodGroup comes last (owned by the training object too), of
    `podgroup_api` (the version the cluster's discovery lists; v1beta1 without one).
    """
    mode = restart_mode or restarts.resolve(job)
    configmaps = _code_configmaps(job, code)
    runtime = runtime_ship.built() if runtime_ship.mode(job) == "shipped" else None
    ctx = _context(job, code, configmaps, runtime)
    restarts.apply(job, mode, ctx)
    podgroups = gang.apply(job, gang_mode or gang.resolve(job), ctx, podgroup_api)
    objects = [_render_one(name, ctx)
               for name in backends.get(job.spec.backend).templates_for(ctx)]
    _check(job, objects, ctx)
    _check_code(job, objects, configmaps)
    for obj in objects:
        if backends.holding(obj["kind"]) is not None:
            _apply_overlay(job, obj)
    shipped = [] if runtime is None else [runtime_ship.configmap(
        job.metadata.name, job.metadata.namespace, runtime, object_labels(job, "runtime"))]
    return objects + configmaps + shipped + podgroups


def _apply_overlay(job: TrainingJob, obj: dict[str, Any]) -> None:
    """spec.podTemplateOverlay on every replica's pod template, then the merged pods' checks."""
    patch = job.spec.pod_template_overlay
    for template in _pod_templates(obj):
        if patch:
            merged = overlay.apply(template, patch, backends.get(job.spec.backend).container)
            template.clear()
            template.update(merged)
        overlay.check_pod_template(template, overlaid=bool(patch))


def _render_one(template: str, ctx: dict[str, Any]) -> dict[str, Any]:
    text = _env().get_template(template).render(**ctx)
    try:
        docs = list(yaml.load_all(text, Loader=_Loader))
    except yaml.YAMLError as e:
        raise RenderError(f"template {template} produced invalid YAML: {e}") from None
    if len(docs) != 1 or not isinstance(docs[0], dict):
        raise RenderError(f"template {template} produced {len(docs)} documents, expected 1")
    return docs[0]


_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _context(job: TrainingJob, code: Packed | None = None,
             configmaps: list[dict[str, Any]] | None = None,
             runtime: runtime_ship.Runtime | None = None) -> dict[str, Any]:
    s, name = job.spec, job.metadata.name
    backend = backends.get(s.backend)
    job_labels = object_labels(job, "training")
    if s.scheduling.queue:
        job_labels[L.QUEUE] = s.scheduling.queue
    argv = launch_argv(job)
    env = pod_env(job, node_rank=None, master_addr=backend.master_addr(name),
                  slot_addr=backend.slot_addr(name),
                  code_sha256=code.sha256 if code is not None else None,
                  runtime_sha256=runtime.sha256 if runtime is not None else None)
    pod = {
        "labels": object_labels(job, "worker"),
        "subdomain": backend.subdomain(name),
        "restart_policy": "Never",
        "restart_rule": None,  # restarts in place: kdist.rendering.restarts
        "scheduling_group": None,  # a native gang's PodGroup: kdist.rendering.gang
        "uid": RUN_AS_UID,
        "node_selector": dict(s.scheduling.node_selector),
        "tolerations": [
            t.model_dump(by_alias=True, exclude_none=True) for t in s.scheduling.tolerations
        ],
        "priority_class_name": s.scheduling.priority_class_name,
        "image": s.image,
        "command": _command(argv, runtime),
        "args": argv[3:],
        "container": backend.container,
        "port_name": backend.port_name,
        "port": s.distributed.port,
        "env": [{"name": k, "value": v} for k, v in env.items()],
        # The node rank and restart counts, where the kind's pods read them off themselves.
        "field_env": backend.rank_env(s.distributed.max_restarts),
        "env_from": [e.model_dump(by_alias=True, exclude_none=True) for e in s.env_from],
        "resources": _resources(job),
        "volume_mounts": _mounts(job) + _code_mounts(configmaps) + _runtime_mounts(runtime)
        + podspec.volume_mounts(job),
        "volumes": _volumes(job) + _code_volumes(configmaps) + _runtime_volumes(job, runtime)
        + podspec.volumes(job),
        **podspec.pod_fields(job),
    }
    ctx = {
        "name": name,
        "namespace": job.metadata.namespace,
        "job_labels": job_labels,
        "service_labels": object_labels(job, "rendezvous"),
        "selector": L.selector(name),
        "port": s.distributed.port,
        "nodes": s.nodes,
        "spares": s.distributed.spares,
        # spec.minNodes: the job succeeds once that many indexes have (the lost ones never do)
        "succeeded_count": s.min_nodes if s.elastic else s.nodes,
        "fences": bool(s.distributed.spares) or s.elastic,
        "pods": s.nodes + s.distributed.spares,
        "fenced_exit_code": exitcodes.FENCED,
        "max_restarts": s.distributed.max_restarts,
        # RESTARTS_SPENT: a launcher restarted in place with maxRestarts used.
        "code_error_exit_codes": [*exitcodes.CODE_ERRORS, exitcodes.RESTARTS_SPENT],
        "ttl_seconds_after_finished": s.ttl_seconds_after_finished,
        "active_deadline_seconds": s.active_deadline_seconds,
        "nproc_per_node": str(s.procs_per_node),
        # Backend trainjob: an existing ClusterTrainingRuntime's name (kdist.spec.trainjob).
        "runtime_ref": s.trainjob.runtime_ref,
        "pod_spec": pod,
        # Kueue admits a queued job by unsuspending it: no pod starts before the
        # whole job has quota (all-or-nothing admission).
        "suspend": bool(s.scheduling.queue),
        # What the watch reads back (kdist.kube.watch.tracker), said once, here.
        "facts": facts.of(job, code_sha256=code.sha256 if code is not None else None,
                          runtime_sha256=runtime.sha256 if runtime is not None else None),
    }
    return {**ctx, **backend.context(ctx)}


def _command(argv: list[str], runtime: runtime_ship.Runtime | None) -> list[str]:
    """`python -m kdist.launch` from the image, or the shipped runtime's bootstrap."""
    return argv[:3] if runtime is None else runtime_ship.boot_command(runtime)


def _runtime_mounts(runtime: runtime_ship.Runtime | None) -> list[dict[str, Any]]:
    return [] if runtime is None else [runtime_ship.mount()]


def _runtime_volumes(job: TrainingJob,
                     runtime: runtime_ship.Runtime | None) -> list[dict[str, Any]]:
    if runtime is None:
        return []
    return [runtime_ship.volume(runtime_ship.configmap_name(job.metadata.name, runtime))]


def _resources(job: TrainingJob) -> dict[str, Any]:
    r = job.spec.resources
    # requests == limits: a Guaranteed pod, so the CPU count we size threads by is real.
    amounts = {"cpu": r.cpu, "memory": r.memory}
    limits = dict(amounts)
    if r.gpus:
        limits["nvidia.com/gpu"] = str(r.gpus)
    extended = podspec.extended_resources(job)
    return {"requests": {**amounts, **extended}, "limits": {**limits, **extended}}


def shm_size(job: TrainingJob) -> str:
    """/dev/shm's size: as given, else half the pod's memory (it counts against it)."""
    r = job.spec.resources
    if r.shm is not None:
        return r.shm
    return format_bytes(int(parse_quantity(r.memory)) // 2)


def _mounts(job: TrainingJob) -> list[dict[str, Any]]:
    mounts = [{"name": "dshm", "mountPath": "/dev/shm"}]
    if job.spec.checkpoint is not None:
        mounts.append({"name": "checkpoint", "mountPath": job.spec.checkpoint.path})
    return mounts


def _volumes(job: TrainingJob) -> list[dict[str, Any]]:
    volumes: list[dict[str, Any]] = [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": shm_size(job)}}
    ]
    ckpt = job.spec.checkpoint
    if ckpt is not None:
        source = ckpt.volume.model_dump(by_alias=True, exclude_none=True)
        volumes.append({"name": "checkpoint", **source})
    return volumes


CODE_VOLUME, WORKSPACE_VOLUME = "kdist-code", "kdist-workspace"


def _code_configmaps(job: TrainingJob, code: Packed | None) -> list[dict[str, Any]]:
    if code is None:
        return []
    from kdist.rendering.code_configmaps import to_configmaps

    ckpt = job.spec.checkpoint
    if ckpt is not None and ckpt.path.rstrip("/") == E.DEFAULT_CODE_DIR:
        raise SpecError([f"spec.checkpoint.path: {ckpt.path} is where the shipped workdir is "
                         "unpacked; choose another path (e.g. /checkpoints)"])
    return to_configmaps(job.metadata.name, job.metadata.namespace, code,
                         object_labels(job, "code"))


def _code_mounts(configmaps: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    if not configmaps:
        return []
    return [{"name": CODE_VOLUME, "mountPath": E.DEFAULT_CODE_MOUNT, "readOnly": True},
            {"name": WORKSPACE_VOLUME, "mountPath": E.DEFAULT_CODE_DIR}]


def _code_volumes(configmaps: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """The parts, projected read-only into one directory; a fresh emptyDir to unpack into."""
    if not configmaps:
        return []
    from kdist.rendering.code_configmaps import code_volume

    return [code_volume(configmaps, CODE_VOLUME), {"name": WORKSPACE_VOLUME, "emptyDir": {}}]


def _check_code(job: TrainingJob, objects: list[dict[str, Any]],
                configmaps: list[dict[str, Any]]) -> None:
    """Every pod mounts exactly the ConfigMaps rendered with it, in order, and nothing else."""
    names = [cm["metadata"]["name"] for cm in configmaps]
    for cm in configmaps:
        meta = cm["metadata"]
        if meta.get("namespace") != job.metadata.namespace or any(
                meta["labels"].get(k) != v for k, v in job.metadata.labels.items()):
            raise RenderError(f"ConfigMap {meta['name']} differs from the job's namespace/labels")
    for template in pod_templates_of(objects):
        volumes = {v["name"]: v for v in template["spec"].get("volumes") or []}
        code = volumes.get(CODE_VOLUME)
        mounted = [s["configMap"]["name"] for s in code["projected"]["sources"]] if code else []
        if mounted != names:
            raise RenderError(f"pods mount code ConfigMaps {mounted}, rendered {names}")


def _check(job: TrainingJob, objects: list[dict[str, Any]], ctx: dict[str, Any]) -> None:
    """Parse-back check: every user value landed exactly where meant, nothing more."""
    want_kinds = backends.get(job.spec.backend).kinds_for(ctx)
    if [o.get("kind") for o in objects] != want_kinds:
        raise RenderError(f"rendered kinds {[o.get('kind') for o in objects]} != {want_kinds}")
    for obj in objects:
        meta = obj["metadata"]
        if meta.get("name") != job.metadata.name or meta.get("namespace") != job.metadata.namespace:
            raise RenderError(f"{obj['kind']} has name/namespace {meta.get('name')!r}")
        if any(meta["labels"].get(k) != v for k, v in job.metadata.labels.items()):
            raise RenderError(f"{obj['kind']} labels differ from the spec's")
    pod_ctx = ctx["pod_spec"]
    templates = pod_templates_of(objects)
    if not templates:
        raise RenderError(f"rendered {want_kinds} without a pod template")
    for template in templates:
        if template["metadata"]["labels"] != pod_ctx["labels"]:
            raise RenderError("pod labels differ from what was rendered")
        (container,) = template["spec"]["containers"]
        if (container["command"] != pod_ctx["command"]
                or container["args"] != launch_argv(job)[3:]):
            raise RenderError("container command line differs from the spec's workload")
        env = {e["name"]: e.get("value") for e in container["env"]}
        if len(env) != len(container["env"]) or any(
            env.get(e["name"]) != e["value"] for e in pod_ctx["env"]
        ):
            raise RenderError("container env differs from the spec's")


def _pod_templates(obj: dict[str, Any]) -> list[dict[str, Any]]:
    backend = backends.holding(obj["kind"])
    if backend is None:
        raise RenderError(f"rendered a {obj['kind']}, not a training object")
    return backend.pod_templates(obj)


def pod_templates_of(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every pod template of rendered `objects`: the training object's, and those of what it
    is built from (a TrainJob's runtime)."""
    return [t for obj in objects if backends.holding(obj["kind"]) is not None
            for t in _pod_templates(obj)]


def to_yaml(objects: list[dict[str, Any]]) -> str:
    """Multi-document YAML, byte-identical for identical input; PyYAML and kubectl
    (sigs.k8s.io/yaml) read every string back as that string. In creation order
    (`backends.creation_order`): `kubectl apply -f` makes them in the order given."""
    return dump_objects([objects[i] for i in backends.creation_order(objects)])


def to_json(objects: list[dict[str, Any]]) -> str:
    """A kubectl-appliable v1 List, in creation order."""
    doc = {"apiVersion": "v1", "kind": "List",
           "items": [objects[i] for i in backends.creation_order(objects)]}
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"
