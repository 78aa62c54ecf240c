"""A newcomer's first hour (issue 28): a stack file of their own works in the suite and offline, `ops
plan` shows what they would get and what it costs, `ops preflight` names every missing prerequisite,
ops commands exit 0/1/2 by one rule, and mistakes are named for what they are."""

from __future__ import annotations

import contextlib
import io
import json
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from config import ConfigError, load_settings
from ops.cli import main
from ops.kube import OpsError, exec_plugin_problem
from ops.preflight import format_findings, preflight, quota_of, vcpus_needed
from planning.catalog import CATALOG
from planning.cost import PRICE_CACHE_ENV
from planning.names import copied_names, name_clashes, stack_files_beside, stack_names
from planning.price_snapshot import PRICES, SNAPSHOT_DATE, snapshot_prices
from tests.fakes.kube import connect_with, gateway_cluster, healthy_cluster
from tests.fakes.ops import IDENTITY, KEYS, KUBECONFIG, ZONES, answers, pulumi_outputs, quota
from tests.fakes.pulumi import ROOT, STACKS, minimal_config, run_stack, stack_settings


def write_stack(root: Path, name: str, config: dict[str, Any]) -> None:
    (root / f"Pulumi.{name}.yaml").write_text(yaml.safe_dump({"config": config}))


class TestAStackFileOfYourOwn:
    def test_a_region_and_who_reaches_the_api_is_all_a_stack_file_needs(self):
        run = run_stack(minimal_config("us-west-2"), stack="staging")
        assert run.exports["clusterZones"] == ["us-west-2a", "us-west-2b", "us-west-2c"]
        assert run.of_type("kubernetes:ray.io/v1:RayService")
        assert not [w for w in run.warnings if "price" in w]  # the catalog's types all have a price

    def test_a_region_alone_is_refused_naming_the_key_and_the_fix(self):
        with pytest.raises(ConfigError, match=r"cluster\.publicAccessCidrs: required.*checkip"):
            load_settings({"aws:region": "us-west-2"})

    def test_a_region_typo_is_named_as_one(self):
        with pytest.raises(
            ConfigError, match=r"aws:region: 'us-wes-2' is not an AWS region; did you mean us-west-2"
        ):
            load_settings(minimal_config("us-wes-2"))

    def test_every_catalogued_type_has_a_snapshot_price_but_capacity_block_only_ones(self):
        missing = {name for name in CATALOG if f"ec2:{name}" not in PRICES}
        assert missing == {"p5e.48xlarge"}

    def test_the_snapshot_says_when_it_stands_in_for_another_region(self):
        prices, label = snapshot_prices("sa-east-1", ["ec2:g6.8xlarge", "nat"])
        assert prices == {"ec2:g6.8xlarge": 2.0144, "nat": 0.045}
        assert SNAPSHOT_DATE in label and "us-east-1 figures standing in for sa-east-1" in label
        assert "may differ" in label and "higher" not in label  # no guess at which way
        assert "standing in" not in snapshot_prices("us-east-1", ["nat"])[1]


