"""The AWS Load Balancer Controller (Helm, kube-system, on the system nodes) and its AWS identity: an IAM
role through EKS Pod Identity with the controller's policy, scoped to this stack's VPC where upstream
allows it. It makes the gateway's Service an NLB (manifests/load_balancer.py says which chart defaults
are changed and why).

Teardown depends on the order here: every load balancer Service must be deleted while the controller,
its role, its policy and its association still exist, and the nodes it runs on, because the
controller's finalizer on the Service is what deletes the NLB, its target groups and security groups.
So those Services depend on `ready`, all of it, and `pulumi destroy` removes them first.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence

import pulumi
import pulumi_kubernetes as k8s

from components.helm import crds as chart_crds
from components.helm import helm_release
from components.network_policy import network_policies
from components.pod_identity import PodIdentity, PodRoles
from manifests.charts import HelmChart
from manifests.load_balancer import (
    CONTROLLER_NAMESPACE,
    CONTROLLER_SERVICE_ACCOUNT,
    controller_policy,
    load_balancer_controller_crds,
)
from manifests.network_policy import LOAD_BALANCER_CONTROLLER_APP, no_instance_metadata


class LoadBalancerController(pulumi.ComponentResource):
    ready: list[pulumi.Resource]
    """What a load balancer Service waits for (and outlives at teardown): the CRDs, the controller's
    whole AWS identity (role, policy, association), the release and the nodes it runs on."""

    def __init__(
        self,
        name: str,
        *,
        chart: HelmChart,
        roles: PodRoles,
        vpc_id: pulumi.Input[str],
        region: str,
        account_id: str,
        provider: k8s.Provider,
        after: Sequence[pulumi.Resource],
        opts: pulumi.ResourceOptions | None = None,
    ):
        """`chart`: manifests.load_balancer.load_balancer_controller, to which `vpc_id` is added;
        `after`: the system node group and the Pod Identity agent."""
        super().__init__("ray-llm-eks:load_balancer_controller:LoadBalancerController", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        partition = roles.partition
        vpc_arn = pulumi.Output.from_input(vpc_id).apply(
            lambda vpc: f"arn:{partition}:ec2:{region}:{account_id}:vpc/{vpc}"
        )
        identity = PodIdentity(
            f"{name}-role",
            cluster_name=roles.cluster_name,
            trust=roles.trust,
            namespace=CONTROLLER_NAMESPACE,
            service_account=CONTROLLER_SERVICE_ACCOUNT,
            policy=vpc_arn.apply(
                lambda arn: json.dumps(controller_policy(partition, arn, chart.values["clusterName"]))
            ),
            description="AWS Load Balancer Controller (kube-system/aws-load-balancer-controller)",
            opts=child,
        )
        in_cluster = pulumi.ResourceOptions(parent=self, provider=provider, depends_on=list(after))
        crds = chart_crds(f"{name}-crds", load_balancer_controller_crds(), in_cluster)
        values = dict(chart.values, vpcId=vpc_id)
        self.release = helm_release(
            f"{name}-release",
            dataclasses.replace(chart, values=values),
            pulumi.ResourceOptions.merge(in_cluster, pulumi.ResourceOptions(depends_on=[crds, identity])),
        )
        # No instance metadata: region and VPC are given, credentials come from Pod Identity.
        network_policies(
            f"{name}-policy",
            [no_instance_metadata(CONTROLLER_NAMESPACE, LOAD_BALANCER_CONTROLLER_APP)],
            in_cluster,
        )
        self.ready = [crds, identity, self.release, *after]
        self.register_outputs({"release": self.release.name})
