"""Metrics, dashboards and alerts in the cluster: the EBS CSI driver (EKS add-on, its own Pod Identity
role) and a gp3 StorageClass for Prometheus's volume, kube-prometheus-stack (Prometheus, Alertmanager,
Grafana, the operator, kube-state-metrics, node-exporter) with its CRDs applied by the stack, NVIDIA's
dcgm-exporter on the GPU nodes (it and node-exporter in the privileged `node-agents` namespace, so
`monitoring` runs baseline), the PodMonitors for the Ray head and workers, a ServiceMonitor for the
KubeRay operator, the alert rules, and the dashboards as ConfigMaps Grafana's sidecar loads.

Grafana's admin password is generated (pulumi-random), kept as a secret, and handed to Grafana in a
Secret; the chart would otherwise generate one of its own at every install.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s
import pulumi_random as random

from components.helm import crds as chart_crds
from components.helm import helm_release
from components.network_policy import network_policies as apply_network_policies
from components.pod_identity import PodIdentity, PodRoles
from manifests.observability.build import ObservabilityManifests
from manifests.observability.charts import (
    GRAFANA_ADMIN_SECRET,
    GRAFANA_ADMIN_USER,
    kube_prometheus_stack_crds,
)

EBS_CSI_SERVICE_ACCOUNT = "ebs-csi-controller-sa"
EBS_CSI_POLICY = "AmazonEBSCSIDriverPolicyV2"
"""The driver's recommended managed policy: volumes and snapshots it tagged `ebs.csi.aws.com/cluster`
(it tags what it creates) and nothing else."""
PASSWORD_LENGTH = 32


class Observability(pulumi.ComponentResource):
    grafana_admin_password: pulumi.Output[str] | None
    """Grafana's `admin` password, a Pulumi secret; None where an existing Prometheus (and its Grafana)
    serves."""

    def __init__(
        self,
        name: str,
        *,
        manifests: ObservabilityManifests,
        roles: PodRoles,
        kubernetes_version: str,
        provider: k8s.Provider,
        system_nodes: Sequence[pulumi.Resource],
        gpu_nodes: Sequence[pulumi.Resource],
        pod_identity_agent: Sequence[pulumi.Resource],
        volume_key_arn: pulumi.Input[str] | None,
        ebs_csi_driver: bool,
        serving_namespace: pulumi.Input[str],
        kuberay: Sequence[pulumi.Resource],
        team_cluster: bool = False,
        network_policies: Sequence[dict[str, Any]],
        node_agents_policies: Sequence[dict[str, Any]],
        opts: pulumi.ResourceOptions | None = None,
    ):
        """`system_nodes`, `gpu_nodes`: the node groups (what runs where must exist first);
        `pod_identity_agent`: the agent add-on, where the stack installs it; `volume_key_arn`: the KMS key
        of Prometheus's volume (None: the account's default EBS key); `ebs_csi_driver`: install the EBS CSI
        add-on (an existing cluster may run it); `serving_namespace`: the RayService's, where its monitors
        and rules go; `kuberay`: the operator's release, whose Service the ServiceMonitor scrapes;
        `team_cluster`: the cluster is a team's, so an EBS CSI add-on the stack adds there overwrites
        nothing and stays when the stack goes; `network_policies`, `node_agents_policies`: `monitoring`'s
        and `node-agents`' (manifests/traffic.py)."""
        super().__init__("ray-llm-eks:observability:Observability", name, None, opts)
        child = pulumi.ResourceOptions(parent=self, provider=provider)
        self.grafana_admin_password = None
        node_agents = None
        if manifests.kube_prometheus_stack is not None or manifests.dcgm_exporter is not None:
            # node-exporter (kube-prometheus-stack's) and dcgm-exporter, privileged, apart from the rest.
            node_agents = k8s.core.v1.Namespace(
                f"{name}-node-agents-ns",
                metadata=manifests.node_agents_namespace["metadata"],
                opts=pulumi.ResourceOptions.merge(
                    child, pulumi.ResourceOptions(depends_on=list(system_nodes))
                ),
            )
            apply_network_policies(
                f"{name}-node-agents-policy",
                node_agents_policies,
                pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=[node_agents])),
            )
        # What the dashboards wait for (the namespace), and the monitors, rules and dcgm-exporter (the
        # CRDs and the operator's release): nothing where an existing Prometheus serves.
        namespace: list[pulumi.Resource] = []
        operator: list[pulumi.Resource] = []
        if manifests.kube_prometheus_stack is not None:
            assert node_agents is not None
            namespace, operator = self._metrics_stack(
                name,
                manifests,
                roles,
                kubernetes_version,
                child,
                system_nodes,
                pod_identity_agent,
                volume_key_arn,
                ebs_csi_driver,
                node_agents,
                team_cluster,
                network_policies,
            )
        if manifests.dcgm_exporter is not None:
            assert node_agents is not None
            # Its ServiceMonitor needs the CRD; its DaemonSet becomes ready only on GPU nodes.
            helm_release(
                f"{name}-dcgm-exporter",
                manifests.dcgm_exporter,
                pulumi.ResourceOptions.merge(
                    child, pulumi.ResourceOptions(depends_on=[*gpu_nodes, *operator])
                ),
                namespace=node_agents.metadata.name,
            )
        # The operator's admission webhook checks rules as they are created: after the release.
        after_operator = pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=operator))
        for monitor in manifests.monitoring_objects():
            metadata = dict(monitor["metadata"])
            if monitor["kind"] == "ServiceMonitor":
                after = pulumi.ResourceOptions.merge(
                    after_operator, pulumi.ResourceOptions(depends_on=list(kuberay))
                )
            else:
                if metadata["namespace"] == manifests.serving_namespace:
                    metadata["namespace"] = serving_namespace
                after = after_operator
            k8s.apiextensions.CustomResource(
                f"{name}-{metadata['name']}",
                api_version=monitor["apiVersion"],
                kind=monitor["kind"],
                metadata=metadata,
                spec=monitor["spec"],
                opts=after,
            )
        for dashboard in manifests.dashboards:
            k8s.core.v1.ConfigMap(
                f"{name}-{dashboard['metadata']['name']}",
                metadata=dashboard["metadata"],
                data=dashboard["data"],
                opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=namespace)),
            )
        self.register_outputs({"grafanaAdminPassword": self.grafana_admin_password})

    def _metrics_stack(
        self,
        name: str,
        manifests: ObservabilityManifests,
        roles: PodRoles,
        kubernetes_version: str,
        child: pulumi.ResourceOptions,
        system_nodes: Sequence[pulumi.Resource],
        pod_identity_agent: Sequence[pulumi.Resource],
        volume_key_arn: pulumi.Input[str] | None,
        ebs_csi_driver: bool,
        node_agents: pulumi.Resource,
        team_cluster: bool,
        network_policies: Sequence[dict[str, Any]],
    ) -> tuple[list[pulumi.Resource], list[pulumi.Resource]]:
        """kube-prometheus-stack with its volume, namespace, CRDs and Grafana's password; returns
        ([the namespace], [the CRDs, the release])."""
        assert manifests.kube_prometheus_stack is not None
        aws_child = pulumi.ResourceOptions(parent=self)
        volumes: list[pulumi.Resource] = []
        if ebs_csi_driver:
            # The add-on associates the role itself (pod_identity_associations).
            identity = PodIdentity(
                f"{name}-ebs-csi",
                cluster_name=None,
                trust=roles.trust,
                namespace="kube-system",
                service_account=EBS_CSI_SERVICE_ACCOUNT,
                managed_policy_arns=[f"arn:{roles.partition}:iam::aws:policy/{EBS_CSI_POLICY}"],
                description="EBS CSI driver (kube-system/ebs-csi-controller-sa): Prometheus's volume",
                opts=aws_child,
            )
            driver = aws.eks.Addon(
                f"{name}-ebs-csi",
                cluster_name=roles.cluster_name,
                addon_name="aws-ebs-csi-driver",
                addon_version=aws.eks.get_addon_version_output(
                    addon_name="aws-ebs-csi-driver", kubernetes_version=kubernetes_version, most_recent=True
                ).version,
                pod_identity_associations=[
                    aws.eks.AddonPodIdentityAssociationArgs(
                        role_arn=identity.role.arn, service_account=EBS_CSI_SERVICE_ACCOUNT
                    )
                ],
                # On a team's cluster: fail rather than take over a driver EKS did not find (NONE), keep
                # the team's changes on update (PRESERVE), and leave the driver running when the stack
                # goes (`preserve`): other workloads' volumes may have come to need it.
                resolve_conflicts_on_create="NONE" if team_cluster else "OVERWRITE",
                resolve_conflicts_on_update="PRESERVE" if team_cluster else "OVERWRITE",
                preserve=True if team_cluster else None,
                opts=pulumi.ResourceOptions.merge(
                    aws_child,
                    pulumi.ResourceOptions(depends_on=[*system_nodes, *pod_identity_agent, identity]),
                ),
            )
            # Prometheus's claim is deleted with the namespace; the driver deletes its volume (when the
            # StorageClass says Delete), so the namespace and everything in it outlive the driver's access.
            volumes = [driver, identity]
        storage = manifests.storage_class
        # Prometheus's volume, encrypted with the stack's EBS key (the CSI driver's `kmsKeyId`), or with
        # the account's default EBS key where the driver is a team's, whose role may not use the stack's.
        parameters = {**storage["parameters"], **({"kmsKeyId": volume_key_arn} if volume_key_arn else {})}
        storage_class = k8s.storage.v1.StorageClass(
            f"{name}-gp3",
            metadata=storage["metadata"],
            provisioner=storage["provisioner"],
            parameters=parameters,
            volume_binding_mode=storage["volumeBindingMode"],
            allow_volume_expansion=storage["allowVolumeExpansion"],
            reclaim_policy=storage["reclaimPolicy"],
            opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=volumes)),
        )
        namespace = k8s.core.v1.Namespace(
            f"{name}-ns",
            metadata=manifests.namespace["metadata"],
            opts=pulumi.ResourceOptions.merge(
                child, pulumi.ResourceOptions(depends_on=[*system_nodes, *volumes])
            ),
        )
        apply_network_policies(
            f"{name}-policy",
            network_policies,
            pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=[namespace])),
        )
        crds = chart_crds(f"{name}-crds", kube_prometheus_stack_crds(), child)

        # pulumi-random marks `result` secret; said again here, so it stays one whatever the provider does.
        self.grafana_admin_password = pulumi.Output.secret(
            random.RandomPassword(
                f"{name}-grafana-admin", length=PASSWORD_LENGTH, special=False, opts=aws_child
            ).result
        )
        admin = k8s.core.v1.Secret(
            f"{name}-grafana-admin",
            metadata=k8s.meta.v1.ObjectMetaArgs(name=GRAFANA_ADMIN_SECRET, namespace=namespace.metadata.name),
            type="Opaque",
            # pulumi-kubernetes makes a Secret's stringData a Pulumi secret itself.
            string_data={"admin-user": GRAFANA_ADMIN_USER, "admin-password": self.grafana_admin_password},
            opts=child,
        )
        stack = helm_release(
            f"{name}-kube-prometheus-stack",
            manifests.kube_prometheus_stack,
            pulumi.ResourceOptions.merge(
                child,
                pulumi.ResourceOptions(
                    depends_on=[*system_nodes, crds, storage_class, admin, node_agents, *volumes]
                ),
            ),
            namespace=namespace.metadata.name,
        )
        return [namespace], [crds, stack]
