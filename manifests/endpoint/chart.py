"""Envoy Gateway's installation: its chart's values, its CRDs from the release tag, its namespace, and its
controller's pods and webhook port (gateway-helm v1.9.0).
"""

from __future__ import annotations

from typing import Any

from config import versions
from manifests.charts import HelmChart
from manifests.k8s import namespace, pod_security_labels
from planning.nodes import Placement
from planning.system_pods import ENVOY_GATEWAY_CONTROLLER

GATEWAY_NAMESPACE = "envoy-gateway-system"
"""Envoy Gateway's controller, and the Envoy proxies it runs for every Gateway (its default)."""


READINESS_GATE_LABEL = "elbv2.k8s.aws/pod-readiness-gate-inject"
"""Pods in a namespace labelled so get a readiness gate from the load balancer controller: a new Envoy
pod counts as ready only once the NLB sends it traffic, so a rollout never leaves no healthy target."""


def envoy_gateway_chart(placement: Placement) -> HelmChart:
    """Envoy Gateway's controller on the system nodes. Its CRDs come from the stack (`envoy_gateway_crds`):
    the chart keeps them in a subchart's crds/, which Helm installs once and never upgrades."""
    controller = ENVOY_GATEWAY_CONTROLLER
    return HelmChart(
        chart="gateway-helm",
        version=versions.ENVOY_GATEWAY_CHART_VERSION,
        repo=versions.ENVOY_GATEWAY_CHART_REPO,
        namespace=GATEWAY_NAMESPACE,
        values={
            "crds": {"enabled": False},
            "deployment": {
                "pod": placement.on_system_nodes(),
                "envoyGateway": {
                    "resources": {
                        "requests": {"cpu": controller.cpu, "memory": controller.memory},
                        "limits": {"memory": "1024Mi"},
                    }
                },
            },
            "certgen": {"job": placement.on_system_nodes()},
        },
        skip_crds=True,
    )


def envoy_gateway_crds() -> list[str]:
    """The Gateway API CRDs (v1.6.1, experimental channel, as the chart bundles them) and Envoy Gateway's
    own, from the release tag."""
    return [versions.envoy_gateway_crd_url(name) for name in versions.ENVOY_GATEWAY_CRDS]


def gateway_namespace() -> dict[str, Any]:
    """restricted, and the readiness gate. Envoy Gateway 1.9.0 runs every pod there non-root with every
    capability dropped, no privilege escalation and RuntimeDefault seccomp: the controller and the
    certgen Job by its chart's values, the proxies by its code (internal/infrastructure/kubernetes/
    resource/resource.go `DefaultSecurityContext`, proxy/resource.go), and the stack's EnvoyProxy
    overrides no security context."""
    return namespace(
        GATEWAY_NAMESPACE, {**pod_security_labels("restricted"), READINESS_GATE_LABEL: "enabled"}
    )


ENVOY_GATEWAY_WEBHOOK_PORT = 9443
"""The controller's admission webhook (the topology injector, on by default: gateway-helm 1.9.0
templates/envoy-gateway-deployment.yaml)."""


ENVOY_GATEWAY_CONTROLLER_PODS = {"control-plane": "envoy-gateway"}
"""Envoy Gateway's controller pods (gateway-helm v1.9.0 templates/envoy-gateway-deployment.yaml)."""