class TestCopiedNames:
    def test_a_copied_cluster_name_in_the_same_region_warns_a_bucket_you_name_does_not(self, tmp_path):
        """`modelCache.bucket` names a bucket the stack never creates: two stacks may share it."""
        dev = yaml.safe_load((ROOT / "Pulumi.dev.yaml").read_text())["config"]
        copy = {**dev, "ray-llm-eks:modelCache": {"bucket": "team-models"}}
        write_stack(tmp_path, "dev", {**dev, "ray-llm-eks:modelCache": {"bucket": "team-models"}})
        write_stack(tmp_path, "mine", copy)
        warnings = copied_names("mine", load_settings(copy), stack_files_beside(tmp_path, "mine"))
        assert len(warnings) == 1
        assert "cluster.name ray-llm-multinode is also Pulumi.dev.yaml's cluster in sa-east-1" in warnings[0]
        assert "remove cluster.name for ray-llm-eks-mine" in warnings[0]

    def test_two_stacks_in_one_namespace_of_a_teams_cluster_warn(self, tmp_path):
        byo = yaml.safe_load((ROOT / "Pulumi.byo.example.yaml").read_text())["config"]
        write_stack(tmp_path, "byo", byo)
        warnings = copied_names("mine", load_settings(byo), stack_files_beside(tmp_path, "mine"))
        assert len(warnings) == 1 and "serving.namespace: platform-prod/" in warnings[0], warnings
        apart = {**byo, "ray-llm-eks:serving": {**byo.get("ray-llm-eks:serving", {}), "namespace": "mine"}}
        assert copied_names("mine", load_settings(apart), stack_files_beside(tmp_path, "mine")) == []

    def test_another_region_or_default_names_do_not(self, tmp_path):
        dev = yaml.safe_load((ROOT / "Pulumi.dev.yaml").read_text())["config"]
        write_stack(tmp_path, "dev", dev)
        elsewhere = {**dev, "aws:region": "us-east-1"}
        assert copied_names("mine", load_settings(elsewhere), stack_files_beside(tmp_path, "mine")) == []
        plain = minimal_config("sa-east-1")
        assert copied_names("mine", load_settings(plain), stack_files_beside(tmp_path, "mine")) == []

    @pytest.mark.every_stack_file
    def test_every_stack_file_in_the_directory_computes_names_of_its_own(self):
        """Committed or not (tests/stack_checks.py runs it on another directory's files too)."""
        every = {stack: stack_settings(stack) for stack in STACKS}
        for stack, settings in every.items():
            others = {other: s for other, s in every.items() if other != stack}
            assert name_clashes(stack, settings, others) == [], stack
        buckets = [b for b in (stack_names(s, v).bucket for s, v in every.items()) if b]
        assert len(set(buckets)) == len(buckets), buckets

    def test_two_stack_files_whose_names_once_cut_alike_compute_their_own(self, tmp_path):
        """`ray-llm-eks-analytics-team-a` and `-b` cut to 24 characters once named one bucket."""
        for stack in ("analytics-team-a", "analytics-team-b"):
            write_stack(tmp_path, stack, minimal_config("us-east-1"))
        settings = load_settings(minimal_config("us-east-1"))
        beside = stack_files_beside(tmp_path, "analytics-team-a")
        assert copied_names("analytics-team-a", settings, beside) == []
        a, b = (stack_names(s, settings).bucket for s in ("analytics-team-a", "analytics-team-b"))
        assert a and b and a != b
        # The control: the same two files with one cluster name clash, and say which key to change.
        named = minimal_config("us-east-1", cluster={"name": "analytics"})
        write_stack(tmp_path, "analytics-team-b", named)
        beside = stack_files_beside(tmp_path, "analytics-team-a")
        (warning,) = copied_names("analytics-team-a", load_settings(named), beside)
        assert "cluster.name analytics is also Pulumi.analytics-team-b.yaml's cluster in us-east-1" in warning


