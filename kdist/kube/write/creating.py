"""Creating a submission's objects, all or nothing, and undoing them.

Objects after the first are owned by it (ownerReferences to its uid, known once
it exists), so deleting the job removes everything. If one fails, the ones
already created are deleted again: by the names kdist sent and the uids the
server gave them (`undo`); an answer that names another object than the one sent
is refused as malformed.

A create can fail without saying whether it happened: a 5xx (kube-apiserver's
own 504 comes after a timeout while the write may still land), or no answer once
the request was sent (a reset, the deadline). Then kdist reads the object back by
name: the one there is this submission's only if it carries this submission's
token (`owned.sent_as`, `owned.is_sent`), and is undone with the rest; when even
that read fails, the one error line names what may be left.
"""

from __future__ import annotations

import secrets
from typing import Any, Protocol

from kdist import backends
from kdist.kube import kinds
from kdist.kube.errors import Action, AlreadyExists, Forbidden, MaybeDone, PartlyUndone
from kdist.kube.watch.answers import created_problem
from kdist.kube.write import owned
from kdist.kube.write.taken import taken
from kdist.shared.errors import ClusterError, JobNotFound, KdistError, OperatorMissing
from kdist.shared.labels import JOB_NAME

FIELD_MANAGER = "kdist"


class Cluster(Protocol):
    """What of `kdist.kube.client.Cluster` creating uses."""

    server: str

    def request(self, action: Action, method: str, path: str,
                query: dict[str, Any] | None = None, body: Any = None) -> dict[str, Any]: ...

    def get(self, kind: kinds.Kind, name: str, namespace: str) -> dict[str, Any]: ...

    def delete_object(self, kind: kinds.Kind, name: str, namespace: str, *,
                      uid: str | None = None) -> None: ...

    def take_warnings(self) -> list[str]: ...


def create(cluster: Cluster, objects: list[dict[str, Any]], *,
           dry_run: bool = False) -> tuple[list[dict[str, Any]], list[str]]:
    """Create every object in order, all or nothing; returns them and the API's warnings
    not reported yet. Ctrl-C and SIGTERM wait for the request in flight (a POST cut
    short would leave an object kdist does not know it made), then the same rollback
    runs to its end, a second signal notwithstanding, and `Interrupted` says what it
    deleted and left."""
    from kdist.shared.signals import Interrupted, held

    answers: dict[int, dict[str, Any]] = {}  # by place in `objects`
    notes: list[str] = []
    made: list[owned.Made] = []  # what to undo, by kdist's own names
    owner: owned.Made | None = None  # the training object (objects[0]), once made
    token = secrets.token_hex(8)
    with held() as pending:
        try:
            for i in backends.creation_order(objects):
                if pending.signum is not None:
                    break
                obj = objects[i]
                if not dry_run:
                    obj = owned.sent_as(obj, owner, token)
                if i == 0 and made:  # after what its controller looks up (created_first)
                    answer = _create_settled(cluster, obj, dry_run, made, notes)
                else:
                    answer = _create_one(cluster, obj, dry_run, made)
                done, malformed = owned.made(obj, answer, dry_run)
                made.append(done)
                problem = created_problem(answer, obj, dry_run)
                if problem:  # it may exist all the same: the rollback below undoes it
                    raise ClusterError(problem)
                if malformed:
                    raise ClusterError(
                        f"the API server at {cluster.server} answered the creation of "
                        f"{done.ref} in namespace {done.namespace} with {malformed}: a "
                        "malformed answer, not trusted")
                answers[i] = answer
                if i == 0:
                    owner = done
                    if not dry_run:  # what had to exist before it is its own now
                        _own(cluster, [m for m in made if m is not done], done)
            created = [answers[i] for i in sorted(answers)]
        except BaseException as e:
            if dry_run:
                raise
            undone, left = undo(cluster, made)
            line = _settled(e, undone) if isinstance(e, MaybeDone) else None
            if left and isinstance(e, KdistError):
                raise PartlyUndone(f"{line or e}; undoing the submission failed too: "
                                   f"{'; '.join(left)}", left) from e
            if line:
                raise ClusterError(line) from e
            raise
        if pending.signum is not None:
            undone, left = ([], []) if dry_run else undo(cluster, made)
            raise Interrupted(pending.signum, undone=undone, left=left)
    return created, [*notes, *cluster.take_warnings()]


#: How long a training object refused for what was created just before it is tried again.
SETTLE_SECONDS = 15.0


