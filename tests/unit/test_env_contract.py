"""The env contract's side doors: spec.envFrom prefixes, and the overlay's env and envFrom
on the pytorch container, held to the rules of spec.env and spec.envFrom."""

from __future__ import annotations

import itertools

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from kdist.cli import main
from kdist.rendering import render
from kdist.shared import env as E
from kdist.shared.errors import SpecError
from kdist.spec import checks as C
from kdist.spec import validate_job
from tests.unit.helpers import spec_with, write_spec

RESERVED = sorted(E.LAUNCHER_OWNED) + list(E.LAUNCHER_OWNED_PREFIXES)
# What a ConfigMap or Secret key may be made of (Kubernetes' IsConfigMapKey).
KEY_CHARS = "-._abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"


def is_reserved(name: str) -> bool:
    return name in E.LAUNCHER_OWNED or name.startswith(E.LAUNCHER_OWNED_PREFIXES)


def reachable(prefix: str) -> str | None:
    """Brute force: a reserved name that `prefix + key` is for some key, else None.

    The keys tried are every tail of every reserved string, bare and with one more
    character: a shortest key that makes a reserved name is among them."""
    tails = {r[i:] + extra for r in RESERVED for i in range(len(r) + 1) for extra in ("", "X")}
    return next((prefix + k for k in sorted(tails) if k and is_reserved(prefix + k)), None)


def prefix_refused(prefix: str) -> bool:
    try:
        C.env_prefix(prefix)
    except ValueError:
        return True
    return False


# The table: tricks that reach a reserved name, and look-alikes that cannot.
REFUSED = ["KDIST", "KDIST_", "KDIST_X", "KD", "K", "KDIS", "PET", "PET_", "PET_X", "P", "PE",
           "TORCHELASTIC", "TORCHELASTIC_", "TORCHELASTIC_RESTART_", "TORCH", "T", "TORCHE",
           "R", "RA", "RAN", "ROLE_", "ROLE", "RO", "L", "LOCAL", "LOCAL_", "LOCAL_R",
           "LOCAL_WORLD", "W", "WORLD_", "WORLD_SIZ", "G", "GROUP_", "GROUP_WORLD_", "M", "JOB",
           "MASTER", "MASTER_", "MASTER_A", "MASTER_P", "N", "NODE_", "NODE_RAN", "J", "JOB_",
           "JOB_COMPLETION_", "JOB_COMPLETION_INDE", "KDIST_MASTER_", "PET_NPROC_"]
ALLOWED = ["APP_", "WANDB_", "kdist_", "Kdist_", "KDISTX", "KDIST-", "KDIST.", "_KDIST_",
           "X_KDIST_", "RANK", "RANK_", "RANKS", "RANK.", "LOCAL_RANKS", "MASTER_ADDR_",
           "MASTER_ADDRESS", "PET-", "PETS_", "TORCHX", "TORCH_", "TORCHELASTIC-", "_", "-",
           ".", "rank_", "pet_", "torchelastic_", "JOBS", "JOB_COMPLETION_INDEX_", "NODE_RANKS",
           "A", "Z_", "ROLE_NAMES", "WORLD_SIZE_", "GROUP_RANK_"]


def test_the_table_agrees_with_brute_force():
    assert [p for p in REFUSED if reachable(p) is None] == []
    assert [(p, reachable(p)) for p in ALLOWED if reachable(p)] == []


@pytest.mark.parametrize("prefix", REFUSED)
def test_spec_envfrom_prefix_that_can_make_a_reserved_name_is_refused(prefix):
    with pytest.raises(SpecError) as err:
        validate_job(spec_with(**{"spec.envFrom": [{"secretRef": {"name": "s"},
                                                    "prefix": prefix}]}))
    (problem,) = err.value.problems
    assert problem.startswith("<job>: spec.envFrom[0]"), problem
    assert f"prefix {prefix!r} can make " in problem and "\n" not in problem


