"""Which add-ons the stack installs, and which it uses where a cluster already runs them.

On the stack's own cluster it installs all of them. On an existing one (`cluster.existingClusterName`)
each is a choice (`addons.*`): `auto` installs it unless the cluster runs one already, `install` and
`existing` say so outright, and every decision is checked against what the cluster runs, read at
preview from its Kubernetes API (`__main__.py` lists the CRDs, Deployments, DaemonSets, Prometheus
objects and GatewayClasses; `inventory_from_api` turns the API's JSON into an `Inventory`).

What the stack installed on an earlier `up` is recorded (planning/zones.py `StackRecord.installed`, on
its EFA security group): a later preview finds it running and must not take it for the team's (a Helm
release name says nothing: a team's `aws-load-balancer-controller` in kube-system looks like ours).

What an existing add-on must be, or preview refuses it:
- a device plugin must tolerate the GPU nodes' taint (`gpuNodes.taint`: the stack's own
  `ray-llm-eks/<namespace>=gpu` there, planning/nodes.py), or it never runs on them;
- the KubeRay operator must be at least the pinned version (the RayService uses its fields);
- Envoy Gateway must have accepted a GatewayClass (the stack's Gateway uses it);
- Prometheus (prometheus-operator's `Prometheus`) must select monitors by labels, so the stack's carry them,
  in its own namespace, where they go (its namespace selectors must match that namespace's labels).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from config import PROJECT, ConfigError, Settings, versions
from planning.nodes import AUTOSCALER_STACK_TAG_PREFIX, placement

ENVOY_GATEWAY_CONTROLLER = "gateway.envoyproxy.io/gatewayclass-controller"


@dataclass(frozen=True)
class Workload:
    kind: str
    namespace: str
    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    images: tuple[str, ...] = ()
    tolerations: tuple[Mapping[str, Any], ...] = ()
    pod_labels: Mapping[str, str] = field(default_factory=dict)
    """Its pod template's labels: what a network policy selects its pods by."""
    args: tuple[str, ...] = ()
    """Every container's command and arguments (e.g. the VPC CNI's `--enable-network-policy=true`)."""

    @property
    def where(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


@dataclass(frozen=True)
class PrometheusServer:
    """A prometheus-operator `Prometheus`: where it runs and which monitors and rules it selects."""

    namespace: str
    name: str
    selectors: Mapping[str, Mapping[str, Any] | None]
    """podMonitorSelector, serviceMonitorSelector, ruleSelector: None selects nothing, {} everything."""
    namespace_selectors: Mapping[str, Mapping[str, Any] | None] = field(default_factory=dict)
    """Keyed as `selectors`, each one's namespace selector (podMonitorNamespaceSelector, ...): None looks
    in its own namespace only, {} in every namespace, anything else in the namespaces whose labels it
    matches (prometheus-operator pkg/prometheus/resource_selector.go `selectObjects`)."""


@dataclass(frozen=True)
class GatewayClassInfo:
    name: str
    controller: str
    accepted: bool


@dataclass(frozen=True)
class Inventory:
    """What runs in the cluster, as its API lists it."""

    crds: frozenset[str] = frozenset()
    workloads: tuple[Workload, ...] = ()
    prometheuses: tuple[PrometheusServer, ...] = ()
    gateway_classes: tuple[GatewayClassInfo, ...] = ()
    namespace_labels: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    """Every namespace's labels (what a Prometheus's namespace selectors match)."""
    gateway_deploy_modes: Mapping[str, str] = field(default_factory=dict)
    """Envoy Gateway's namespace -> where it runs the proxies (its configuration's
    `provider.kubernetes.deploy.type`): ControllerNamespace (the default) or GatewayNamespace."""


ENVOY_GATEWAY_CONFIG = ("envoy-gateway-config", "envoy-gateway.yaml")
"""The ConfigMap (and its key) holding Envoy Gateway's own configuration (gateway-helm's
templates/envoy-gateway-config.yaml)."""
GATEWAY_NAMESPACE_MODE = "GatewayNamespace"


MONITOR_SELECTORS = ("podMonitorSelector", "serviceMonitorSelector", "ruleSelector")


def inventory_from_api(
    crds: Mapping[str, Any],
    deployments: Mapping[str, Any],
    daemonsets: Mapping[str, Any],
    prometheuses: Mapping[str, Any] | None,
    gateway_classes: Mapping[str, Any] | None,
    gateway_configs: Mapping[str, Any] | None = None,
    namespaces: Mapping[str, Any] | None = None,
) -> Inventory:
    """From the API's list responses (`kubectl get ... -A -o json`); None where the CRD is absent.
    `gateway_configs`: the ConfigMaps named ENVOY_GATEWAY_CONFIG, in whatever namespace."""
    workloads = []
    for kind, listing in (("Deployment", deployments), ("DaemonSet", daemonsets)):
        for item in listing.get("items") or []:
            meta = item.get("metadata") or {}
            template = (item.get("spec") or {}).get("template") or {}
            pod = template.get("spec") or {}
            workloads.append(
                Workload(
                    kind=kind,
                    namespace=meta.get("namespace", ""),
                    name=meta.get("name", ""),
                    labels=dict(meta.get("labels") or {}),
                    images=tuple(c.get("image", "") for c in pod.get("containers") or []),
                    tolerations=tuple(pod.get("tolerations") or []),
                    pod_labels=dict((template.get("metadata") or {}).get("labels") or {}),
                    args=tuple(
                        str(arg)
                        for c in pod.get("containers") or []
                        for arg in [*(c.get("command") or []), *(c.get("args") or [])]
                    ),
                )
            )
    servers = []
    for item in (prometheuses or {}).get("items") or []:
        meta, spec = item.get("metadata") or {}, item.get("spec") or {}
        servers.append(
            PrometheusServer(
                namespace=meta.get("namespace", ""),
                name=meta.get("name", ""),
                selectors={k: spec.get(k) for k in MONITOR_SELECTORS},
                namespace_selectors={
                    k: spec.get(k.replace("Selector", "NamespaceSelector")) for k in MONITOR_SELECTORS
                },
            )
        )
    classes = []
    for item in (gateway_classes or {}).get("items") or []:
        conditions = (item.get("status") or {}).get("conditions") or []
        classes.append(
            GatewayClassInfo(
                name=(item.get("metadata") or {}).get("name", ""),
                controller=(item.get("spec") or {}).get("controllerName", ""),
                accepted=any(c.get("type") == "Accepted" and c.get("status") == "True" for c in conditions),
            )
        )
    modes = {}
    for item in (gateway_configs or {}).get("items") or []:
        try:
            config = yaml.safe_load(((item.get("data") or {}).get(ENVOY_GATEWAY_CONFIG[1])) or "") or {}
            deploy = ((config.get("provider") or {}).get("kubernetes") or {}).get("deploy") or {}
        except (yaml.YAMLError, AttributeError):
            continue
        modes[(item.get("metadata") or {}).get("namespace", "")] = deploy.get("type") or "ControllerNamespace"
    names = frozenset(c["metadata"]["name"] for c in crds.get("items") or [] if c.get("metadata"))
    labels = {
        (item.get("metadata") or {}).get("name", ""): dict((item.get("metadata") or {}).get("labels") or {})
        for item in (namespaces or {}).get("items") or []
    }
    return Inventory(names, tuple(workloads), tuple(servers), tuple(classes), labels, modes)


@dataclass(frozen=True)
class AddonSpec:
    key: str
    """The stack-file key under `addons`."""
    what: str
    kind: str
    names: tuple[str, ...]
    """What identifies it: its `app.kubernetes.io/name` (or `app`) label, or a part of its name."""


ADDONS = (
    AddonSpec("nvidiaDevicePlugin", "NVIDIA device plugin", "DaemonSet", ("nvidia-device-plugin",)),
    AddonSpec("efaDevicePlugin", "EFA device plugin", "DaemonSet", ("aws-efa-k8s-device-plugin",)),
    AddonSpec("kuberay", "KubeRay operator", "Deployment", ("kuberay-operator",)),
    AddonSpec(
        "loadBalancerController",
        "AWS Load Balancer Controller",
        "Deployment",
        ("aws-load-balancer-controller",),
    ),
    AddonSpec("envoyGateway", "Envoy Gateway", "Deployment", ("envoy-gateway", "gateway-helm")),
    AddonSpec("prometheus", "Prometheus (prometheus-operator)", "Prometheus", ()),
    AddonSpec("dcgmExporter", "dcgm-exporter", "DaemonSet", ("dcgm-exporter",)),
    AddonSpec("clusterAutoscaler", "Cluster Autoscaler", "Deployment", ("cluster-autoscaler",)),
)
BY_KEY = {a.key: a for a in ADDONS}


def _matches(workload: Workload, spec: AddonSpec) -> bool:
    if workload.kind != spec.kind:
        return False
    labels = {workload.labels.get("app.kubernetes.io/name", ""), workload.labels.get("app", "")}
    return bool(labels & set(spec.names)) or any(n in workload.name for n in spec.names)


@dataclass(frozen=True)
class Found:
    where: str
    workload: Workload | None = None
    prometheus: PrometheusServer | None = None


def detect(inventory: Inventory, elsewhere: Mapping[str, str] | None = None) -> dict[str, Found]:
    """Each add-on the cluster runs. `elsewhere`: add-on key -> the namespace the stack's own runs in,
    for add-ons the stack installed: one outside it is preferred (the team's), if any."""
    places = elsewhere or {}
    found: dict[str, Found] = {}
    for spec in ADDONS:
        ours = places.get(spec.key)

        def order(namespace: str, name: str, ours: str | None = ours) -> tuple[bool, str, str]:
            return namespace == ours, namespace, name

        if spec.kind == "Prometheus":
            servers = sorted(inventory.prometheuses, key=lambda p: order(p.namespace, p.name))
            if servers:
                first = servers[0]
                found[spec.key] = Found(f"Prometheus {first.namespace}/{first.name}", prometheus=first)
            continue
        hits = sorted(
            (w for w in inventory.workloads if _matches(w, spec)), key=lambda w: order(w.namespace, w.name)
        )
        if hits:
            found[spec.key] = Found(hits[0].where, workload=hits[0])
    return found


@dataclass(frozen=True)
class GatewayTarget:
    """An existing Envoy Gateway: the GatewayClass it accepted and the namespace it runs proxies in."""

    class_name: str
    namespace: str


@dataclass(frozen=True)
class PrometheusTarget:
    """An existing Prometheus: where the stack's monitors, rules and dashboards go, and their labels."""

    namespace: str
    name: str
    monitor_labels: Mapping[str, str]
    rule_labels: Mapping[str, str]


@dataclass(frozen=True)
class AddonPlan:
    install: frozenset[str]
    """The `addons` keys the stack installs."""
    found: Mapping[str, Found] = field(default_factory=dict)
    gateway: GatewayTarget | None = None
    prometheus: PrometheusTarget | None = None
    notes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()

    def installs(self, key: str) -> bool:
        return key in self.install


EVERYTHING = AddonPlan(install=frozenset(a.key for a in ADDONS))
"""The stack's own cluster: every add-on is the stack's."""


def plan_addons(
    settings: Settings,
    inventory: Inventory | str | None,
    ours: Iterable[str] = (),
    own_namespaces: Mapping[str, str] | None = None,
) -> AddonPlan:
    """Install or use, per add-on. `inventory`: what the existing cluster runs; a string says why it
    could not be read; None on the stack's own cluster (everything installed). `ours`: the add-ons the
    stack installed there on an earlier `up` (its record), which it keeps unless told `existing`;
    `own_namespaces`: where the stack's own of each runs."""
    if not settings.cluster.existing_cluster_name:
        return EVERYTHING
    choices: dict[str, str] = settings.addons.model_dump(by_alias=True)
    problems: list[str] = []
    notes: list[str] = []
    warnings: list[str] = []
    own = set(ours)
    places = {k: v for k, v in (own_namespaces or {}).items() if k in own}
    found = detect(inventory, places) if isinstance(inventory, Inventory) else {}
    install = set()
    for spec in ADDONS:
        key = f"{PROJECT}:addons.{spec.key}"
        choice = choices[spec.key]
        here = found.get(spec.key)
        if spec.key in own and choice != "existing":
            install.add(spec.key)
            notes.append(
                f"addons.{spec.key}: {choice}: the stack's own {spec.what} (installed by an earlier up)"
            )
            continue
        if spec.key in own and here and _where_ours(here) == places.get(spec.key):
            # Handing over to the team's: only the stack's own was found, which this `up` removes.
            warnings.append(
                f"{key}: existing, but the only {spec.what} found ({here.where}) may be the stack's own, "
                "which this up removes: make sure the team's runs"
            )
        if isinstance(inventory, str):
            if choice == "auto":
                problems.append(
                    f"{key}: auto, but the cluster's workloads could not be read ({inventory}), so whether "
                    f"it runs {spec.what} is unknown; set install or existing (or give this identity read "
                    "access: cluster.viewerPrincipalArns)"
                )
                continue
            if choice == "install":
                install.add(spec.key)
            else:
                warnings.append(f"{key}: existing, unchecked: the cluster's workloads could not be read")
            continue
        if choice == "install" and here:
            problems.append(
                f"{key}: install, but the cluster runs {spec.what} already ({here.where}); two would fight "
                "over the same objects: set existing (or auto), or remove the team's"
            )
        elif choice == "existing" and not here:
            problems.append(
                f"{key}: existing, but the cluster runs no {spec.what} the stack can find; set install "
                "(or auto)"
            )
        elif here:
            notes.append(f"addons.{spec.key}: {choice}: the cluster's own {spec.what} ({here.where})")
        else:
            install.add(spec.key)
            notes.append(
                f"addons.{spec.key}: {choice}: the stack installs the {spec.what} (the cluster runs none)"
            )
    gateway = prometheus = None
    if isinstance(inventory, Inventory):
        others = other_node_autoscalers(inventory)
        if others and choices["clusterAutoscaler"] == "auto" and "clusterAutoscaler" not in own:
            install.discard("clusterAutoscaler")
            problems.append(
                f"{PROJECT}:addons.clusterAutoscaler: auto, but another node autoscaler runs in the cluster "
                f"({'; '.join(others)}): two would race over the GPU nodes. Set existing to leave the GPU "
                "group's size to gpuNodes.desiredSize and your own tools, or install to run the stack's "
                "Cluster Autoscaler, which on a team's cluster manages the stack's GPU group alone (its "
                f"Auto Scaling group carries the tag {AUTOSCALER_STACK_TAG_PREFIX}<stack>)"
            )
        problems += _existing_problems(settings, found, install, warnings)
        if "envoyGateway" in found and "envoyGateway" not in install:
            gateway = _gateway(inventory, found["envoyGateway"], problems)
        if "prometheus" in found and "prometheus" not in install:
            prometheus = _prometheus(found["prometheus"], inventory.namespace_labels, problems)
    if problems:
        raise ConfigError(problems)
    return AddonPlan(
        install=frozenset(install),
        found=found,
        gateway=gateway,
        prometheus=prometheus,
        notes=tuple(notes),
        warnings=tuple(warnings),
    )


KARPENTER_CRDS = ("nodepools.karpenter.sh", "nodeclaims.karpenter.sh", "provisioners.karpenter.sh")
"""Karpenter's CRDs (karpenter-provider-aws v1.14.1's charts; `provisioners` before v1); EKS Auto Mode's
NodePools are `nodepools.karpenter.sh` too."""
CLUSTER_AUTOSCALER_IMAGE = "/cluster-autoscaler"
"""Part of every Cluster Autoscaler image (registry.k8s.io/autoscaling/cluster-autoscaler:v1.35.0)."""


def other_node_autoscalers(inventory: Inventory) -> list[str]:
    """What else provisions nodes in the cluster: Karpenter (its CRDs or Deployment), or a Cluster
    Autoscaler the add-on detection did not find by its name (one under another name)."""
    found = [f"CRD {crd}" for crd in KARPENTER_CRDS if crd in inventory.crds]
    for w in inventory.workloads:
        if w.kind != "Deployment":
            continue
        if w.labels.get("app.kubernetes.io/name") == "karpenter" or any("/karpenter" in i for i in w.images):
            found.append(f"Karpenter ({w.where})")
        elif any(CLUSTER_AUTOSCALER_IMAGE in i for i in w.images) and not _matches(
            w, BY_KEY["clusterAutoscaler"]
        ):
            found.append(f"a Cluster Autoscaler under another name ({w.where})")
    return found


EBS_CSI_DRIVER = "ebs.csi.aws.com"
EBS_CSI_ADDON = "aws-ebs-csi-driver"


def self_managed_ebs_csi(inventory: Inventory) -> Workload | None:
    """A self-managed EBS CSI driver (its Helm chart, or manifests): the controller Deployment, by the
    chart's name label or name (aws-ebs-csi-driver chart 2.64.0: `ebs-csi-controller`,
    `app.kubernetes.io/name: aws-ebs-csi-driver`)."""
    for w in sorted(inventory.workloads, key=lambda w: (w.namespace, w.name)):
        if w.kind == "Deployment" and (
            w.labels.get("app.kubernetes.io/name") == "aws-ebs-csi-driver" or w.name == "ebs-csi-controller"
        ):
            return w
    return None


def network_policy_engines(inventory: Inventory, addon_config_enforces: bool) -> list[str]:
    """What enforces NetworkPolicies in the cluster: the VPC CNI's network policy agent (its add-on
    configuration, or `--enable-network-policy=true` on aws-node: the agent container is there even when
    off), Calico (`calico-node`) or Cilium (`cilium`)."""
    engines = ["the VPC CNI add-on's network policy agent"] if addon_config_enforces else []
    for w in inventory.workloads:
        if w.kind != "DaemonSet":
            continue
        if w.name == "aws-node" and "--enable-network-policy=true" in w.args and not addon_config_enforces:
            engines.append(f"the VPC CNI's network policy agent ({w.where})")
        elif w.name in ("calico-node", "cilium") or w.labels.get("k8s-app") in ("calico-node", "cilium"):
            engines.append(f"{w.name} ({w.where})")
    return engines


CRD_GROUPS: Mapping[str, tuple[str, ...]] = {
    "kuberay": ("ray.io",),
    "loadBalancerController": ("elbv2.k8s.aws",),
    "envoyGateway": ("gateway.networking.k8s.io", "gateway.networking.x-k8s.io", "gateway.envoyproxy.io"),
    "prometheus": ("monitoring.coreos.com",),
}
"""The API groups of the CRDs the stack applies with each add-on it installs (components/helm.py `crds`:
kept at `destroy`, since deleting a CRD deletes every object of it; the Gateway API's experimental
channel included, as Envoy Gateway's chart bundles it)."""


def crds_left_behind(addons: AddonPlan) -> str | None:
    """On a team's cluster, what `destroy` leaves there and the command that removes it once nothing
    uses it; None where the stack installs no add-on with CRDs."""
    groups = [g for key, found in CRD_GROUPS.items() if addons.installs(key) for g in found]
    if not groups:
        return None
    pattern = "|".join(g.replace(".", "\\.") for g in groups)
    return (
        f"CRDs: `destroy` leaves the CRDs of {', '.join(groups)} in the cluster (deleting a CRD deletes "
        "every object of it, the team's too). Once nothing uses them: `kubectl get crd -o name | "
        f"grep -E '\\.({pattern})$' | xargs kubectl delete`"
    )


def _where_ours(here: Found) -> str:
    return here.workload.namespace if here.workload else here.prometheus.namespace if here.prometheus else ""


def as_chosen(settings: Settings) -> AddonPlan:
    """The add-ons as the stack file says them, without a cluster to look at (`ops render` offline):
    `auto` installs. An existing Envoy Gateway or Prometheus is refused: what the stack's objects need
    of them (a GatewayClass, a namespace, selector labels) only the cluster says."""
    choices: dict[str, str] = settings.addons.model_dump(by_alias=True)
    unknowable = [k for k in ("envoyGateway", "prometheus") if choices[k] == "existing"]
    if unknowable:
        raise ConfigError(
            [
                f"{PROJECT}:addons.{k}: existing; what the stack's objects need of it is read from the "
                "cluster at preview, so it cannot be rendered offline"
                for k in unknowable
            ]
        )
    return AddonPlan(install=frozenset(k for k, c in choices.items() if c != "existing"))


def tolerates(tolerations: Iterable[Mapping[str, Any]], taint: Mapping[str, str]) -> bool:
    """Whether a pod with `tolerations` may run on a node with `taint` (`key`, `value`, `effect`), as
    the scheduler matches them: an empty key with `Exists` tolerates every taint; `Exists` any value of
    its key; `Equal` (the default) its value alone; an empty effect every effect."""
    for t in tolerations:
        key, operator, effect = t.get("key") or "", t.get("operator") or "Equal", t.get("effect") or ""
        if key not in ("", taint["key"]) or (not key and operator != "Exists"):
            continue
        if effect not in ("", taint["effect"]):
            continue
        if operator == "Exists" or (t.get("value") or "") == taint["value"]:
            return True
    return False


VERSION = re.compile(r":v?(\d+)\.(\d+)\.(\d+)")


def image_version(images: Iterable[str]) -> tuple[int, int, int] | None:
    for image in images:
        found = VERSION.search(image)
        if found:
            return int(found[1]), int(found[2]), int(found[3])
    return None


def _existing_problems(
    settings: Settings, found: Mapping[str, Found], install: set[str], warnings: list[str]
) -> list[str]:
    problems = []
    where = placement(settings)
    for key in ("nvidiaDevicePlugin", "efaDevicePlugin"):
        here = found.get(key)
        if not (here and key not in install and here.workload):
            continue
        for taint in where.gpu_taints:
            if tolerates(here.workload.tolerations, taint):
                continue
            spelled = f"{taint['key']}={taint['value']}:{taint['effect']}"
            problems.append(
                f"{PROJECT}:addons.{key}: the cluster's {BY_KEY[key].what} ({here.where}) does not "
                f"tolerate the GPU nodes' taint {spelled}, so it would never run on them: add the "
                f"toleration to it ({{key: {taint['key']}, operator: Equal, value: {taint['value']}, "
                f"effect: {taint['effect']}}}), set gpuNodes.taint: false, or let the stack install "
                f"its own (addons.{key}: install, after removing the team's)"
            )
    kuberay = found.get("kuberay")
    if kuberay and "kuberay" not in install and kuberay.workload:
        have = image_version(kuberay.workload.images)
        want = tuple(int(p) for p in settings.kuberay.chart_version.lstrip("v").split(".")[:3])
        if have is None:
            warnings.append(
                f"addons.kuberay: the cluster's operator ({kuberay.where}) names no version in its image; "
                f"the RayService needs KubeRay {settings.kuberay.chart_version} or later"
            )
        elif have[:2] < want[:2]:
            problems.append(
                f"{PROJECT}:addons.kuberay: the cluster's KubeRay operator ({kuberay.where}) is "
                f"{'.'.join(map(str, have))}; the stack's RayService uses KubeRay "
                f"{settings.kuberay.chart_version}'s fields (token authentication, the upgrade strategy): "
                "upgrade it, or let the stack install its own"
            )
    return problems


def _gateway(inventory: Inventory, here: Found, problems: list[str]) -> GatewayTarget | None:
    classes = sorted(
        (c for c in inventory.gateway_classes if c.controller == ENVOY_GATEWAY_CONTROLLER and c.accepted),
        key=lambda c: c.name,
    )
    if not classes or here.workload is None:
        problems.append(
            f"{PROJECT}:addons.envoyGateway: the cluster's Envoy Gateway ({here.where}) has accepted no "
            f"GatewayClass of controller {ENVOY_GATEWAY_CONTROLLER}; create one, or let the stack install "
            "its own"
        )
        return None
    namespace = here.workload.namespace
    if inventory.gateway_deploy_modes.get(namespace) == GATEWAY_NAMESPACE_MODE:
        problems.append(
            f"{PROJECT}:addons.envoyGateway: the cluster's Envoy Gateway ({here.where}) runs each Gateway's "
            f"proxies in the Gateway's own namespace ({GATEWAY_NAMESPACE_MODE} mode, alpha), where the "
            "stack's NLB Service does not look for them. The stack works with the default mode "
            "(ControllerNamespace) only: switch to it, or serve without the endpoint (endpoint.enabled: "
            "false; `ops verify` and port-forwards still reach the model)"
        )
        return None
    return GatewayTarget(class_name=classes[0].name, namespace=namespace)


def selects(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """Whether a Kubernetes label selector (matchLabels and matchExpressions) matches `labels`."""
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expression in selector.get("matchExpressions") or []:
        key, operator, values = (
            expression.get("key"),
            expression.get("operator"),
            expression.get("values") or [],
        )
        present = key in labels
        if operator == "In" and not (present and labels[key] in values):
            return False
        if operator == "NotIn" and present and labels[key] in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
    return True


def _prometheus(
    here: Found, namespace_labels: Mapping[str, Mapping[str, str]], problems: list[str]
) -> PrometheusTarget | None:
    """Where the stack's monitors go (the Prometheus's own namespace) and the labels they carry; a
    problem where that Prometheus would not select them there."""
    server = here.prometheus
    assert server is not None
    own = namespace_labels.get(server.namespace, {"kubernetes.io/metadata.name": server.namespace})
    for selector in MONITOR_SELECTORS:
        namespaces = server.namespace_selectors.get(selector)
        if namespaces is not None and not selects(namespaces, own):
            key = selector.replace("Selector", "NamespaceSelector")
            problems.append(
                f"{PROJECT}:addons.prometheus: {here.where}'s {key} does not match its own namespace "
                f"{server.namespace}, where the stack puts its {selector.removesuffix('Selector')}s: label "
                f"that namespace to match it, or let the stack install its own"
            )
    labels: dict[str, dict[str, str]] = {}
    for selector in MONITOR_SELECTORS:
        given = server.selectors.get(selector)
        if given is None:
            problems.append(
                f"{PROJECT}:addons.prometheus: {here.where} has no {selector}, so it selects no "
                f"{selector.removesuffix('Selector')}s at all; give it one, or let the stack install its own"
            )
            continue
        if given.get("matchExpressions"):
            problems.append(
                f"{PROJECT}:addons.prometheus: {here.where}'s {selector} uses matchExpressions, which the "
                "stack cannot satisfy for certain; select by matchLabels, or let the stack install its own"
            )
            continue
        labels[selector] = dict(given.get("matchLabels") or {})
    if problems:
        return None
    monitors = {**labels["podMonitorSelector"], **labels["serviceMonitorSelector"]}
    return PrometheusTarget(server.namespace, server.name, monitors, labels["ruleSelector"])


def kuberay_minimum() -> str:
    return versions.KUBERAY_CHART_VERSION
