"""`python -m ops render`: what it prints must be what the Pulumi program applies, for every stack file
in the repository, and a bad stack file must stop it with the offending key named and exit code 2.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from config.base import SAFE_LOADER
from ops.cli import main
from ops.render import (
    GRAFANA_PASSWORD_PLACEHOLDER,
    HF_TOKEN_PLACEHOLDER,
    KEY_PLACEHOLDER,
    RAY_TOKEN_PLACEHOLDER,
    VOLUME_KEY_PLACEHOLDER,
)
from ops.stack import load_stack_config
from tests.fakes.pulumi import (
    EXISTING_CLUSTER_STACKS,
    ROOT,
    STACK_ROOT,
    STACKS,
    AwsState,
    Registration,
    Secret,
    StackRun,
    minimal_config,
    run_stack,
)

Key = tuple[str, str | None, str]

ENDPOINT_KINDS = (
    "GatewayClass",
    "EnvoyProxy",
    "Gateway",
    "HTTPRoute",
    "SecurityPolicy",
    "ClientTrafficPolicy",
    "BackendTrafficPolicy",
    "Service",
)
OBSERVABILITY_KINDS = ("StorageClass", "PodMonitor", "ServiceMonitor", "PrometheusRule")


def render(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["render", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_every_stack_file_is_rendered_and_dev_is_among_them():
    assert "dev" in STACKS


RELEASE = "kubernetes:helm.sh/v3:Release"
"""A chart's release: no object of its own (its values are in manifests/, its objects the chart's)."""
SECRET = "kubernetes:core/v1:Secret"
FIELDS = (
    "apiVersion",
    "kind",
    "metadata",
    "spec",
    "data",
    "type",
    "provisioner",
    "parameters",
    "volumeBindingMode",
    "allowVolumeExpansion",
    "reclaimPolicy",
)


def rendered_and_applied(
    stack: str, capsys: pytest.CaptureFixture[str], root: Path = STACK_ROOT
) -> tuple[dict[Key, dict[str, Any]], dict[Key, Registration], StackRun, str]:
    """`ops render`'s documents and the program's `kubernetes:*` registrations but Helm releases, each
    by (kind, namespace, name), for `root`'s stack file. On a team's cluster, render takes the VPC's
    ranges and renders `auto` add-ons as installed: the program is run where the team runs none, so it
    installs them too."""
    existing = stack in EXISTING_CLUSTER_STACKS
    aws = AwsState.for_stack(stack).without_team_addons()
    team = aws.team
    assert team is not None
    ranges = [arg for cidr in team.vpc_cidrs for arg in ("--vpc-cidr", cidr)] if existing else []
    code, out, err = render(
        capsys, "--stack", stack, "--root", str(root), "--account-id", "123456789012", *ranges
    )  # the mocks' account
    assert code == 0, err
    config = None if root == STACK_ROOT else load_stack_config(root, stack)
    run = run_stack(config, stack=stack, aws=aws) if existing else run_stack(config, stack=stack)
    documents = {
        (d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]): d
        for d in yaml.load_all(out, Loader=SAFE_LOADER)
    }
    applied = {
        (r.inputs["kind"], r.inputs["metadata"].get("namespace"), r.inputs["metadata"]["name"]): r
        for r in run.registrations
        if r.custom and r.type.startswith("kubernetes:") and r.type != RELEASE
    }
    return documents, applied, run, out


@pytest.mark.parametrize("stack", STACKS)
def test_render_holds_every_object_the_program_applies(stack, capsys):
    """By kind, namespace and name: a GitOps diff or the checkov scan of render misses nothing the
    program applies (once 7 of 58: the KubeRay operator's namespace and policies, the IMDS policies in
    kube-system, Grafana's admin Secret). Besides them the program registers only the charts' own: Helm
    releases, and the charts' CRDs, applied from each chart's `crds/` files (a ConfigGroup each)."""
    documents, applied, run, _ = rendered_and_applied(stack, capsys)
    assert sorted(documents, key=str) == sorted(applied, key=str)
    groups = [r for r in run.registrations if r.type.startswith("kubernetes:") and not r.custom]
    assert {r.type for r in groups} == {"kubernetes:yaml/v2:ConfigGroup"}
    files = [f for r in groups for f in r.inputs["files"]]
    assert files and all("/crds/" in f and f.startswith("https://raw.githubusercontent.com/") for f in files)


def test_a_hugging_face_token_secret_is_rendered_as_a_placeholder(capsys, tmp_path):
    config = load_stack_config(ROOT, "dev")
    _write_stack(tmp_path, "dev", {**config, "ray-llm-eks:huggingFaceToken": "hf_notarealtoken0123456789"})
    documents, applied, _, out = rendered_and_applied("dev", capsys, tmp_path)
    key = ("Secret", "inference", "hf-token")
    assert key in applied and sorted(documents, key=str) == sorted(applied, key=str)
    assert documents[key]["stringData"] == {"token": HF_TOKEN_PLACEHOLDER}
    assert "hf_notarealtoken" not in out


@pytest.mark.parametrize("stack", STACKS)
def test_render_prints_every_object_the_program_creates_as_it_creates_it(stack, capsys):
    documents, applied, run, out = rendered_and_applied(stack, capsys)
    existing = stack in EXISTING_CLUSTER_STACKS
    team = AwsState.for_stack(stack).team
    assert team is not None
    program = {
        key: copy.deepcopy({k: r.inputs[k] for k in FIELDS if k in r.inputs})
        for key, r in applied.items()
        if r.type != SECRET
    }
    secrets = {key: documents.pop(key) for key in [k for k in documents if k[0] == "Secret"]}
    # Every Secret: the program's keys, each value a placeholder, none of the program's values.
    for key, document in secrets.items():
        given = applied[key].inputs["stringData"]
        given = given.value if isinstance(given, Secret) else given
        given = {k: v.value if isinstance(v, Secret) else v for k, v in given.items()}
        assert set(document["stringData"]) == set(given), key
        shown = {k for k, v in given.items() if document["stringData"][k] == v}
        assert shown <= {"admin-user"}, key  # Grafana's user name, the chart's default, is no secret
        assert not {str(v) for k, v in given.items() if k not in shown} & set(out.split()), key
    assert secrets[("Secret", "inference", "ray-llm-api-keys")]["stringData"] == dict.fromkeys(
        run.one(SECRET, "endpoint-api-keys").inputs["stringData"].value, KEY_PLACEHOLDER
    )
    assert secrets[("Secret", "inference", "ray-auth-token")]["stringData"] == {
        "auth_token": RAY_TOKEN_PLACEHOLDER
    }
    grafana = secrets[("Secret", "monitoring", "grafana-admin")]["stringData"]
    assert grafana == {"admin-user": "admin", "admin-password": GRAFANA_PASSWORD_PLACEHOLDER}
    # The EBS key is created by the program; render shows where its ARN goes.
    # On a team's cluster the cluster-scoped names stand apart from the team's (planning/names.py).
    storage = ("StorageClass", None, "ray-llm-eks-inference-gp3" if existing else "gp3")
    gateway_class = ("GatewayClass", None, "ray-llm-eks-inference-envoy" if existing else "envoy")
    assert gateway_class in documents and gateway_class in program
    assert documents[storage]["parameters"].pop("kmsKeyId") == VOLUME_KEY_PLACEHOLDER
    assert program[storage]["parameters"].pop("kmsKeyId").endswith("cluster-volumes")
    if existing:  # the NLB's subnets: a preview picks them from the VPC; offline, the controller's tags
        nlb = program[("Service", "envoy-gateway-system", "ray-llm-gateway")]["metadata"]["annotations"]
        internal = {s.zone: s.id for s in reversed(team.subnets) if not s.public}  # one a zone
        assert nlb.pop("service.beta.kubernetes.io/aws-load-balancer-subnets") == ",".join(
            internal[zone] for zone in sorted(internal)
        )
    assert documents == program
    kinds = {kind for kind, _, _ in program}
    assert {*ENDPOINT_KINDS, *OBSERVABILITY_KINDS, "RayService", "NetworkPolicy", "Namespace"} <= kinds


def test_render_never_prints_a_key_given_in_the_stack_file(tmp_path, capsys):
    config = load_stack_config(ROOT, "dev")
    config["ray-llm-eks:apiKeys"] = {"default": {"secure": "v1:c2VjcmV0LWtleS1jaXBoZXJ0ZXh0"}}
    _write_stack(tmp_path, "keys", config)

    code, out, err = render(capsys, "--stack", "keys", "--root", str(tmp_path))

    assert code == 0, err
    assert "v1:c2VjcmV0" not in out and "<encrypted in the stack file>" not in out
    assert f"default: '{KEY_PLACEHOLDER}'" in out


def test_render_shows_serve_config_as_a_readable_block(capsys):
    code, out, _ = render(capsys, "--stack", "dev")

    assert code == 0
    assert "  serveConfigV2: |\n    applications:\n" in out
    assert out.startswith("---\napiVersion: v1\nkind: Namespace\n")


def _write_stack(root: Path, name: str, config: dict) -> None:
    (root / f"Pulumi.{name}.yaml").write_text(yaml.safe_dump({"config": config}))


def test_render_of_a_bad_config_exits_2_and_names_the_key(tmp_path, capsys):
    config = load_stack_config(ROOT, "dev")
    config["ray-llm-eks:model"] = {**config["ray-llm-eks:model"], "prefillReplicas": 0}
    _write_stack(tmp_path, "broken", config)

    code, out, err = render(capsys, "--stack", "broken", "--root", str(tmp_path))

    assert code == 2
    assert out == ""
    assert "ray-llm-eks:model.prefillReplicas" in err


def test_render_of_a_missing_stack_file_exits_2_and_lists_the_stacks(tmp_path, capsys):
    _write_stack(tmp_path, "staging", minimal_config("sa-east-1"))

    code, out, err = render(capsys, "--stack", "prod", "--root", str(tmp_path))

    assert code == 2
    assert out == ""
    assert "Pulumi.prod.yaml" in err
    assert "staging" in err


def test_render_without_a_region_exits_2_naming_aws_region(tmp_path, capsys):
    config = load_stack_config(ROOT, "dev")
    del config["aws:region"]
    _write_stack(tmp_path, "noregion", config)

    code, _, err = render(capsys, "--stack", "noregion", "--root", str(tmp_path))

    assert code == 2
    assert "aws:region" in err


def test_render_says_what_preview_would_warn_about(tmp_path, capsys):
    _write_stack(
        tmp_path,
        "w",
        {**minimal_config("sa-east-1"), "ray-llm-eks:systemNodes": {"instanceType": "m8g.xlarge"}},
    )
    code, out, err = render(capsys, "--stack", "w", "--root", str(tmp_path))
    assert code == 0 and out.startswith("---")
    assert "warning: ray-llm-eks:systemNodes.instanceType m8g.xlarge is not in the instance catalog" in err
