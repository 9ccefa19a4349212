"""A name a submission would create that another object holds: whose it is, and what helps.

A job's Service, code ConfigMaps and PodGroup are named after it. When creating one
answers 409, "job X already exists: use --replace" is wrong twice over: the object is
no job, and `--replace` deletes only kdist's own objects of the job, so for another's it
fails the same way. The object there is read and named by its kind and its owner (its
ownerReferences, its app.kubernetes.io/managed-by label, kdist's job label, the
managers of its managedFields), with what can help: rename the job, or delete that
object yourself.
"""

from __future__ import annotations

from typing import Any

from kdist.kube import kinds
from kdist.shared.errors import ClusterError, JobNotFound, KdistError
from kdist.shared.labels import JOB_NAME, MANAGED_BY, made_by_kdist

#: At most this many owners or managers named, each cut to a line's share.
_SHOWN, _WIDTH = 3, 60


def taken(cluster: Any, sent: dict[str, Any]) -> ClusterError:
    """The error for a create of `sent` (not a training object) that answered 409."""
    kind, meta = kinds.of(sent), sent["metadata"]
    name, ns = meta["name"], meta["namespace"]
    job = (meta.get("labels") or {}).get(JOB_NAME) or name
    ref = f"{kind.ref}/{name} in namespace {ns}"
    delete = f"kubectl -n {ns} delete {kind.ref} {name}"
    found: dict[str, Any] | None = None
    unread = ""
    try:
        found = cluster.get(kind, name, ns)
    except JobNotFound:
        return ClusterError(f"{ref} was there when job {job} was submitted, and is gone now: "
                            "submit again")
    except KdistError as e:
        unread = str(e)
    if found is not None and made_by_kdist(found, job):
        if found["metadata"].get("ownerReferences"):  # the job of that name is there
            return ClusterError(f"job {job} already exists in namespace {ns}: use --replace "
                                f"or `kdist delete {job}`")
        # `kdist delete` finds the job's Service and ConfigMaps by name and label, and a
        # PodGroup only through the job whose pods name it.
        advice = f"delete it ({delete})" if kind in kinds.PODGROUPS else \
            f"use --replace or `kdist delete {job}`"
        return ClusterError(f"{ref} already exists, left by an earlier submission of job "
                            f"{job} ({owner_words(found)}): {advice}")
    whose = owner_words(found) if found is not None else f"kdist may not read it: {unread}"
    return ClusterError(
        f"{ref} already exists and is not job {job}'s ({whose}); kdist names the job's "
        f"{kind.kind} after the job, so rename the job (metadata.name) or delete that "
        f"{kind.kind} yourself ({delete})")


def owner_words(obj: dict[str, Any]) -> str:
    """Whose `obj` is, as far as it says: owners, managed-by label, kdist job, managers."""
    meta: dict[str, Any] = obj["metadata"] if isinstance(obj.get("metadata"), dict) else {}
    labels: dict[str, Any] = meta["labels"] if isinstance(meta.get("labels"), dict) else {}
    words = []
    refs = [f"{_cut(r.get('kind'))}/{_cut(r.get('name'))}" for r in
            _dicts(meta.get("ownerReferences"))]
    if refs:
        words.append("owned by " + ", ".join(refs[:_SHOWN]))
    if labels.get(MANAGED_BY):
        words.append(f"managed by {_cut(labels[MANAGED_BY])} (label {MANAGED_BY})")
    if labels.get(JOB_NAME) and labels.get(MANAGED_BY) == "kdist":
        words.append(f"kdist's, of job {_cut(labels[JOB_NAME])}")
    managers = list(dict.fromkeys(_cut(f.get("manager")) for f in
                                  _dicts(meta.get("managedFields")) if f.get("manager")))
    if managers:
        words.append("written by " + ", ".join(managers[:_SHOWN]))
    return "; ".join(words) or "no owner, manager or label says whose it is"


def _dicts(value: Any) -> list[dict[str, Any]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _cut(value: Any) -> str:
    text = value if isinstance(value, str) else str(value)
    return text if len(text) <= _WIDTH else text[:_WIDTH - 3] + "..."
