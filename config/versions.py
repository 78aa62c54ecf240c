"""Every version this stack pins, in one place.

Change a version here (or override it per stack where a config key exists) and nothing else: the
components, the offline renderer and the tests all read these names. Each line says where the value
comes from, so the next person can check it before bumping it.
"""

from __future__ import annotations

import datetime
from typing import NamedTuple

KUBERNETES_VERSION = "1.35"
"""EKS control-plane version of the seed (the blog post's `K8S_VERSION`)."""


class EksVersion(NamedTuple):
    released: datetime.date
    end_of_standard_support: datetime.date
    end_of_extended_support: datetime.date


EKS_VERSIONS_CHECKED = datetime.date(2026, 12, 2)
EKS_VERSIONS: dict[str, EksVersion] = {
    "1.35": EksVersion(datetime.date(2026, 1, 28), datetime.date(2027, 3, 27), datetime.date(2028, 3, 27)),
    "1.34": EksVersion(datetime.date(2025, 10, 6), datetime.date(2026, 12, 2), datetime.date(2027, 12, 2)),
    "1.33": EksVersion(datetime.date(2025, 5, 28), datetime.date(2026, 7, 29), datetime.date(2027, 7, 29)),
    "1.32": EksVersion(datetime.date(2025, 1, 25), datetime.date(2026, 3, 23), datetime.date(2027, 3, 23)),
    "1.31": EksVersion(datetime.date(2024, 9, 26), datetime.date(2025, 11, 26), datetime.date(2026, 11, 26)),
    "1.30": EksVersion(datetime.date(2024, 5, 23), datetime.date(2025, 7, 23), datetime.date(2026, 7, 23)),
    "1.29": EksVersion(datetime.date(2024, 1, 23), datetime.date(2025, 3, 23), datetime.date(2026, 3, 23)),
    "1.28": EksVersion(datetime.date(2023, 9, 26), datetime.date(2024, 11, 26), datetime.date(2025, 11, 26)),
}
"""EKS's Kubernetes release calendar (docs.aws.amazon.com/eks/latest/userguide/kubernetes-versions.html,
"Amazon EKS Kubernetes release calendar", as mirrored with its dates by endoflife.date/amazon-eks; read
2026-12-02, the table as of 2026-02). A version is under standard support for 14 months, then in
extended support (at $0.60 instead of $0.10 per cluster hour) for 12 more, and EKS creates clusters on
either; after that it creates none. A version newer than 1.35 is not in the sources read: add its row
from the calendar when EKS offers it (and check the charts support it)."""


def eks_version_problem(version: str, today: datetime.date | None = None) -> str | None:
    """Why EKS would not create a cluster of `version` today, or None."""
    today = today or datetime.date.today()
    known = EKS_VERSIONS.get(version)
    offered = ", ".join(v for v, d in EKS_VERSIONS.items() if d.end_of_extended_support > today)
    if known is None:
        newest = max(EKS_VERSIONS, key=lambda v: tuple(map(int, v.split("."))))
        hint = (
            "; if EKS offers it now, add its dates to EKS_VERSIONS in config/versions.py"
            if tuple(map(int, version.split("."))) > tuple(map(int, newest.split(".")))
            else ""
        )
        return f"EKS has no Kubernetes {version} in its release calendar (EKS creates {offered}){hint}"
    if known.end_of_extended_support <= today:
        return (
            f"EKS ended extended support for Kubernetes {version} on {known.end_of_extended_support} and "
            f"creates no such cluster (EKS creates {offered})"
        )
    return None


def eks_extended_support(version: str, today: datetime.date | None = None) -> datetime.date | None:
    """The end of standard support, when `version` is past it (extended support costs 6x per hour)."""
    today = today or datetime.date.today()
    known = EKS_VERSIONS.get(version)
    return known.end_of_standard_support if known and known.end_of_standard_support <= today else None


SUPPORTED_KUBERNETES = ("1.33", "1.35")
"""The Kubernetes minors the stack's pins support together, oldest and newest: Envoy Gateway v1.9's
compatibility matrix says 1.33 to 1.36 (site/content/en/news/releases/matrix.md at v1.9.0), and 1.35 is
the newest in EKS_VERSIONS and Cluster Autoscaler's pinned minor. The charts' own `kubeVersion` is looser
(kube-prometheus-stack 88.5.3 >= 1.25, dcgm-exporter 4.8.2 >= 1.19, nvidia-device-plugin 0.19.1 >= 1.10;
KubeRay 1.7's install guide: 1.23; the other four charts set none). Read 2026-12-02."""
CLUSTER_AUTOSCALER_KUBERNETES = "1.35"
"""The minor the pinned Cluster Autoscaler (app 1.35.0) is made for: its README recommends running the CA
minor that matches the cluster's (cluster-autoscaler/README.md at cluster-autoscaler-chart-9.59.0)."""


