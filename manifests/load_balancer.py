"""The AWS Load Balancer Controller as data: its Helm chart values and its IAM policy.

The controller turns the gateway's `LoadBalancer` Service into a Network Load Balancer with IP targets
(the Envoy pods' own addresses). It runs on the system nodes with its own EKS Pod Identity role; with
`region` and `vpcId` given it never asks the instance metadata service.

Two chart defaults are changed on purpose (both read in the chart and controller source at v3.5.0):

- `enableServiceMutatorWebhook: false`. The chart's Service webhook has `failurePolicy: Fail` and
  matches every Service CREATE in the cluster, so while no controller pod is ready, no Service could be
  created anywhere (KubeRay's serve Service included). It only fills in `loadBalancerClass`, which our
  Service sets itself: the API server refuses to change that field once set.
- `replicaCount: 1` on one system node, else the chart's 2 (leader election keeps one active), and
  requests that planning/system_pods.py counts against the system node.

The policy is upstream's `docs/install/iam_policy.json` at the chart's app version, statement for
statement, with one narrowing the controller's installation guide recommends: security-group ingress
rules may be changed only in this stack's VPC.
"""

from __future__ import annotations

from typing import Any

from config import Settings, versions
from manifests.charts import HelmChart
from planning.nodes import placement
from planning.system_pods import LOAD_BALANCER_CONTROLLER, load_balancer_controller_replicas

CONTROLLER_NAMESPACE = "kube-system"
CONTROLLER_SERVICE_ACCOUNT = "aws-load-balancer-controller"
LOAD_BALANCER_CLASS = "service.k8s.aws/nlb"
"""The controller's default class (pkg/config/service_config.go): Services of this class are its NLBs."""
CLUSTER_TAG = "elbv2.k8s.aws/cluster"
"""The controller tags what it creates with the cluster's name; most of its write access depends on it."""


def load_balancer_controller(settings: Settings, *, cluster_name: str) -> HelmChart:
    """The chart's values but `vpcId`, which the component adds once the VPC exists."""
    requests = LOAD_BALANCER_CONTROLLER
    return HelmChart(
        chart="aws-load-balancer-controller",
        version=versions.AWS_LOAD_BALANCER_CONTROLLER_CHART_VERSION,
        repo=versions.AWS_LOAD_BALANCER_CONTROLLER_CHART_REPO,
        namespace=CONTROLLER_NAMESPACE,
        values={
            "clusterName": cluster_name,
            "region": settings.region,
            "replicaCount": load_balancer_controller_replicas(settings),
            "serviceAccount": {"create": True, "name": CONTROLLER_SERVICE_ACCOUNT},
            **placement(settings).on_system_nodes(),
            "enableServiceMutatorWebhook": False,
            "resources": {
                "requests": {"cpu": requests.cpu, "memory": requests.memory},
                "limits": {"memory": "256Mi"},
            },
        },
        skip_crds=True,
    )


def load_balancer_controller_crds() -> list[str]:
    """The chart's CRDs at its version, which the stack applies itself (Helm never upgrades them)."""
    version = versions.AWS_LOAD_BALANCER_CONTROLLER_CHART_VERSION
    return [
        versions.aws_load_balancer_controller_crd_url(version, name)
        for name in versions.AWS_LOAD_BALANCER_CONTROLLER_CRDS
    ]


def _statement(actions: list[str], resources: list[str] | str = "*", **condition: Any) -> dict[str, Any]:
    statement: dict[str, Any] = {"Effect": "Allow", "Action": actions, "Resource": resources}
    if condition:
        statement["Condition"] = condition
    return statement


READ_ACTIONS = (
    *(
        f"ec2:{action}"
        for action in (
            "DescribeAccountAttributes",
            "DescribeAddresses",
            "DescribeAvailabilityZones",
            "DescribeInternetGateways",
            "DescribeVpcs",
            "DescribeVpcPeeringConnections",
            "DescribeSubnets",
            "DescribeSecurityGroups",
            "DescribeInstances",
            "DescribeNetworkInterfaces",
            "DescribeTags",
            "GetCoipPoolUsage",
            "DescribeCoipPools",
            "GetSecurityGroupsForVpc",
            "DescribeIpamPools",
            "DescribeRouteTables",
        )
    ),
    *(
        f"elasticloadbalancing:{action}"
        for action in (
            "DescribeLoadBalancers",
            "DescribeLoadBalancerAttributes",
            "DescribeListeners",
            "DescribeListenerCertificates",
            "DescribeSSLPolicies",
            "DescribeRules",
            "DescribeTargetGroups",
            "DescribeTargetGroupAttributes",
            "DescribeTargetHealth",
            "DescribeTags",
            "DescribeTrustStores",
            "DescribeListenerAttributes",
            "DescribeCapacityReservation",
        )
    ),
)
"""What the controller reads (upstream iam_policy.json v3.5.0's Describe and Get statements): any resource."""


