"""`$(VAR)` in args and env values: `kdist run --local` expands them as the kubelet does.

The reference below is Kubernetes' own algorithm, transliterated line by line from
third_party/forked/golang/expansion/expand.go (v1.34), so the property test compares
kdist's implementation with the kubelet's, not with itself.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kdist.rendering.contract import expand_refs, expanded_env


def kubelet_expand(text: str, env: dict[str, str]) -> str:
    def mapping(name: str) -> str:  # MappingFuncFor: unknown names stay as written
        return env[name] if name in env else f"$({name})"

    def try_read_variable_name(rest: str) -> tuple[str, bool, int]:
        if rest[0] == "$":
            return rest[0:1], False, 1
        if rest[0] == "(":
            for i in range(1, len(rest)):
                if rest[i] == ")":
                    return rest[1:i], True, i + 1
            return "$(", False, 1
        return "$" + rest[0], False, 1

    buf, checkpoint, cursor = [], 0, 0
    while cursor < len(text):
        if text[cursor] == "$" and cursor + 1 < len(text):
            buf.append(text[checkpoint:cursor])
            read, is_var, advance = try_read_variable_name(text[cursor + 1:])
            buf.append(mapping(read) if is_var else read)
            cursor += advance
            checkpoint = cursor + 1
        cursor += 1
    return "".join(buf) + text[checkpoint:]


ENV = {"KDIST_CHECKPOINT_DIR": "/ckpt", "RUN_TAG": "nightly", "KDIST_NNODES": "2", "E": ""}


def test_the_cases_users_write():
    cases = {
        "$(KDIST_CHECKPOINT_DIR)/run": "/ckpt/run",
        "$$(KDIST_CHECKPOINT_DIR)": "$(KDIST_CHECKPOINT_DIR)",  # $$ escapes
        "$(NOPE)": "$(NOPE)",  # not defined: kept
        "$(RUN_TAG)-$(KDIST_NNODES)": "nightly-2",
        "$(HOME)": "$(HOME)",  # the host's env is not the container's
        "$$$(RUN_TAG)": "$nightly",
        "$(RUN_TAG": "$(RUN_TAG",  # unclosed: kept
        "$RUN_TAG": "$RUN_TAG",  # no parenthesis: kept
        "100$": "100$",
        "$(E)x": "x",  # defined and empty
        "${RUN_TAG}": "${RUN_TAG}",  # not kubelet syntax (torch's ${local_rank} survives)
    }
    for text, want in cases.items():
        assert expand_refs(text, ENV) == want == kubelet_expand(text, ENV), text


@given(st.text(alphabet="$()RUN_TAGEx-/ ", max_size=24))
def test_same_as_the_kubelet_on_any_text(text):
    assert expand_refs(text, ENV) == kubelet_expand(text, ENV)


def test_env_values_expand_from_the_variables_listed_before_them():
    env = {"A": "a", "B": "$(A)-$(C)", "C": "c", "D": "$(B)/$$(A)"}
    assert expanded_env(env) == {"A": "a", "B": "a-$(C)", "C": "c", "D": "a-$(C)/$(A)"}


def test_a_local_run_expands_each_nodes_args_from_its_own_container_env(monkeypatch, tmp_path):
    """What `kdist run --local` hands its nodes: node rank per node, spec.env expanded,
    the host's variables never, but for HOME: `$(HOME)` is the HOME the nodes get (a pod's
    is kdist's writable one), here this machine's."""
    from kdist.local import runner as local
    from kdist.spec import validate_job

    from .helpers import spec_with

    job = validate_job(spec_with(**{
        "spec.workload": {"command": ["python", "t.py"],
                          "args": ["$(KDIST_NODE_RANK)", "$(HOME)", "$(TAG)", "$$(TAG)"]},
        "spec.env": {"TAG": "$(KDIST_JOB_NAME)-x"}}))
    seen: dict = {}

    def run_nodes(argv, envs, **kwargs):
        seen.update(argvs=kwargs["node_argvs"], envs=envs)
        return 0

    monkeypatch.setattr(local, "run_nodes", run_nodes)
    monkeypatch.setattr(local, "_preflight", lambda job, root: None)
    monkeypatch.setattr(local, "free_port", lambda port: port)
    monkeypatch.setenv("HOME", "/home/someone")
    monkeypatch.chdir(tmp_path)
    assert local.run_local(job) == 0
    assert [argv[-4:] for argv in seen["argvs"]] == [
        ["0", "/home/someone", "unit-job-x", "$(TAG)"],
        ["1", "/home/someone", "unit-job-x", "$(TAG)"]]
    assert [env["TAG"] for env in seen["envs"]] == ["unit-job-x", "unit-job-x"]
    assert seen["envs"][0]["HOME"] == "/home/someone"  # the env itself is still this host's