def _create_settled(cluster: Cluster, obj: dict[str, Any], dry_run: bool,
                    made: list[owned.Made], notes: list[str]) -> dict[str, Any]:
    """Create the training object after what it is built from (`Backend.created_first`):
    while its webhook refuses it for not seeing those yet (`Backend.settling`: its
    controller reads them from a cache a moment behind), again, for SETTLE_SECONDS. A
    server-side dry run stored nothing for it to see: `obj` is taken as sent, and said."""
    import time

    words = backends.of(obj).settling
    deadline, pause = time.monotonic() + SETTLE_SECONDS, 0.1
    while True:
        try:
            return _create_one(cluster, obj, dry_run, made)
        except KdistError as e:
            if not words or words not in str(e):
                raise
            if dry_run:
                notes.append(f"{kinds.of(obj).ref}/{obj['metadata']['name']}: not checked by "
                             f"the server (its admission needs {made[-1].ref} stored: {e})")
                return obj
            if time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 2.0)


def _own(cluster: Cluster, earlier: list[owned.Made], owner: owned.Made) -> None:
    """Make what was created before the training object (`Backend.created_first`) owned
    by it, as everything after it is: deleting the job removes them too."""
    for m in earlier:
        body = {"metadata": {"ownerReferences": [owned.owner_ref(owner)],
                             **({"uid": m.uid} if m.uid else {})}}
        cluster.request(Action("patch", m.kind.plural, m.namespace, m.name), "PATCH",
                        m.kind.item(m.namespace, m.name), body=body)


def _create_one(cluster: Cluster, obj: dict[str, Any], dry_run: bool,
                made: list[owned.Made]) -> dict[str, Any]:
    """The API's answer to creating `obj`; when the create may have happened unanswered,
    what reading it back found is added to `made` (and to the MaybeDone raised)."""
    kind, meta = kinds.of(obj), obj["metadata"]
    ns = meta["namespace"]
    query = {"fieldManager": FIELD_MANAGER, **({"dryRun": "All"} if dry_run else {})}
    try:
        return cluster.request(Action("create", kind.plural, ns, meta["name"]), "POST",
                               kind.collection(ns), query, obj)
    except AlreadyExists:
        if any(b.kind == kind for b in backends.BACKENDS):
            raise  # the job itself: --replace is the way
        raise taken(cluster, obj) from None
    except MaybeDone as e:
        if dry_run:
            raise
        found, unknown = read_back(cluster, obj)
        if found is not None:
            made.append(found)
        raise MaybeDone(str(e), found, unknown) from None


def refusal(cluster: Cluster, obj: dict[str, Any]) -> str | None:
    """Why the API server refuses to create `obj`, asked by a dry run (nothing is made):
    its words for a 403 (a Role without it) or a 404 (not served after all, whatever
    discovery said), else None. A 409 is `taken`'s error; any other failure is raised."""
    kind, meta = kinds.of(obj), obj["metadata"]
    ns = meta["namespace"]
    try:
        cluster.request(Action("create", kind.plural, ns, meta["name"]), "POST",
                        kind.collection(ns), {"fieldManager": FIELD_MANAGER, "dryRun": "All"},
                        obj)
    except Forbidden as e:
        return str(e)
    except JobNotFound:
        return (f"creating {kind.ref}/{meta['name']} answered 404 Not Found, though "
                "discovery lists it")
    except AlreadyExists:
        raise taken(cluster, obj) from None
    return None


def read_back(cluster: Cluster, sent: dict[str, Any]) -> tuple[owned.Made | None, str | None]:
    """After a create that may have happened: (what it made, None) if the object of that
    name is the one sent, (None, None) if not there or another, (None, why) if the API
    cannot say."""
    kind, meta = kinds.of(sent), sent["metadata"]
    name, ns = meta["name"], meta["namespace"]
    try:
        found = cluster.get(kind, name, ns)
    except (JobNotFound, OperatorMissing):
        return None, None
    except KdistError:  # the line has the first failure's words already: kept short
        job = (meta.get("labels") or {}).get(JOB_NAME, name)
        return None, f"{kind.ref}/{name} may exist (see `kdist status {job}`)"
    if not owned.is_sent(found, sent):
        return None, None
    uid = (found.get("metadata") or {}).get("uid")
    return owned.Made(kind, name, ns, uid if isinstance(uid, str) and uid else None), None


def _settled(e: MaybeDone, undone: list[str]) -> str | None:
    """The error line of a create that may have happened, with what reading back found."""
    if e.unknown:
        return f"{e}; {e.unknown}"
    if e.found is not None and e.found.ref in undone:
        return f"{e}; the API server had created {e.found.ref} all the same: deleted again"
    return None


def undo(cluster: Cluster, made: list[owned.Made]) -> tuple[list[str], list[str]]:
    """Delete what a failed submission created, last first: (what was deleted, what
    could not be, with why). Each goes by the name kdist sent and, where the server's
    answer gave one, with that uid as a precondition: an object of that name made
    meanwhile by anyone else is not deleted."""
    undone, left = [], []
    for m in reversed(made):
        try:
            cluster.delete_object(m.kind, m.name, m.namespace, uid=m.uid)
            undone.append(m.ref)
        except JobNotFound:
            undone.append(m.ref)  # gone already (its owner's)
        except KdistError as e:
            left.append(f"{m.ref} ({e})")
    return undone, left
