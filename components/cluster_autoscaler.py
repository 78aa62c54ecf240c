"""Cluster Autoscaler (Helm, kube-system, on the system nodes) and its own EKS Pod Identity role: it
sizes the GPU node group to the GPU worker pods, between the group's minSize and maxSize, and Pulumi
leaves the group's desired size to it (`ignore_scaling_changes` on the node group). What it may do is
in manifests/cluster_autoscaler.py."""

from __future__ import annotations

import json
from collections.abc import Sequence

import pulumi
import pulumi_kubernetes as k8s

from components.helm import helm_release
from components.network_policy import network_policies
from components.pod_identity import PodIdentity, PodRoles
from manifests.charts import HelmChart
from manifests.cluster_autoscaler import NAMESPACE, SERVICE_ACCOUNT, cluster_autoscaler_policy
from manifests.network_policy import CLUSTER_AUTOSCALER_APP, no_instance_metadata


class ClusterAutoscaler(pulumi.ComponentResource):
    release: k8s.helm.v3.Release
    """The Helm release."""

    def __init__(
        self,
        name: str,
        *,
        chart: HelmChart,
        roles: PodRoles,
        plain_cluster_name: str,
        team_stack: str | None = None,
        provider: k8s.Provider,
        after: Sequence[pulumi.Resource],
        opts: pulumi.ResourceOptions | None = None,
    ):
        """`roles`: where its role is handed out; `plain_cluster_name`: the cluster's name, for the
        policy's tag condition; `team_stack`: on a team's cluster, the stack whose tag alone its rights
        name; `after`: the system node group, the Pod
        Identity agent and the GPU node group."""
        super().__init__("ray-llm-eks:cluster_autoscaler:ClusterAutoscaler", name, None, opts)
        identity = PodIdentity(
            f"{name}-role",
            cluster_name=roles.cluster_name,
            trust=roles.trust,
            namespace=NAMESPACE,
            service_account=SERVICE_ACCOUNT,
            policy=json.dumps(cluster_autoscaler_policy(roles.partition, plain_cluster_name, team_stack)),
            description=f"Cluster Autoscaler ({NAMESPACE}/{SERVICE_ACCOUNT})",
            opts=pulumi.ResourceOptions(parent=self),
        )
        in_cluster = pulumi.ResourceOptions(parent=self, provider=provider, depends_on=list(after))
        self.release = helm_release(
            f"{name}-release",
            chart,
            # Its pod starts with its permissions in place, and at destroy goes before any of them.
            pulumi.ResourceOptions.merge(in_cluster, pulumi.ResourceOptions(depends_on=[identity])),
        )
        # No instance metadata: the chart passes the region, credentials come from Pod Identity.
        network_policies(
            f"{name}-policy", [no_instance_metadata(NAMESPACE, CLUSTER_AUTOSCALER_APP)], in_cluster
        )
        self.register_outputs({"release": self.release.name})