def stack_version_problem(version: str) -> str | None:
    """Why the stack's pinned charts and controllers do not support Kubernetes `version`, or None."""
    oldest, newest = SUPPORTED_KUBERNETES
    as_tuple = tuple(map(int, version.split(".")[:2]))
    if tuple(map(int, oldest.split("."))) <= as_tuple <= tuple(map(int, newest.split("."))):
        return None
    return (
        f"Kubernetes {version}: the stack's pinned charts and controllers support {oldest} to {newest} "
        "(Envoy Gateway v1.9's compatibility matrix, Cluster Autoscaler 1.35; config/versions.py)"
    )


KUBERAY_CHART_VERSION = "1.7.0"
"""`kuberay-operator` chart from https://ray-project.github.io/kuberay-helm/. The seed pinned 1.4.0;
1.7.0 is the newest release and the one whose RayService CRD `tests/schemas/` vendors."""

KUBERAY_CHART_REPO = "https://ray-project.github.io/kuberay-helm/"

KUBERAY_CRDS = ("rayclusters", "rayjobs", "rayservices", "raycronjobs")
"""The chart's crds/ at every version we use (v1.7.0: these four). The operator exits when a CRD it
watches is missing (RayCronJob's controller is off by default, its CRD harmless)."""


def kuberay_crd_url(chart_version: str, plural: str) -> str:
    """A KubeRay CRD as the chart of that version ships it (helm-chart/kuberay-operator/crds/, identical
    to ray-operator/config/crd/bases/), from the release tag."""
    tag = chart_version if chart_version.startswith("v") else f"v{chart_version}"
    return (
        f"https://raw.githubusercontent.com/ray-project/kuberay/{tag}/helm-chart/kuberay-operator/crds/"
        f"ray.io_{plural}.yaml"
    )


NVIDIA_DEVICE_PLUGIN_CHART_VERSION = "0.19.1"
"""`nvidia-device-plugin` chart from https://nvidia.github.io/k8s-device-plugin (NVIDIA/k8s-device-plugin)."""

NVIDIA_DEVICE_PLUGIN_CHART_REPO = "https://nvidia.github.io/k8s-device-plugin"

EFA_DEVICE_PLUGIN_CHART_VERSION = "v0.5.30"
"""`aws-efa-k8s-device-plugin` chart from https://aws.github.io/eks-charts (aws/eks-charts; its
versions carry a leading `v`). Its default instance allow-list includes g6.8xlarge."""

EFA_DEVICE_PLUGIN_CHART_REPO = "https://aws.github.io/eks-charts"

AWS_LOAD_BALANCER_CONTROLLER_CHART_VERSION = "3.5.0"
"""`aws-load-balancer-controller` chart from https://aws.github.io/eks-charts (app and image v3.5.0;
identical to the controller repo's helm/ at tag v3.5.0). It turns the gateway's Service into an NLB."""

AWS_LOAD_BALANCER_CONTROLLER_CHART_REPO = "https://aws.github.io/eks-charts"

AWS_LOAD_BALANCER_CONTROLLER_CRDS = ("crds.yaml", "gateway-crds.yaml")
"""The chart's crds/ at 3.5.0 (TargetGroupBinding, IngressClassParams, ...; and its own gateway.k8s.aws
CRDs). Helm would install them once and never upgrade them, so the stack applies them itself."""


def aws_load_balancer_controller_crd_url(chart_version: str, name: str) -> str:
    """One of the chart's CRD files, from the controller's release tag (same files as the chart)."""
    return (
        "https://raw.githubusercontent.com/kubernetes-sigs/aws-load-balancer-controller/"
        f"v{chart_version}/helm/aws-load-balancer-controller/crds/{name}"
    )


ENVOY_GATEWAY_CHART_VERSION = "v1.9.0"
"""Envoy Gateway's chart `gateway-helm` (published as v1.9.0 by envoyproxy/gateway's release workflow;
app and image v1.9.0). It checks API keys and routes to Ray Serve."""

ENVOY_GATEWAY_CHART_REPO = "oci://docker.io/envoyproxy"