class TestPlan:
    def test_the_resources_by_component_do_not_depend_on_the_order_they_registered_in(self, dev_stack):
        """`ops plan`'s resource lines (ops/plan.py): the SDK's scheduling orders registrations, and a
        faster mocked engine once swapped two components and two kinds of equal count."""
        from dataclasses import replace

        from ops.plan import resource_lines

        lines = resource_lines(dev_stack)
        assert lines == resource_lines(replace(dev_stack, registrations=dev_stack.registrations[::-1]))
        ray = next(line for line in lines if " ray-llm (RayService): " in line)
        assert ray.endswith(
            "4 k8s NetworkPolicy, 3 k8s ConfigMap, 2 k8s Job, 2 k8s ServiceAccount, +5 more kinds"
        )

    def test_plan_prints_resources_fit_nodes_and_a_labelled_cost(self, capsys):
        assert main(["plan", "--stack", "dev"]) == 0
        out = capsys.readouterr().out
        assert "Plan of stack dev in sa-east-1" in out
        assert "model fits g6.8xlarge" in out
        assert "GPU: 2 x g6.8xlarge in sa-east-1a" in out
        assert "network (Network): 4 aws RouteTableAssociation, 4 aws Subnet, 3 aws RouteTable" in out
        assert f"Cost (price snapshot of {SNAPSHOT_DATE}, us-east-1 figures standing in for sa-east-1" in out
        assert "serving, GPU nodes at desiredSize: $4.60/h" in out
        assert out.count("hourly on-demand cost") == 0  # the program's own, unlabelled, is replaced
        assert len(out.splitlines()) < 60

    @pytest.fixture(scope="class")
    def mine(self, tmp_path_factory: pytest.TempPathFactory) -> str:
        """What `ops plan` prints for a stack file of your own with an encrypted value, where a preview
        cached the prices: one plan (one run) for two independent things, where its prices come from
        and what it leaves out of the stack file."""
        root = tmp_path_factory.mktemp("first-hour")
        config = minimal_config("us-east-1")
        config["ray-llm-eks:huggingFaceToken"] = {"secure": "v1:ZW5jcnlwdGVk"}
        write_stack(root, "mine", config)
        (root / "__main__.py").write_text("")
        cache = root / ".cache" / "prices.json"  # a preview's cache, as the `price_cache` fixture writes it
        cache.parent.mkdir()
        keys = ["eks", "ec2:m7i.2xlarge", "ec2:g6.8xlarge", "nat", "nlb"]
        cache.write_text(
            json.dumps({f"us-east-1/{k}": {"usd_per_hour": 1.0, "at": time.time()} for k in keys})
        )
        out = io.StringIO()
        with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(out):
            patch.setenv(PRICE_CACHE_ENV, str(cache))
            assert main(["plan", "--stack", "mine", "--root", str(root)]) == 0
        return out.getvalue()

    def test_plan_prefers_the_prices_a_preview_cached(self, mine: str):
        assert "Cost (AWS Price List API, as your last preview cached it" in mine

    def test_a_stack_file_with_encrypted_values_plans_without_them(self, mine: str):
        assert "v1:ZW5jcnlwdGVk" not in mine

    def test_a_stack_the_program_refuses_is_exit_2_with_its_message(self, tmp_path, capsys):
        write_stack(
            tmp_path,
            "mine",
            minimal_config(
                "us-west-2", gpuNodes={"instanceType": "g6.8xlarge", "desiredSize": 9, "maxSize": 2}
            ),
        )
        assert main(["plan", "--stack", "mine", "--root", str(tmp_path)]) == 2
        assert "gpuNodes" in capsys.readouterr().err


class TestPreflight:
    def settings(self):
        return load_settings(yaml.safe_load((ROOT / "Pulumi.dev.yaml").read_text())["config"])

    def test_names_every_missing_tool_at_once(self):
        found = preflight(self.settings(), answers({"pulumi": None, "aws": None}))
        report, code = format_findings(found)
        assert code == 2
        assert "FAIL  Pulumi CLI: not on PATH" in report and "FAIL  AWS CLI v2: not on PATH" in report
        assert "skip  region sa-east-1: skipped (no AWS CLI)" in report and "quota L-DB2E81BA" in report

    def test_aws_cli_v1_and_no_credentials(self):
        run = answers(
            {
                "pulumi version": (0, "v3.200.0\n", ""),
                "aws --version": (0, "aws-cli/1.45.11 Python/3.11.7\n", ""),
                "aws sts": (255, "", "\nUnable to locate credentials. You can configure credentials\n"),
            }
        )
        report, code = format_findings(preflight(self.settings(), run))
        assert code == 2
        assert "FAIL  AWS CLI v2: aws-cli/1.45.11 Python/3.11.7: install version 2" in report
        assert "FAIL  AWS credentials: Unable to locate credentials" in report
        # What it could not check is said, with the quota dev needs, not left out.
        assert "skip  region sa-east-1: skipped (no AWS credentials)" in report
        assert (
            "skip  Running On-Demand G and VT instances: skipped (no AWS credentials): the stack needs up to "
            "64 vCPUs of quota L-DB2E81BA in sa-east-1" in report
        )
        assert "skip  Running On-Demand Standard" in report and "16 vCPUs of quota L-1216C47A" in report

    def test_a_gpu_quota_below_what_the_stack_may_run(self):
        run = answers(
            {
                "pulumi version": (0, "v3.200.0\n", ""),
                "aws --version": (0, "aws-cli/2.31.0 Python/3.13\n", ""),
                "aws sts": (0, IDENTITY, ""),
                "aws ec2 describe-availability-zones": (0, ZONES, ""),
                "aws service-quotas get-service-quota --service-code ec2 --quota-code L-DB2E81BA": quota(32),
                "aws service-quotas get-service-quota --service-code ec2 --quota-code L-1216C47A": quota(640),
            }
        )
        report, code = format_findings(preflight(self.settings(), run))
        assert code == 2, report
        assert "ok    AWS credentials: account 123456789012" in report
        assert "FAIL  Running On-Demand G and VT instances: 32 vCPUs, the stack needs up to 64" in report
        assert "ok    Running On-Demand Standard" in report

    def test_quotas_by_family(self):
        assert quota_of("g6e.12xlarge")[0] == "L-DB2E81BA"
        assert quota_of("p5.48xlarge")[0] == "L-417A185B"
        assert quota_of("m7i.2xlarge")[0] == "L-1216C47A"
        assert vcpus_needed(self.settings()) == {
            ("L-DB2E81BA", "Running On-Demand G and VT instances"): 64,
            ("L-1216C47A", "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances"): 16,
        }

    def test_the_command_exits_2_on_a_problem(self, capsys):
        assert main(["preflight", "--stack", "dev"], run=answers({"pulumi": None, "aws": None})) == 2


