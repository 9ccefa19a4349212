"""Property: arbitrary env values, labels, args and names reach the manifests exactly.

Nothing a user writes can add, drop or change a field: injection attempts
(newlines, `---`, quotes, `{{ }}`, YAML syntax) round-trip as plain strings.
"""

from __future__ import annotations

import json

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kdist.rendering import render, to_json, to_yaml
from kdist.spec import validate_job
from tests.unit.helpers import spec_with

# Anything YAML can carry in a string (it cannot carry surrogates or most C0 controls).
yaml_text = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
    max_size=40,
).filter(lambda s: all(c in "\t\n\r" or ord(c) >= 0x20 for c in s))
nasty = st.sampled_from([
    "\n---\nkind: Secret", "{{ name }}", "{% raw %}", "'\"", "a: b", "- x", "&a *a",
    "!!python/object",
    "\u2028", "\u0085", "\ufeff", "\x7f", "null", "true", "0x1F", "1e3", "~", "#c", "|\n x",
])
value = st.one_of(yaml_text, nasty)
env_name = st.from_regex(r"\A[A-Z_][A-Z0-9_]{0,20}\Z").filter(
    lambda n: n not in {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                        "MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "JOB_COMPLETION_INDEX"}
    and not n.startswith(("KDIST_", "PET_", "TORCHELASTIC_"))
)
label_value = st.from_regex(r"\A([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?\Z")
label_key = st.from_regex(
    r"\A([a-z0-9]{1,10}(\.[a-z0-9]{1,10}){0,2}/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,20}[A-Za-z0-9])?\Z"
)
name = st.from_regex(r"\A[a-z]([-a-z0-9]{0,48}[a-z0-9])?\Z")


# Every value a user writes into a spec, hostile strings included (the e2e tier sends
# the same ones to a real API server).
USER_VALUES = {
    "env": st.dictionaries(env_name, value, max_size=6),
    "args": st.lists(value, max_size=6),
    "labels": st.dictionaries(label_key, label_value, max_size=4).filter(
        lambda d: not any(k.startswith(("kdist.dev/", "app.kubernetes.io/", "kueue.x-k8s.io/"))
                          for k in d)),
    "job_name": name,
    "backend": st.sampled_from(["indexed-job", "pytorchjob"]),
}


def spec_of(env, args, labels, job_name, backend) -> dict:
    """A spec carrying the values USER_VALUES draws. The user's own module: any args are
    its to read (kdist's own workloads' args are checked against their flags)."""
    return spec_with(**{
        "metadata.name": job_name, "metadata.labels": labels, "spec.backend": backend,
        "spec.env": env, "spec.workload": {"module": "train", "args": args},
    })


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**USER_VALUES)
def test_user_values_round_trip_exactly(env, args, labels, job_name, backend):
    job = validate_job(spec_of(env, args, labels, job_name, backend))
    objects = render(job)
    as_yaml = list(yaml.safe_load_all(to_yaml(objects)))
    for parsed in (as_yaml, json.loads(to_json(objects))["items"]):
        assert parsed == objects
    kinds = [o["kind"] for o in objects]
    assert kinds == (["PyTorchJob"] if backend == "pytorchjob" else ["Job", "Service"])
    for obj in objects:
        assert obj["metadata"]["name"] == job_name
        assert {k: obj["metadata"]["labels"][k] for k in labels} == labels
    template = (objects[0]["spec"]["template"] if backend == "indexed-job"
                else objects[0]["spec"]["pytorchReplicaSpecs"]["Master"]["template"])
    (container,) = template["spec"]["containers"]
    assert container["args"][container["args"].index("--") + 1:] == args
    rendered_env = {e["name"]: e.get("value") for e in container["env"]}
    assert {k: rendered_env[k] for k in env} == env
    assert set(container) == {
        "name", "image", "imagePullPolicy", "command", "args", "ports", "env", "resources",
        "terminationMessagePolicy", "securityContext", "volumeMounts",
    }