ENVOY_GATEWAY_CRDS = (
    "gatewayapi-crds.yaml",
    "generated/gateway.envoyproxy.io_backends.yaml",
    "generated/gateway.envoyproxy.io_backendtrafficpolicies.yaml",
    "generated/gateway.envoyproxy.io_clienttrafficpolicies.yaml",
    "generated/gateway.envoyproxy.io_envoyextensionpolicies.yaml",
    "generated/gateway.envoyproxy.io_envoypatchpolicies.yaml",
    "generated/gateway.envoyproxy.io_envoyproxies.yaml",
    "generated/gateway.envoyproxy.io_httproutefilters.yaml",
    "generated/gateway.envoyproxy.io_securitypolicies.yaml",
)
"""What the chart's `crds` subchart installs at v1.9.0 (charts/gateway-helm/charts/crds/crds/): the Gateway
API CRDs v1.6.1, experimental channel (which Envoy Gateway's controller watches), and its own."""


def envoy_gateway_crd_url(name: str) -> str:
    return (
        f"https://raw.githubusercontent.com/envoyproxy/gateway/{ENVOY_GATEWAY_CHART_VERSION}/"
        f"charts/gateway-helm/charts/crds/crds/{name}"
    )


KUBE_PROMETHEUS_STACK_CHART_VERSION = "88.5.3"
"""`kube-prometheus-stack` from https://prometheus-community.github.io/helm-charts (prometheus-operator
v0.93.1, Prometheus v3.14.0, Alertmanager v0.34.0, Grafana chart 12.11.1, kube-state-metrics 2.20.0)."""

KUBE_PROMETHEUS_STACK_CHART_REPO = "https://prometheus-community.github.io/helm-charts"

KUBE_PROMETHEUS_STACK_CRDS = (
    "alertmanagerconfigs",
    "alertmanagers",
    "podmonitors",
    "probes",
    "prometheusagents",
    "prometheuses",
    "prometheusrules",
    "scrapeconfigs",
    "servicemonitors",
    "thanosrulers",
)
"""The chart's crds subchart at 88.5.3 (charts/kube-prometheus-stack/charts/crds/crds/crd-<plural>.yaml)."""


def kube_prometheus_stack_crd_url(plural: str) -> str:
    return (
        "https://raw.githubusercontent.com/prometheus-community/helm-charts/kube-prometheus-stack-"
        f"{KUBE_PROMETHEUS_STACK_CHART_VERSION}/charts/kube-prometheus-stack/charts/crds/crds/crd-{plural}.yaml"
    )


DCGM_EXPORTER_CHART_VERSION = "4.8.2"
"""NVIDIA's `dcgm-exporter` chart from https://nvidia.github.io/dcgm-exporter/helm-charts (image
4.5.3-4.8.2; git tag 4.5.3-4.8.2 of NVIDIA/dcgm-exporter)."""

DCGM_EXPORTER_CHART_REPO = "https://nvidia.github.io/dcgm-exporter/helm-charts"

CLUSTER_AUTOSCALER_CHART_VERSION = "9.59.0"
"""`cluster-autoscaler` from https://kubernetes.github.io/autoscaler (app 1.35, the cluster's minor)."""

CLUSTER_AUTOSCALER_CHART_REPO = "https://kubernetes.github.io/autoscaler"

VLLM_VERSION = "0.26.0"
"""vLLM in the image: Ray 2.58.0's `llm` extra pins `vllm[audio]==0.26.0` (and NIXL 1.3.1). The alert
rules and the PD dashboard use the metric names this version exports (through Ray: `ray_vllm_*`)."""

RAY_VERSION = "2.58.0"
MIN_RAY_VERSION = (2, 52)
"""The oldest Ray a stack may name: KubeRay 1.7 refuses token authentication below 2.52.0
(ray-operator/controllers/ray/utils/validation.go), and the stack turns it on (manifests/ray_auth.py)."""
"""Ray inside the image below; KubeRay's `rayVersion` must match it, and the tests validate the serve
config with this exact Ray (`ray[serve]==2.58.0` in requirements-dev.txt)."""

RAY_LLM_IMAGE_REPOSITORY = "ray"
RAY_LLM_IMAGE_TAG = "serve-llm-cuda-v1.0"
"""AWS Ray LLM Deep Learning Container: Ray 2.58.0, vLLM, NIXL, libfabric/EFA, aws-ofi-nccl."""

NIXL_VERSION = "1.3.1"
"""NIXL in the image, with the UCX 1.21.0 its wheel bundles (`nixl-cu13`): Ray 2.58.0's `llm` extra pins
`nixl==1.3.1` and `nixl-cu13==1.3.1`, as vLLM 0.26.0 does (requirements/kv_connectors.txt). The image's
own lock file was not readable; its earlier 2.57.0 build locked 1.3.0. Both are recorded with GPU
buffers in tests/fixtures/nixl/, with 1.5.1 (UCX 1.23) beside them."""