EXEC_KUBECONFIG = {
    "apiVersion": "v1",
    "kind": "Config",
    "current-context": "eks",
    "contexts": [{"name": "eks", "context": {"cluster": "eks", "user": "eks"}}],
    "clusters": [{"name": "eks", "cluster": {"server": "https://example.eks.amazonaws.com"}}],
    "users": [
        {
            "name": "eks",
            "user": {
                "exec": {
                    "apiVersion": "client.authentication.k8s.io/v1beta1",
                    "command": "aws",
                    "args": ["eks", "get-token", "--cluster-name", "c", "--output", "json"],
                }
            },
        }
    ],
}


class TestCredentialsFirst:
    def kubeconfig(self, tmp_path) -> Path:
        path = tmp_path / "kubeconfig"
        path.write_text(yaml.safe_dump(EXEC_KUBECONFIG))
        return path

    def test_no_aws_cli(self, tmp_path):
        problem = exec_plugin_problem(self.kubeconfig(tmp_path), answers({"aws": None}))
        assert problem == "the kubeconfig's credential plugin `aws` is not installed (or not on PATH)"

    def test_no_credentials_is_one_line_naming_the_plugin(self, tmp_path):
        run = answers({"aws eks get-token": (255, "", "\nUnable to locate credentials.\n")})
        problem = exec_plugin_problem(self.kubeconfig(tmp_path), run)
        assert problem == (
            "`aws eks get-token` failed: Unable to locate credentials. "
            "(AWS credentials for the cluster's account?)"
        )

    def test_a_token_is_fine(self, tmp_path):
        token = json.dumps({"kind": "ExecCredential", "status": {"token": "k8s-aws-v1.x"}})
        assert exec_plugin_problem(self.kubeconfig(tmp_path), answers({"aws eks": (0, token, "")})) is None

    def test_verify_without_credentials_exits_2_before_any_check(self, tmp_path, capsys):
        run = answers({"aws eks get-token": (255, "", "Unable to locate credentials.")})
        code = main(
            ["verify", "--kubeconfig", str(self.kubeconfig(tmp_path))],
            connect=connect_with(healthy_cluster()),
            run=run,
        )
        captured = capsys.readouterr()
        assert code == 2 and captured.out == ""
        assert captured.err.count("\n") == 1 and "Unable to locate credentials" in captured.err

    def test_an_identity_the_api_server_refuses_exits_2_not_a_false_pass(self, capsys):
        cluster = gateway_cluster()
        cluster.access_error = OpsError(
            "the API server refuses the kubeconfig's identity (HTTP 401)", exit_code=2
        )
        run = pulumi_outputs(kubeconfig=KUBECONFIG, apiKeys=KEYS)
        code = main(["verify", "--stack", "dev", "--root", str(ROOT)], connect=connect_with(cluster), run=run)
        captured = capsys.readouterr()
        assert code == 2 and "PASS" not in captured.out
        assert "refuses the kubeconfig's identity" in captured.err

    def test_the_api_servers_own_401_is_never_the_gateways(self):
        from ops.kube import HttpResponse
        from ops.verify import check_key_required

        status = json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 401})

        class ApiServer401:
            def http_get(self, path, headers=None):
                return HttpResponse(401, status)

        result = check_key_required(ApiServer401())  # type: ignore[arg-type]
        assert not result.passed and "the API server answered 401 itself" in result.reason


