"""What kdist may delete, and what a submission made: the rules, without requests.

`kdist.kube.client` deletes only what these say. An object is kdist's when
`kdist.shared.labels.made_by_kdist` says so, one rule for every kind. What a
submission created is named as kdist sent it, with the uid the server's answer
gave it; an answer about another object than the one sent is malformed, since
undoing by a name an answer hands back would delete whatever that object is.
Every delete carries the uid kdist checked or was given, when it has one. What a
submission sends carries a token of that submission alone (`sent_as`): when a create
goes unanswered, the object of that name is this submission's only if it carries it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kdist.kube import kinds
from kdist.shared.errors import UsageError
from kdist.shared.labels import JOB_NAME, SUBMISSION, kdist_labels_text, made_by_kdist


@dataclass(frozen=True)
class Made:
    """An object a submission created, as kdist sent it (kind, name, namespace), and the
    uid the server's answer gave it: None where no answer was trusted (a dry run, a
    malformed answer)."""

    kind: kinds.Kind
    name: str
    namespace: str
    uid: str | None = None

    @property
    def ref(self) -> str:
        return f"{self.kind.ref}/{self.name}"


def made(sent: dict[str, Any], answer: dict[str, Any], dry_run: bool) -> tuple[Made, str | None]:
    """What creating `sent` made, with the uid of `answer` when the answer is about `sent`;
    else (`sent`, uid unknown: the POST succeeded, so it may exist) and what is wrong."""
    meta = sent["metadata"]
    ours = Made(kinds.of(sent), meta["name"], meta["namespace"])
    got = answer.get("metadata")
    got = got if isinstance(got, dict) else {}
    kind, name = answer.get("kind", ours.kind.kind), got.get("name")
    namespace, uid = got.get("namespace", ours.namespace), got.get("uid")
    if (kind, name, namespace) != (ours.kind.kind, ours.name, ours.namespace):
        return ours, f"another object ({kind} {name!r} in namespace {namespace!r})"
    if dry_run:
        return ours, None
    if not (isinstance(uid, str) and uid):
        return ours, "no uid"
    return Made(ours.kind, ours.name, ours.namespace, uid), None


def sent_as(obj: dict[str, Any], owner: Made | None, token: str) -> dict[str, Any]:
    """`obj` as a submission creates it: marked with its `token`, owned by `owner` (the
    submission's first object) when there is one."""
    meta = obj["metadata"]
    marked = dict(obj, metadata=dict(meta, annotations={**(meta.get("annotations") or {}),
                                                        SUBMISSION: token}))
    return marked if owner is None else owned_by(marked, owner)


def is_sent(found: dict[str, Any], sent: dict[str, Any]) -> bool:
    """Whether `found`, read back by the name of `sent`, is the very object `sent` made:
    kdist's, of the same job, with the same submission token."""
    meta = sent["metadata"]
    job = (meta.get("labels") or {}).get(JOB_NAME)
    token = (meta.get("annotations") or {}).get(SUBMISSION)
    got = found.get("metadata")
    if not (isinstance(got, dict) and isinstance(got.get("labels"), dict)
            and isinstance(got.get("annotations"), dict)):
        return False
    return (isinstance(job, str) and isinstance(token, str) and made_by_kdist(found, job)
            and got["annotations"].get(SUBMISSION) == token)


def owned_by(obj: dict[str, Any], owner: Made) -> dict[str, Any]:
    """A copy of `obj` owned by `owner` (garbage-collected with it; foreground waits for it)."""
    return dict(obj, metadata=dict(obj["metadata"], ownerReferences=[owner_ref(owner)]))


def owner_ref(owner: Made) -> dict[str, Any]:
    return {"apiVersion": owner.kind.api_version, "kind": owner.kind.kind,
            "name": owner.name, "uid": owner.uid, "blockOwnerDeletion": True}


def delete_options(uid: str | None, background: bool = False) -> dict[str, Any]:
    """A foreground delete's options (background where the kind's controller would remake
    what foreground deletes first, `Backend.background_delete`); with `uid`, only of the
    object that has it (a 409 otherwise). In the body: the API server reads a DELETE's
    options from the body when there is one, and preconditions only from there."""
    options: dict[str, Any] = {"kind": "DeleteOptions", "apiVersion": "v1",
                               "propagationPolicy": "Background" if background else
                               "Foreground"}
    if uid is not None:
        options["preconditions"] = {"uid": uid}
    return options


def controlled(obj: dict[str, Any]) -> bool:
    """Whether another object controls `obj` (a JobSet Kubeflow Trainer made for a TrainJob,
    named after it): a part of that job, never a job of its own."""
    refs = (obj.get("metadata") or {}).get("ownerReferences")
    return isinstance(refs, list) and any(isinstance(r, dict) and r.get("controller") is True
                                          for r in refs)


def is_kdists(kind: kinds.Kind, obj: dict[str, Any], name: str, namespace: str) -> bool:
    """Whether `obj`, the `kind` named `name`, is kdist's (of job `name`) to delete. A
    training object kdist did not make is a UsageError: the job is not kdist's, so
    nothing of it may go; a user's own Service of that name just stays."""
    if made_by_kdist(obj, name) or kind is kinds.SERVICE:
        return made_by_kdist(obj, name)
    raise UsageError(f"{kind.ref}/{name} in namespace {namespace} was not made by kdist (it "
                     f"lacks the labels {kdist_labels_text(name)}): kdist deletes only its "
                     "own jobs, and deleted nothing")