EFA_INSTALLER_VERSION = "1.49.0"
"""The EFA installer the image is built with (aws/deep-learning-containers docker/ray_llm/Dockerfile.cuda,
`EFA_VERSION`), which puts libfabric 2.x in /opt/amazon/efa/lib (1.47.0 carried 2.4.0amzn1.0): the
EFA provider's emulated reads of GPU memory without GPUDirect RDMA came with 2.0 (planning/kv_path.py).
The image's changelog for v1.0 (2026-08-31) lists Ray 2.58.0, vLLM 0.26.0, PyTorch 2.11.0, CUDA 13.0.2
and Python 3.13; it sets FI_PROVIDER=efa and FI_LOG_LEVEL=warn, and installs cuda-cudart-devel (the
unversioned libcudart.so libfabric may dlopen)."""

DLC_REGISTRY_ACCOUNT = "763104351884"
"""The AWS account that publishes Deep Learning Containers to ECR in each region."""

RAY_LLM_PUBLIC_IMAGE = (
    f"public.ecr.aws/deep-learning-containers/{RAY_LLM_IMAGE_REPOSITORY}:{RAY_LLM_IMAGE_TAG}"
)
"""Public mirror of the same image: the way to run in a region without the regional registry."""

DLC_REGIONS = frozenset(
    {
        "us-east-1",
        "us-east-2",
        "us-west-1",
        "us-west-2",
        "ca-central-1",
        "sa-east-1",
        "eu-central-1",
        "eu-west-1",
        "eu-west-2",
        "eu-west-3",
        "eu-north-1",
        "ap-south-1",
        "ap-northeast-1",
        "ap-northeast-2",
        "ap-southeast-1",
        "ap-southeast-2",
    }
)
"""Regions whose DLC registry is account 763104351884 (aws/deep-learning-containers available_images.md).
Opt-in regions, Osaka and China publish from other accounts (China under amazonaws.com.cn), GovCloud is
not listed: there the image must be given (`serving.image`)."""


def regional_image(region: str, digest: str | None = None) -> str:
    """The DLC image in the stack's own region, pulled over the VPC's NAT like the seed did; by digest
    when one is pinned (the tag is mutable, and `rayVersion` must match the Ray inside)."""
    repository = f"{DLC_REGISTRY_ACCOUNT}.dkr.ecr.{region}.amazonaws.com/{RAY_LLM_IMAGE_REPOSITORY}"
    return f"{repository}@{digest}" if digest else f"{repository}:{RAY_LLM_IMAGE_TAG}"


CHECKED: dict[str, datetime.date] = {
    "KUBERNETES_VERSION": EKS_VERSIONS_CHECKED,
    # Each chart's version against its repository's tag, and its values.yaml read for every key the stack
    # sets (tests/schemas/charts/<chart>-<version>.yaml say where from).
    "KUBERAY_CHART_VERSION": datetime.date(2026, 12, 2),
    "NVIDIA_DEVICE_PLUGIN_CHART_VERSION": datetime.date(2026, 12, 2),
    "EFA_DEVICE_PLUGIN_CHART_VERSION": datetime.date(2026, 12, 2),
    "AWS_LOAD_BALANCER_CONTROLLER_CHART_VERSION": datetime.date(2026, 12, 2),
    "ENVOY_GATEWAY_CHART_VERSION": datetime.date(2026, 12, 2),
    "KUBE_PROMETHEUS_STACK_CHART_VERSION": datetime.date(2026, 12, 2),
    "DCGM_EXPORTER_CHART_VERSION": datetime.date(2026, 12, 2),
    "CLUSTER_AUTOSCALER_CHART_VERSION": datetime.date(2026, 12, 2),
    # Read in Ray's and vLLM's release metadata when pinned (the commit that pinned each).
    "RAY_VERSION": datetime.date(2026, 11, 29),
    "VLLM_VERSION": datetime.date(2026, 12, 1),
    # What the image carries, from Ray's wheel metadata, the image's Dockerfile and its changelog.
    "NIXL_VERSION": datetime.date(2026, 12, 2),
    "EFA_INSTALLER_VERSION": datetime.date(2026, 12, 2),
    # The image tags against their registries' listings when pinned; a tag is mutable, so a digest
    # (`serving.imageDigest`) is what makes a pull reproducible.
    "RAY_LLM_IMAGE_TAG": datetime.date(2026, 11, 29),
    "RAY_LLM_PUBLIC_IMAGE": datetime.date(2026, 11, 29),
}
"""When each pin was last checked against its source (a bump updates its date)."""