class TestExitCodes:
    """0 success, 1 a check failed, 2 the command could not start: for every subcommand."""

    def test_summary_without_pulumi_is_2(self, capsys):
        assert main(["summary", "--stack", "dev"], run=answers({"pulumi": None})) == 2

    def test_dashboards_without_a_kubeconfig_is_2(self, tmp_path, capsys, monkeypatch):
        monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
        assert main(["dashboards"], run=answers({})) == 2
        assert "no kubeconfig at" in capsys.readouterr().err

    def test_an_unknown_stack_is_2_for_every_command(self, capsys):
        for command in ("plan", "render", "preflight", "status", "verify", "dashboards"):
            assert main([command, "--stack", "nope"]) == 2, command


class TestMakefile:
    TEXT = (ROOT / "Makefile").read_text()
    TARGETS = dict(re.findall(r"^([a-z][a-z-]*):([^\n]*)$", TEXT, flags=re.MULTILINE))

    def test_make_alone_prints_help(self):
        assert re.search(r"^\.DEFAULT_GOAL := help$", self.TEXT, flags=re.MULTILINE)
        if shutil.which("make"):
            out = subprocess.run(["make", "-s"], cwd=ROOT, capture_output=True, text=True, timeout=30).stdout
            assert "make plan" in out and "make up" in out
            assert all(line.startswith("  make ") for line in out.splitlines())  # help only, nothing run

    def test_every_target_says_what_it_does(self):
        assert all("## " in line for line in self.TARGETS.values()), self.TARGETS

    def test_python_targets_build_the_venv_first_and_up_checks_first(self):
        for target, line in self.TARGETS.items():
            recipe = self.TEXT.split(f"\n{target}:", 1)[1].split("\n\n", 1)[0]
            if "$(PYTHON)" in recipe:
                assert {"$(VENV)", "$(DEV_VENV)"} & set(line.split("##")[0].split()), target
        assert self.TARGETS["up"].split("##")[0].split() == ["preflight", "$(POLICY_VENV)"]

    def test_recipes_are_silent_so_output_redirects_cleanly(self):
        joined = self.TEXT.replace("\\\n", "")  # a recipe line continued with a backslash is one command
        recipes = re.findall(r"^\t(.*)$", joined, flags=re.MULTILINE)
        assert recipes and all(line.startswith("@") for line in recipes)

    def test_docs_replace_the_reference_only_on_success(self):
        recipe = self.TEXT.split("\ndocs:", 1)[1].split("\n\n", 1)[0]
        assert "> docs/configuration.md.tmp && mv docs/configuration.md.tmp docs/configuration.md" in recipe


