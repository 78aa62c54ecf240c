"""`python -m ops render`: what it prints must be what the Pulumi program applies, for every stack file
in the repository, and a bad stack file must stop it with the offending key named and exit code 2.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from config.base import SAFE_LOADER
from ops.cli import main
from ops.render import KEY_PLACEHOLDER, RAY_TOKEN_PLACEHOLDER, VOLUME_KEY_PLACEHOLDER
from ops.stack import load_stack_config
from tests.fakes.pulumi import (
    EXISTING_CLUSTER_STACKS,
    ROOT,
    STACK_ROOT,
    STACKS,
    AwsState,
    minimal_config,
    run_stack,
)

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


@pytest.mark.parametrize("stack", STACKS)
def test_render_prints_every_serving_object_the_program_creates(stack, capsys):
    """On a team's cluster, render takes the VPC's ranges and renders `auto` add-ons as installed: the
    program is run where the team runs none, so it installs them too."""
    existing = stack in EXISTING_CLUSTER_STACKS
    aws = AwsState.for_stack(stack).without_team_addons()
    team = aws.team
    assert team is not None
    ranges = [arg for cidr in team.vpc_cidrs for arg in ("--vpc-cidr", cidr)] if existing else []
    code, out, err = render(
        capsys, "--stack", stack, "--root", str(STACK_ROOT), "--account-id", "123456789012", *ranges
    )  # the mocks' account

    run = run_stack(stack=stack, aws=aws) if existing else run_stack(stack=stack)
    kinds = (
        "Namespace",
        "NetworkPolicy",
        "ServiceAccount",
        "ConfigMap",
        "Job",
        "RayService",
        "DaemonSet",
        *ENDPOINT_KINDS,
        *OBSERVABILITY_KINDS,
    )
    fields = (
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
    program = {
        (
            r.inputs["kind"],
            r.inputs["metadata"].get("namespace"),
            r.inputs["metadata"]["name"],
        ): copy.deepcopy({k: r.inputs[k] for k in fields if k in r.inputs})
        for r in run.registrations
        if r.custom
        and r.inputs.get("kind") in kinds
        and r.name.startswith(("ray-llm-", "endpoint-", "observability-"))
        and r.name != "observability-grafana-admin"  # a Secret of generated values, which render never shows
    }
    assert code == 0, err
    documents = {
        (d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]): d
        for d in yaml.load_all(out, Loader=SAFE_LOADER)
    }
    keys = documents.pop(("Secret", "inference", "ray-llm-api-keys"))
    ray_token = documents.pop(("Secret", "inference", "ray-auth-token"))
    assert ray_token["stringData"] == {"auth_token": RAY_TOKEN_PLACEHOLDER}
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
    assert {kind for kind, _, _ in program} == set(kinds)
    # The keys' Secret: the program's clients, with a placeholder where the program holds the keys.
    secret = run.one("kubernetes:core/v1:Secret", "endpoint-api-keys").inputs
    assert set(keys["stringData"]) == set(secret["stringData"].value)
    assert set(keys["stringData"].values()) == {KEY_PLACEHOLDER}
    assert not set(secret["stringData"].value.values()) & set(out.split())


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
