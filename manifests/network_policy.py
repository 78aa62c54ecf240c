"""Kubernetes NetworkPolicies' shapes, enforced by the VPC CNI's network policy agent (the stack turns it
on: components/cluster.py): the one every namespace of the stack's workloads gets, no instance metadata,
and the peers and ports the flows of manifests/traffic.py, the one place that declares them, are made of.

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

from collections.abc import Sequence
from dataclasses import dataclass
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


PROMETHEUS_PODS = {
    "app.kubernetes.io/name": "prometheus",
    "app.kubernetes.io/managed-by": "prometheus-operator",
}
"""prometheus-operator's labels on Prometheus's pods (pkg/prometheus/statefulset.go)."""
RAY_PODS = {"ray.io/is-ray-node": "yes", "app.kubernetes.io/created-by": "kuberay-operator"}
"""KubeRay's labels on every Ray pod of every RayCluster it creates (NewCluster upgrades included)."""
RAY_HEAD_PODS = {**RAY_PODS, "ray.io/node-type": "head"}
BENCH_PODS = {"app.kubernetes.io/component": "bench", "app.kubernetes.io/part-of": "ray-llm-eks"}
"""`ops bench`'s load-test Job (manifests/bench.py), in the serving namespace."""
RAY_WORKER_PODS = {**RAY_PODS, "ray.io/node-type": "worker"}


@dataclass(frozen=True)
class Port:
    name: str
    """The container port's name on the receiving pods (or the range's meaning)."""
    port: int
    end_port: int | None = None

    def rule(self) -> dict[str, Any]:
        entry: dict[str, Any] = {"protocol": "TCP", "port": self.port}
        if self.end_port is not None:
            entry["endPort"] = self.end_port
        return entry


def pods(labels: dict[str, str], namespace: str | None = None) -> dict[str, Any]:
    """A peer: pods with these labels in the policy's own namespace, or in `namespace`."""
    peer: dict[str, Any] = {"podSelector": {"matchLabels": dict(labels)}}
    if namespace is not None:
        peer["namespaceSelector"] = {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
    return peer


def every_pod_of(namespace: str) -> dict[str, Any]:
    """A peer: every pod of another namespace."""
    return {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}}


SAME_NAMESPACE: dict[str, Any] = {"podSelector": {}}
"""A peer: every pod of the policy's own namespace."""


def addresses(cidr: str) -> dict[str, Any]:
    """A peer by address. The API server's calls (admission webhooks, its service proxy) and a load
    balancer's with IP targets and no client-IP preservation come from ENIs in the cluster's subnets,
    so the VPC's range stands for them."""
    return {"ipBlock": {"cidr": cidr}}


def vpc(cidrs: Sequence[str]) -> tuple[dict[str, Any], ...]:
    """The VPC's ranges as peers (`addresses`): every range of the VPC, where an existing cluster's has
    several (pods in a secondary range, say)."""
    return tuple(addresses(cidr) for cidr in cidrs)
