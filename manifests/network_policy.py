"""Kubernetes NetworkPolicies, enforced by the VPC CNI's network policy agent (the stack turns it on:
components/cluster.py), and the one every namespace of the stack's workloads gets: no instance
metadata.

pulumi-eks hard-codes the IMDS hop limit at 2, so without it any pod could take the node role's
credentials. Egress goes anywhere but IMDS (169.254.169.254, fd00:ec2::254); EKS Pod Identity's agent
(169.254.170.23) and everything else stay reachable, and every AWS client of the stack gets its
credentials from Pod Identity or IRSA. In kube-system the policy selects only the controllers the
stack installs there (by their charts' name labels); the add-ons AWS manages (aws-node, kube-proxy,
the Pod Identity agent, EBS CSI, coredns) stay as EKS ships them, and most run on the host network,
where no policy applies. The device plugins make no network calls.

What the agent does that matters (aws/aws-network-policy-agent v1.4, amazon-vpc-cni-k8s v1.23):
traffic from the pod's own node is always allowed (the kubelet's probes); `endPort` ranges and
`ipBlock.except` are supported; a policy applies only to pods on the pod network, never to
hostNetwork pods; in the default (standard) mode a new pod allows everything until its policies are
in place; IPv4 or IPv6 rules apply, by the cluster's family, never both.
"""

from __future__ import annotations

from typing import Any

IMDS_V4 = "169.254.169.254/32"
IMDS_V6 = "fd00:ec2::254/128"


def policy(name: str, namespace: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def no_instance_metadata(namespace: str, app: str | None = None) -> dict[str, Any]:
    """Egress anywhere but IMDS, for every pod of the namespace or only those of `app` (by their
    `app.kubernetes.io/name` label)."""
    return policy(
        f"{app}-no-instance-metadata" if app else "no-instance-metadata",
        namespace,
        {
            "podSelector": {"matchLabels": {"app.kubernetes.io/name": app}} if app else {},
            "policyTypes": ["Egress"],
            "egress": [
                {
                    "to": [
                        {"ipBlock": {"cidr": "0.0.0.0/0", "except": [IMDS_V4]}},
                        {"ipBlock": {"cidr": "::/0", "except": [IMDS_V6]}},
                    ]
                },
                # Pods by selector too: whether an ipBlock matches pod IPs is left to the implementation.
                {"to": [{"namespaceSelector": {}}]},
            ],
        },
    )


LOAD_BALANCER_CONTROLLER_APP = "aws-load-balancer-controller"
"""The controller chart's `app.kubernetes.io/name` (3.5.0, no nameOverride)."""
CLUSTER_AUTOSCALER_APP = "aws-cluster-autoscaler"
"""Cluster Autoscaler's chart names its pods `<cloudProvider>-cluster-autoscaler` (9.59.0 _helpers.tpl)."""