@pytest.mark.parametrize("prefix", ALLOWED)
def test_spec_envfrom_prefix_that_cannot_is_kept(prefix):
    job = validate_job(spec_with(**{"spec.envFrom": [{"configMapRef": {"name": "c"},
                                                      "prefix": prefix}]}))
    pod = render(job)[0]["spec"]["template"]["spec"]["containers"][0]
    assert pod["envFrom"] == [{"configMapRef": {"name": "c"}, "prefix": prefix}]


def test_the_error_names_what_the_prefix_reaches():
    with pytest.raises(ValueError, match=r"prefix 'R' can make RANK, which kdist's launcher"):
        C.env_prefix("R")
    with pytest.raises(ValueError, match=r"prefix 'KDIST' can make KDIST_\*"):
        C.env_prefix("KDIST")


# Prefixes made of the characters reserved names use, so that many come close to one.
_NEAR = st.text(alphabet="KDISTPERANKLOCWMGJBNHXZ_-.", min_size=1, max_size=8)
_PREFIXES = st.one_of(_NEAR, st.sampled_from(RESERVED).flatmap(
    lambda r: st.integers(0, len(r)).map(lambda i: r[:i] or "X")), _NEAR.map(str.lower))


@settings(max_examples=400, deadline=None)
@given(_PREFIXES)
def test_a_prefix_is_refused_exactly_when_some_key_makes_a_reserved_name(prefix):
    if not C.ENV_NAME.fullmatch(prefix):
        assert prefix_refused(prefix)
        return
    assert prefix_refused(prefix) is (reachable(prefix) is not None), (prefix, reachable(prefix))


def test_every_short_prefix_agrees_with_brute_force():
    alphabet = "KDISTPERANKLOCWMGJX_"
    for n in (1, 2):
        for chars in itertools.product(alphabet, repeat=n):
            prefix = "".join(chars)
            assert prefix_refused(prefix) is (reachable(prefix) is not None), prefix


# --- the overlay --------------------------------------------------------------------------


def overlay_pytorch(**fields):
    return spec_with(**{"spec.podTemplateOverlay": {"spec": {"containers": [
        {"name": "pytorch", **fields}]}}})


def overlay_problem(**fields) -> str:
    with pytest.raises(SpecError) as err:
        validate_job(overlay_pytorch(**fields))
    (problem,) = err.value.problems
    assert "\n" not in problem
    return problem


OVERLAY_PATH = "<job>: spec.podTemplateOverlay: spec.containers[0]"


@pytest.mark.parametrize("prefix", REFUSED)
def test_overlay_envfrom_prefix_is_held_to_the_same_rule(prefix):
    problem = overlay_problem(envFrom=[{"configMapRef": {"name": "c"}, "prefix": prefix}])
    assert problem.startswith(f"{OVERLAY_PATH}.envFrom[0].prefix: prefix {prefix!r} can make ")


@pytest.mark.parametrize(("source", "message"), [
    ({"secretRef": {"name": "s"}, "configMapRef": {"name": "c"}}, "exactly one of"),
    ({"prefix": "APP_"}, "exactly one of"),
    ({}, "exactly one of"),
    ({"secretRef": {"name": "s"}, "fileRef": {"path": "/x"}}, "envFrom[0].fileRef: unknown"),
    ({"secretRef": {"name": "Not_A_Name"}}, "envFrom[0].secretRef: name 'Not_A_Name'"),
    ({"secretRef": {}}, "envFrom[0].secretRef: needs a name"),
    ({"secretRef": "s"}, "envFrom[0].secretRef: needs a name"),
    ({"secretRef": {"name": "s", "optional": "yes"}}, "secretRef.optional: must be true or"),
    ({"secretRef": {"name": "s", "key": "k"}}, "secretRef.key: unknown field"),
    ({"configMapRef": {"name": "c"}, "prefix": 5}, "envFrom[0].prefix: 5 must be a string"),
    ({"configMapRef": {"name": "c"}, "prefix": "1X"}, "is not a valid environment variable"),
    ("c", "envFrom[0]: must be a mapping"),
])
def test_overlay_envfrom_is_a_configmap_or_secret_like_spec_envfrom(source, message):
    problem = overlay_problem(envFrom=[source])
    assert problem.startswith(f"{OVERLAY_PATH}.envFrom"), problem
    assert message in problem and "(the env contract)" in problem


