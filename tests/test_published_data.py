"""What the stack sends AWS and Helm is what AWS and the chart authors publish: IAM actions, condition
keys and managed-policy ARNs (AWS's published IAM data, tests/aws_iam.py), Helm values keys (each chart's
values.yaml at its pinned version, tests/chart_values.py), and EKS versions (config/versions.py)."""

from __future__ import annotations

import datetime

import pytest

from config import ConfigError, versions
from config.base import load_yaml
from planning.access import ADMIN_POLICY, REFRESH_POLICY, VIEWER_POLICY
from tests import aws_iam, chart_values
from tests.fakes.pulumi import EXISTING_CLUSTER_STACKS, STACKS, StackRun, run_stack, stack_settings
from tests.helm_releases import OWN_ADDONS, releases, values_by_chart


def managed_arns(run: StackRun) -> dict[str, set[str]]:
    """The AWS managed-policy and EKS access-policy ARNs each registered resource names."""
    found: dict[str, set[str]] = {}
    for reg in run.registrations:
        found.setdefault(reg.name, set()).update(aws_iam.managed_arns_in(reg.inputs))
    return found


def published_errors(arns: dict[str, set[str]]) -> list[str]:
    """What AWS's and EKS's published lists say of each ARN: nothing when each exists at its path."""
    every = sorted(set().union(*arns.values()))
    return [
        e for arn in every if aws_iam.MANAGED_ARN.match(arn) for e in aws_iam.managed_policy_errors(arn)
    ] + [
        e for arn in every if aws_iam.ACCESS_POLICY_ARN.match(arn) for e in aws_iam.access_policy_errors(arn)
    ]