class TestDocsStayTrue:
    """Claims of issue 28's list that drift: each is read from the code it describes."""

    DESIGN = (ROOT / "docs" / "design.md").read_text()

    def test_the_node_role_count(self):
        from components.cluster import NODE_POLICIES

        assert f"node IAM role ({len(NODE_POLICIES)} managed policies: `NODE_POLICIES`)" in self.DESIGN

    def test_the_system_node_types_per_example_stack(self):
        for stack in ("dev", "prod"):
            settings = load_settings(yaml.safe_load((ROOT / f"Pulumi.{stack}.yaml").read_text())["config"])
            nodes = settings.system_nodes
            assert f"up to {nodes.max_size} x {nodes.instance_type}" in self.DESIGN, stack

    def test_the_first_up_takes_what_time_to_serving_says(self):
        """An estimate, as time-to-serving.md says it is: nothing there was measured."""
        table = (ROOT / "docs" / "time-to-serving.md").read_text()
        (ours,) = re.findall(r"^\| \*\*total\*\* \| [^|]+ \| \*\*([\d-]+) min\*\* \|", table, flags=re.M)
        assert "Nothing here was measured" in table
        readme, operations = (
            " ".join((ROOT / doc).read_text().split()) for doc in ("README.md", "docs/operations.md")
        )
        assert f"The first `up` should take {ours} minutes (estimated step by step, not measured" in readme
        assert f"The first `up` should take {ours} minutes, an estimate" in operations
        assert "not yet measured on this stack" in operations

    def test_the_readme_states_devs_region_and_cost_as_the_plan_computes_them(self):
        from planning.cost import CostReport, cost_report, price_queries

        settings = load_settings(yaml.safe_load((ROOT / "Pulumi.dev.yaml").read_text())["config"])
        prices, _ = snapshot_prices(settings.region, [q.key for q in price_queries(settings)])
        report = cost_report(settings, prices, 2)
        readme = (ROOT / "README.md").read_text()
        assert f"deploys to **{settings.region}**" in readme
        assert f"**${CostReport.total(report.serving):,.2f}/h** serving" in readme
        assert f"${CostReport.total(report.parked):,.2f}/h\nparked" in readme or (
            f"${CostReport.total(report.parked):,.2f}/h parked" in readme
        )
        assert f"prices of {SNAPSHOT_DATE}" in readme

    def test_what_ci_runs_is_what_the_docs_say(self):
        run = (ROOT / ".ci" / "run").read_text()
        steps = re.findall(r'^step "([a-z]+)', run, flags=re.M)
        for tool in ("ruff", "pyright", "actionlint", "checkov", "pytest"):
            assert tool in steps, tool
        readme = (ROOT / "README.md").read_text()
        assert "ruff, pyright, checkov, actionlint, zizmor, pytest" in readme
        assert "zizmor" in run

    def test_typed_ops_commands_that_need_a_stack_name_one(self):
        from ops.cli import build_parser

        parser = build_parser()
        choices: dict[str, Any] = parser._subparsers._group_actions[0].choices  # type: ignore[union-attr,assignment]
        needs = {
            name
            for name, sub in choices.items()
            if any(a.dest == "stack" and a.required for a in sub._actions)
        }
        for doc in ("README.md", "docs/operations.md", "docs/design.md"):
            for line in (ROOT / doc).read_text().splitlines():
                # `ops bench compare` reads result files, no stack
                for command in re.findall(
                    r"\.venv/bin/python -m ops (\w+)\b(?! compare\b)(?![^`]*--stack)", line
                ):
                    assert command not in needs, (
                        f"{doc}: `ops {command}` without --stack: {line.strip()[:90]}"
                    )


def test_preflight_says_a_team_cluster_went_unchecked_and_a_region_that_did_not_answer_once():
    """Issue 53's sweep: the skipped checks of a stack on a team's cluster name the cluster, and a
    region that did not answer is its failure, not also a skipped line."""
    from tests.fakes.pulumi import stack_settings

    byo = stack_settings("byo.example")
    tools = {
        "pulumi version": (0, "v3.200.0\n", ""),
        "aws --version": (0, "aws-cli/2.31.0 Python/3.13\n", ""),
    }
    no_credentials = answers({**tools, "aws sts": (255, "", "Unable to locate credentials\n")})
    report, _ = format_findings(preflight(byo, no_credentials))
    assert "skip  cluster platform-prod: skipped (no AWS credentials): that it is ACTIVE" in report
    unanswered = answers(
        {
            **tools,
            "aws sts": (0, IDENTITY, ""),
            "aws ec2 describe-availability-zones": (255, "", "An error occurred (AuthFailure)\n"),
        }
    )
    report, code = format_findings(preflight(byo, unanswered))
    region = f"region {byo.region}"
    assert code == 2 and f"FAIL  {region}: An error occurred (AuthFailure)" in report
    assert report.count(f"  {region}:") == 1, report
    assert f"skip  cluster platform-prod: skipped ({region} not answered)" in report