def _security_group_statements(ec2: str, vpc_arn: str, cluster_name: str) -> list[dict[str, Any]]:
    """The controller's security groups: made in the VPC and tagged for this cluster; changed only there."""
    ours = {f"aws:ResourceTag/{CLUSTER_TAG}": cluster_name}
    made_ours = {f"aws:RequestTag/{CLUSTER_TAG}": cluster_name}
    untagging_request = {f"aws:RequestTag/{CLUSTER_TAG}": "true"}
    return [
        # Upstream allows this on any security group; its installation guide suggests the VPC.
        _statement(
            ["ec2:AuthorizeSecurityGroupIngress", "ec2:RevokeSecurityGroupIngress"],
            ArnEquals={"ec2:Vpc": vpc_arn},
        ),
        # A new security group: in the VPC (ec2:CreateSecurityGroup has no ec2:Vpc key, so the VPC
        # is its resource), tagged for this cluster as it is created.
        _statement(["ec2:CreateSecurityGroup"], vpc_arn),
        _statement(["ec2:CreateSecurityGroup"], f"{ec2}:security-group/*", StringEquals=made_ours),
        _statement(
            ["ec2:CreateTags"],
            f"{ec2}:security-group/*",
            StringEquals={"ec2:CreateAction": "CreateSecurityGroup", **made_ours},
        ),
        _statement(
            ["ec2:CreateTags", "ec2:DeleteTags"],
            f"{ec2}:security-group/*",
            Null=untagging_request,
            StringEquals=ours,
        ),
        _statement(
            [
                "ec2:AuthorizeSecurityGroupIngress",
                "ec2:RevokeSecurityGroupIngress",
                "ec2:DeleteSecurityGroup",
            ],
            StringEquals=ours,
        ),
    ]


def controller_policy(partition: str, vpc_arn: str, cluster_name: str) -> dict[str, Any]:
    """The controller's IAM policy (upstream iam_policy.json v3.5.0), narrowed to what this stack uses:
    ARNs in `partition`; NLBs only (no ALB rules, WAF, Shield or Cognito, which only Ingresses use);
    every change to a load balancer, target group or security group only where it carries this
    cluster's tag (`elbv2.k8s.aws/cluster: <cluster_name>`, which the controller sets on all it creates;
    upstream tests only that the tag exists, so one cluster's controller could change another's), listeners
    included (upstream leaves them unconditioned, so any listener of the account); new security groups
    and ingress rule changes on untagged ones limited to the VPC `vpc_arn`."""
    ec2 = f"arn:{partition}:ec2:*:*"
    elb = f"arn:{partition}:elasticloadbalancing:*:*"
    ours = {f"aws:ResourceTag/{CLUSTER_TAG}": cluster_name}
    made_ours = {f"aws:RequestTag/{CLUSTER_TAG}": cluster_name}
    untagging_request = {f"aws:RequestTag/{CLUSTER_TAG}": "true"}
    load_balancers_and_groups = [f"{elb}:targetgroup/*/*", f"{elb}:loadbalancer/net/*/*"]
    return {
        "Version": "2012-10-17",
        "Statement": [
            _statement(
                ["iam:CreateServiceLinkedRole"],
                StringEquals={"iam:AWSServiceName": "elasticloadbalancing.amazonaws.com"},
            ),
            _statement(list(READ_ACTIONS)),
            # TLS listeners: the certificate the NLB terminates with.
            _statement(["acm:ListCertificates", "acm:DescribeCertificate"]),
            *_security_group_statements(ec2, vpc_arn, cluster_name),
            _statement(
                ["elasticloadbalancing:CreateLoadBalancer", "elasticloadbalancing:CreateTargetGroup"],
                StringEquals=made_ours,
            ),
            _statement(
                ["elasticloadbalancing:CreateListener"], f"{elb}:loadbalancer/net/*/*", StringEquals=ours
            ),
            _statement(
                ["elasticloadbalancing:AddTags", "elasticloadbalancing:RemoveTags"],
                load_balancers_and_groups,
                Null=untagging_request,
                StringEquals=ours,
            ),
            # Listeners carry the cluster's tag too (controller v3.5.0 tags them at creation: its
            # ListenerRulesTagging feature gate is on by default), so their tags change as the others'.
            _statement(
                ["elasticloadbalancing:AddTags", "elasticloadbalancing:RemoveTags"],
                [f"{elb}:listener/net/*/*/*"],
                Null=untagging_request,
                StringEquals=ours,
            ),
            _statement(
                ["elasticloadbalancing:AddTags"],
                [f"{elb}:listener/net/*/*/*"],
                StringEquals={"elasticloadbalancing:CreateAction": "CreateListener", **made_ours},
            ),
            _statement(
                [
                    f"elasticloadbalancing:{action}"
                    for action in (
                        "ModifyLoadBalancerAttributes",
                        "SetIpAddressType",
                        "SetSecurityGroups",
                        "SetSubnets",
                        "DeleteLoadBalancer",
                        "ModifyTargetGroup",
                        "ModifyTargetGroupAttributes",
                        "DeleteTargetGroup",
                        "ModifyListenerAttributes",
                        "ModifyCapacityReservation",
                        "ModifyIpPools",
                    )
                ],
                StringEquals=ours,
            ),
            _statement(
                ["elasticloadbalancing:AddTags"],
                load_balancers_and_groups,
                StringEquals={
                    "elasticloadbalancing:CreateAction": ["CreateTargetGroup", "CreateLoadBalancer"],
                    **made_ours,
                },
            ),
            _statement(
                ["elasticloadbalancing:RegisterTargets", "elasticloadbalancing:DeregisterTargets"],
                f"{elb}:targetgroup/*/*",
                StringEquals=ours,
            ),
            _statement(
                # Authorized against the listener, not its load balancer (AWS's resource types).
                [
                    "elasticloadbalancing:DeleteListener",
                    "elasticloadbalancing:ModifyListener",
                    "elasticloadbalancing:AddListenerCertificates",
                    "elasticloadbalancing:RemoveListenerCertificates",
                ],
                f"{elb}:listener/net/*/*/*",
                StringEquals=ours,
            ),
        ],
    }