def test_overlay_envfrom_must_be_a_list():
    assert overlay_problem(envFrom={"secretRef": {"name": "s"}}).startswith(
        f"{OVERLAY_PATH}.envFrom: must be a list")


def test_overlay_envfrom_that_follows_the_rules_replaces_spec_envfrom():
    doc = overlay_pytorch(envFrom=[{"secretRef": {"name": "s", "optional": True},
                                    "prefix": "APP_"}])
    doc["spec"]["envFrom"] = [{"configMapRef": {"name": "c"}}]
    pod = render(validate_job(doc))[0]["spec"]["template"]["spec"]["containers"][0]
    assert pod["envFrom"] == [{"secretRef": {"name": "s", "optional": True}, "prefix": "APP_"}]


def test_other_containers_envfrom_is_theirs():
    doc = spec_with(**{"spec.podTemplateOverlay": {"spec": {"initContainers": [
        {"name": "fetch", "image": "busybox", "envFrom": [{"secretRef": {"name": "s"},
                                                           "prefix": "KDIST_"}]}]}}})
    assert validate_job(doc).spec.pod_template_overlay is not None


@pytest.mark.parametrize(("env", "message"), [
    (None, "spec.containers[0].env: cannot be removed"),
    ([{"name": "OMP_NUM_THREADS", "value": 4}], "env[0]: OMP_NUM_THREADS: value must be a str"),
    ([{"name": "NCCL_DEBUG", "value": "LOUD"}], "env[0]: NCCL_DEBUG 'LOUD' is not one of"),
    ([{"name": "A", "value": "x\x00y"}], "env[0]: 'x\\x00y' contains a NUL"),
    ([{"name": 5, "value": "x"}], "env[0]: name 5 must be a string"),
    ([{"name": "X", "value": "1"}, {"name": "TORCHELASTIC_RUN_ID", "value": "x"}],
     "env[1]: 'TORCHELASTIC_RUN_ID' is set by kdist's launcher"),
    ([{"name": "PET_NNODES", "$patch": "delete"}], "env[0]: 'PET_NNODES' is set by kdist"),
])
def test_overlay_env_is_held_to_spec_env_rules(env, message):
    problem = overlay_problem(env=env)
    assert problem.startswith(OVERLAY_PATH), problem
    assert message in problem


def test_render_refuses_a_merged_pod_that_reaches_reserved_names():
    from kdist.rendering.overlay import apply
    from kdist.shared.errors import RenderError

    template = render(validate_job(spec_with()))[0]["spec"]["template"]
    for patch in ({"envFrom": [{"configMapRef": {"name": "c"}, "prefix": "KDIST"}]},
                  {"envFrom": [{"prefix": "APP_"}]},
                  {"env": [{"name": "RANK", "value": "0"}]}):
        overlay = {"spec": {"containers": [{"name": "pytorch", **patch}]}}
        with pytest.raises(RenderError, match="the merged pod"):
            apply(template, overlay)  # load-time rules skipped: the backstop still holds


def test_cli_refuses_an_overlay_envfrom_prefix_with_one_line(tmp_path):
    path = write_spec(tmp_path, overlay_pytorch(envFrom=[{"secretRef": {"name": "s"},
                                                          "prefix": "KDIST"}]))
    res = CliRunner().invoke(main, ["validate", str(path)])
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "spec.containers[0].envFrom[0].prefix: prefix 'KDIST'" in lines[0]