def _statement(**fields):
    return {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Resource": "*", **fields}]}


class TestIamAgainstAwsData:
    @pytest.mark.parametrize("stack", STACKS)
    def test_every_policy_document_names_actions_and_keys_aws_publishes(self, stack):
        run = run_stack(stack=stack)
        problems, kinds = [], set()
        for reg in run.registrations:
            for document in aws_iam.documents_in(reg.inputs):
                kinds.add(reg.type)
                problems += [f"{reg.type} {reg.name}: {e}" for e in aws_iam.document_errors(document)]
        assert problems == []
        # Trust, inline, key and bucket policies were all read (a walk that finds nothing proves nothing).
        assert {"aws:iam/role:Role", "aws:iam/rolePolicy:RolePolicy", "aws:kms/key:Key"} <= kinds

    @pytest.mark.parametrize("stack", STACKS)
    def test_every_managed_policy_exists_at_its_path(self, stack):
        arns = managed_arns(run_stack(stack=stack))
        if "observability-ebs-csi" in arns:  # not on a team's add-on
            assert "arn:aws:iam::aws:policy/AmazonEBSCSIDriverPolicyV2" in arns["observability-ebs-csi"]
        assert "arn:aws:iam::aws:policy/AmazonEKSWorkerNodePolicy" in set().union(*arns.values())
        assert published_errors(arns) == []

    @pytest.mark.parametrize("stack", ["dev", "byo.example"])  # the stack's cluster, a team's cluster
    def test_every_access_policy_exists_at_its_path(self, stack):
        people = {
            "adminPrincipalArns": ["arn:aws:iam::123456789012:role/admins"],
            "viewerPrincipalArns": ["arn:aws:iam::123456789012:role/viewers"],
            "refreshPrincipalArns": ["arn:aws:iam::123456789012:role/drift"],
        }
        arns = set().union(*managed_arns(run_stack(stack=stack, overrides={"cluster": people})).values())
        for policy in (ADMIN_POLICY, VIEWER_POLICY, REFRESH_POLICY):
            assert f"arn:aws:eks::aws:cluster-access-policy/{policy}" in arns
        assert published_errors({"all": arns}) == []

    def test_an_eks_access_policy_eks_does_not_publish_fails(self):
        assert (
            aws_iam.access_policy_errors("arn:aws:eks::aws:cluster-access-policy/AmazonEKSAdminViewPolicy")
            == []
        )
        (problem,) = aws_iam.access_policy_errors("arn:aws:eks::aws:cluster-access-policy/AmazonEKSReadOnly")
        assert "EKS publishes none of that name" in problem

    def test_a_managed_policy_at_the_wrong_path_is_named_with_the_right_one(self):
        managed = "arn:aws:iam::aws:policy/"
        (problem,) = aws_iam.managed_policy_errors(f"{managed}service-role/AmazonEBSCSIDriverPolicyV2")
        assert f"AWS publishes it as {managed}AmazonEBSCSIDriverPolicyV2" in problem
        assert aws_iam.managed_policy_errors(f"{managed}service-role/AmazonEBSCSIDriverPolicy") == []
        assert "no managed policy of that name" in aws_iam.managed_policy_errors(f"{managed}Nope")[0]
        assert aws_iam.managed_policy_errors("arn:aws-cn:iam::aws:policy/AmazonEKSWorkerNodePolicy") == []

    @pytest.mark.parametrize(
        ("action", "says"),
        [
            ("ec2:DescribeInstanse", "ec2 has no such action"),
            ("elbv2:CreateLoadBalancer", "no service prefix 'elbv2'"),
            ("s3:Gett*", "s3 has no such action"),
        ],
    )
    def test_a_misspelt_action_fails_naming_it(self, action, says):
        (problem,) = aws_iam.document_errors(_statement(Action=["ec2:DescribeInstances", action]))
        assert action in problem and says in problem

    def test_wildcards_and_case_follow_iam(self):
        document = _statement(Action=["ec2:Describe*", "S3:getobject", "kms:*", "*"])
        assert aws_iam.document_errors(document) == []

    @pytest.mark.parametrize(
        ("action", "condition", "says"),
        [
            ("s3:ListBucket", {"StringLike": {"s3:prefixes": ["a/*"]}}, "s3 has no such condition key"),
            ("s3:ListBucket", {"StringEquals": {"aws:SourceAcount": "1"}}, "not a global key"),
            ("s3:ListBucket", {"StringEquals": {"ec2:Vpc": "x"}}, "has no ec2 action"),
        ],
    )
    def test_an_unknown_condition_key_fails_naming_it(self, action, condition, says):
        (problem,) = aws_iam.document_errors(_statement(Action=action, Condition=condition))
        assert says in problem and next(iter(next(iter(condition.values())))) in problem

    def test_known_condition_keys_pass(self):
        document = _statement(
            Action=["ec2:CreateTags", "sts:AssumeRole"],
            Condition={
                "StringEquals": {"ec2:CreateAction": "CreateSecurityGroup", "aws:SourceAccount": "1"},
                "Null": {"aws:RequestTag/elbv2.k8s.aws/cluster": "false"},
            },
        )
        assert aws_iam.document_errors(document) == []

    def test_an_oidc_providers_keys_pass_only_under_a_federated_principal(self):
        issuer = "oidc.eks.us-east-1.amazonaws.com/id/ABC"
        condition = {"StringEquals": {f"{issuer}:sub": "system:serviceaccount:a:b"}}
        federated = _statement(
            Action="sts:AssumeRoleWithWebIdentity", Principal={"Federated": "arn"}, Condition=condition
        )
        assert aws_iam.document_errors(federated) == []
        anyone = {**federated["Statement"][0], "Principal": {}}
        assert aws_iam.document_errors({**federated, "Statement": [anyone]})

    def test_an_action_on_a_resource_it_never_takes_fails(self):
        """The bug this found: DeleteListener allowed on load balancers, which AWS never asks it about."""
        lb = "arn:aws:elasticloadbalancing:*:*:loadbalancer/net/*/*"
        (problem,) = aws_iam.document_errors(
            _statement(Action="elasticloadbalancing:DeleteListener", Resource=lb)
        )
        assert "DeleteListener: none of its resources (listener/app, listener/gwy, listener/net)" in problem
        listener = "arn:aws:elasticloadbalancing:*:*:listener/net/*/*/*"
        assert (
            aws_iam.document_errors(
                _statement(Action="elasticloadbalancing:DeleteListener", Resource=listener)
            )
            == []
        )

    def test_resource_wildcards_match_as_iam_matches_them(self):
        group = "arn:aws:logs:us-east-1:123456789012:log-group:/aws/vpc/x/flow-logs"
        stream_actions = ["logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams"]
        assert (
            aws_iam.document_errors(_statement(Action=stream_actions, Resource=[group, f"{group}:*"])) == []
        )
        (problem,) = aws_iam.document_errors(_statement(Action="logs:PutLogEvents", Resource=group))
        assert "log-stream" in problem
        assert (
            aws_iam.document_errors(_statement(Action="s3:GetObject", Resource="arn:aws:s3:::b/models/*"))
            == []
        )
        assert aws_iam.document_errors(_statement(Action="s3:GetObject", Resource="arn:aws:s3:::b"))

    def test_the_data_is_dated(self):
        # The package's version carries the date AWS's reference was read (0.21.YYYYMMDDn).
        assert versions_date(aws_iam.data_version()) >= datetime.date(2026, 9, 1)


def versions_date(version: str) -> datetime.date:
    stamp = version.split(".")[-1][:8]
    return datetime.date(int(stamp[:4]), int(stamp[4:6]), int(stamp[6:8]))


class TestHelmValuesAgainstTheCharts:
    @pytest.mark.parametrize("stack", [*STACKS, *(s + OWN_ADDONS for s in EXISTING_CLUSTER_STACKS)])
    def test_every_key_we_set_is_one_the_pinned_chart_declares(self, stack):
        # By stack, not by release: a parameter per release would run every stack file at collection.
        found = [
            f"{chart}: {error}"
            for name, chart, version, values in releases()
            if name == stack
            for error in chart_values.errors(chart, version, values)
        ]
        assert found == []

    def test_every_chart_we_install_is_indexed_at_its_pinned_version(self):
        charts = {chart: version for _, chart, version, _ in releases()}
        assert set(charts) == {
            "aws-efa-k8s-device-plugin",
            "aws-load-balancer-controller",
            "cluster-autoscaler",
            "dcgm-exporter",
            "gateway-helm",
            "kube-prometheus-stack",
            "kuberay-operator",
            "nvidia-device-plugin",
        }
        for chart, version in charts.items():
            assert chart_values.index(chart, version), (chart, version)

    def test_a_key_the_chart_never_reads_fails(self):
        # The bug this check was built for: the reloader's resources at the top level.
        values = {"prometheusConfigReloader": {"resources": {"requests": {"cpu": "10m"}}}}
        (problem,) = chart_values.errors("kube-prometheus-stack", "88.5.3", values)
        assert "prometheusConfigReloader.resources.requests.cpu is not in the chart's values.yaml" in problem

    def test_a_chart_bump_without_its_index_fails(self):
        (problem,) = chart_values.errors("kuberay-operator", "1.8.0", {"nodeSelector": {"role": "system"}})
        assert "no index tests/schemas/charts/kuberay-operator-1.8.0.yaml" in problem

    def test_free_form_maps_and_lists_take_anything_by_rule(self):
        assert chart_values.errors("nvidia-device-plugin", "0.19.1", {"nodeSelector": {"any": "label"}}) == []
        assert chart_values.errors("dcgm-exporter", "4.8.2", {"tolerations": [{"key": "x"}]}) == []
        deep = {"prometheusOperator": {"resources": {"a": {"b": 1}}}}
        assert chart_values.errors("kube-prometheus-stack", "88.5.3", deep) == []

    def test_a_map_where_the_chart_has_a_plain_value_fails(self):
        (problem,) = chart_values.errors("kube-prometheus-stack", "88.5.3", {"fullnameOverride": {"a": "b"}})
        assert "fullnameOverride is a plain value in the chart, given a map" in problem

    def test_subchart_keys_are_checked_against_the_subchart(self):
        ok = {"grafana": {"sidecar": {"dashboards": {"label": "x"}}, "nodeSelector": {"a": "b"}}}
        assert chart_values.errors("kube-prometheus-stack", "88.5.3", ok) == []
        wrong = {"grafana": {"sidecars": {"a": 1}}}
        (problem,) = chart_values.errors("kube-prometheus-stack", "88.5.3", wrong)
        assert "grafana.sidecars.a" in problem

    def test_no_index_entry_is_stale(self):
        """Each recorded path still covers a key a stack sets, so the indexes say what we use."""
        for path in sorted(chart_values.INDEX.glob("*.yaml")):
            known = load_yaml(path.read_text())
            ours = values_by_chart(known["chart"])
            for entry in known["paths"]:
                parts = tuple(entry["path"])
                assert any(p[: len(parts)] == parts for p in ours), f"{path.name}: {parts} is set by no stack"
            assert known["source"] and known["checked"]

    def test_record_reads_kinds_and_lines_from_the_real_file(self):
        values_yaml = "a:\n  b: 1\n  free: {}\nlist: []\nnothing:\n"
        ours = [("a", "b"), ("a", "free", "x"), ("list",), ("nothing", "y")]
        found = chart_values.record("toy", "1.0", values_yaml, ours, "here")
        assert found["paths"] == [
            {"path": ["a", "b"], "kind": "value", "line": 2},
            {"path": ["a", "free"], "kind": "free", "line": 3},
            {"path": ["list"], "kind": "list", "line": 4},
            {"path": ["nothing"], "kind": "free", "line": 5},
        ]
        with pytest.raises(SystemExit, match=r"a\.c is not a key of toy's values.yaml"):
            chart_values.record("toy", "1.0", values_yaml, [("a", "c")], "here")
        with pytest.raises(SystemExit, match=r"a\.b is a plain value"):
            chart_values.record("toy", "1.0", values_yaml, [("a", "b", "c")], "here")


class TestVersionsThatExist:
    def test_the_default_kubernetes_version_is_one_eks_creates(self):
        assert versions.eks_version_problem(versions.KUBERNETES_VERSION) is None
        for stack in STACKS:
            assert versions.eks_version_problem(stack_settings(stack).cluster.kubernetes_version) is None

    @pytest.mark.parametrize(
        ("version", "says"),
        [
            ("1.28", "ended extended support for Kubernetes 1.28 on 2025-11-26"),
            ("1.31", "ended extended support for Kubernetes 1.31 on 2026-11-26"),
            ("1.99", "add its dates to EKS_VERSIONS"),
            ("1.20", "no Kubernetes 1.20 in its release calendar"),
            # EKS still creates 1.32 (extended support), but Envoy Gateway v1.9 supports 1.33 and later
            ("1.32", "support 1.33 to 1.35 (Envoy Gateway v1.9's compatibility matrix"),
        ],
    )
    def test_a_version_eks_does_not_create_is_refused_naming_the_key(self, version, says):
        with pytest.raises(ConfigError) as raised:
            stack_settings("dev", cluster={"kubernetesVersion": version})
        assert "ray-llm-eks:cluster.kubernetesVersion" in str(raised.value) and says in str(raised.value)

    def test_the_calendar_decides_by_date(self):
        day = datetime.date(2026, 6, 1)
        assert versions.eks_version_problem("1.30", day) is None
        assert versions.eks_version_problem("1.30", datetime.date(2026, 7, 23))
        assert versions.eks_extended_support("1.32", day) == datetime.date(2026, 3, 23)
        assert versions.eks_extended_support("1.35", day) is None

    def test_extended_support_is_a_warning_in_the_preview(self):
        run = run_stack(overrides={"cluster": {"kubernetesVersion": "1.33"}})
        assert any("1.33 left EKS's standard support on 2026-07-29" in w for w in run.warnings)

    def test_every_pinned_version_records_when_it_was_checked(self):
        pinned = {
            name
            for name in vars(versions)
            if name.endswith(("_VERSION", "_IMAGE_TAG", "_IMAGE"))
            and isinstance(getattr(versions, name), str)
        }
        assert pinned <= set(versions.CHECKED), sorted(pinned - set(versions.CHECKED))
        assert all(isinstance(day, datetime.date) for day in versions.CHECKED.values())
