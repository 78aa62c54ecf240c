"""The Gateway API (v1, standard channel) and Envoy Gateway (v1alpha1 at v1.9.0) objects the endpoint
applies, and its load balancer Service, as typed models of their CRDs' fields (tests/test_endpoint.py
validates them against the vendored CRDs).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from manifests.k8s import K8sModel, Manifest, Toleration


class ObjectMeta(K8sModel):
    name: str
    namespace: str | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None


class GatewayApiObject(Manifest):
    """A Gateway API object (v1, standard channel); each kind declares `kind` and `spec`."""

    api_version: Literal["gateway.networking.k8s.io/v1"] = "gateway.networking.k8s.io/v1"
    metadata: ObjectMeta


class EnvoyGatewayObject(Manifest):
    """One of Envoy Gateway's own objects (v1alpha1 at v1.9.0); each kind declares `kind` and `spec`."""

    api_version: Literal["gateway.envoyproxy.io/v1alpha1"] = "gateway.envoyproxy.io/v1alpha1"
    metadata: ObjectMeta


class LocalRef(K8sModel):
    """The Gateway API's LocalObjectReference (policy targets, parametersRef, extensionRef)."""

    group: str
    kind: str
    name: str


class ParentRef(K8sModel):
    name: str
    section_name: str | None = None


class PathMatch(K8sModel):
    type: Literal["PathPrefix", "Exact"]
    value: str


class RouteMatch(K8sModel):
    path: PathMatch


class BackendRef(K8sModel):
    name: str
    port: int = Field(gt=0, lt=65536)


class RouteTimeouts(K8sModel):
    request: str


class RouteFilter(K8sModel):
    type: Literal["ExtensionRef"]
    extension_ref: LocalRef


class RouteRule(K8sModel):
    matches: list[RouteMatch]
    backend_refs: list[BackendRef] | None = None
    filters: list[RouteFilter] | None = None
    timeouts: RouteTimeouts | None = None


class InlineBody(K8sModel):
    type: Literal["Inline"] = "Inline"
    inline: str


class DirectResponse(K8sModel):
    content_type: str
    body: InlineBody
    status_code: int


class HTTPRouteFilterSpec(K8sModel):
    direct_response: DirectResponse


class HTTPRouteFilter(EnvoyGatewayObject):
    """Envoy Gateway's filter answering a route itself: what the endpoint says while the stack is parked."""

    kind: Literal["HTTPRouteFilter"] = "HTTPRouteFilter"
    spec: HTTPRouteFilterSpec


class HTTPRouteSpec(K8sModel):
    parent_refs: list[ParentRef]
    rules: list[RouteRule]


class HTTPRoute(GatewayApiObject):
    kind: Literal["HTTPRoute"] = "HTTPRoute"
    spec: HTTPRouteSpec


class Listener(K8sModel):
    name: str
    protocol: Literal["HTTP"]
    port: int


class GatewayInfrastructure(K8sModel):
    parameters_ref: LocalRef


class GatewaySpec(K8sModel):
    gateway_class_name: str
    listeners: list[Listener]
    infrastructure: GatewayInfrastructure


class Gateway(GatewayApiObject):
    kind: Literal["Gateway"] = "Gateway"
    spec: GatewaySpec


class GatewayClassSpec(K8sModel):
    controller_name: str


class GatewayClass(GatewayApiObject):
    kind: Literal["GatewayClass"] = "GatewayClass"
    spec: GatewayClassSpec


class Resources(K8sModel):
    requests: dict[str, str]
    limits: dict[str, str]


class EnvoyContainer(K8sModel):
    resources: Resources


class EnvoyPod(K8sModel):
    node_selector: dict[str, str]
    tolerations: list[Toleration] | None = None


class EnvoyDeployment(K8sModel):
    replicas: int = Field(ge=1)
    pod: EnvoyPod
    container: EnvoyContainer


class EnvoyService(K8sModel):
    type: Literal["ClusterIP"]


class KubernetesProvider(K8sModel):
    envoy_deployment: EnvoyDeployment
    envoy_service: EnvoyService


class EnvoyProxyProvider(K8sModel):
    type: Literal["Kubernetes"] = "Kubernetes"
    kubernetes: KubernetesProvider


class EnvoyProxySpec(K8sModel):
    provider: EnvoyProxyProvider


class EnvoyProxy(EnvoyGatewayObject):
    kind: Literal["EnvoyProxy"] = "EnvoyProxy"
    spec: EnvoyProxySpec


class SecretRef(K8sModel):
    name: str


class ExtractFrom(K8sModel):
    headers: list[str]


class ApiKeyAuth(K8sModel):
    credential_refs: list[SecretRef]
    extract_from: list[ExtractFrom]
    forward_client_id_header: str = Field(serialization_alias="forwardClientIDHeader")
    sanitize: bool


class PolicySpec(K8sModel):
    """What every Envoy Gateway policy names: the Gateway API objects it applies to."""

    target_refs: list[LocalRef]


class SecurityPolicySpec(PolicySpec):
    api_key_auth: ApiKeyAuth


class SecurityPolicy(EnvoyGatewayObject):
    kind: Literal["SecurityPolicy"] = "SecurityPolicy"
    spec: SecurityPolicySpec


class ClientHttpTimeouts(K8sModel):
    idle_timeout: str
    stream_idle_timeout: str


class ClientTimeouts(K8sModel):
    http: ClientHttpTimeouts


class ClientTrafficPolicySpec(PolicySpec):
    timeout: ClientTimeouts


class ClientTrafficPolicy(EnvoyGatewayObject):
    kind: Literal["ClientTrafficPolicy"] = "ClientTrafficPolicy"
    spec: ClientTrafficPolicySpec


class BackendHttpTimeouts(K8sModel):
    connection_idle_timeout: str


class BackendTimeouts(K8sModel):
    http: BackendHttpTimeouts


class HeaderMatch(K8sModel):
    type: Literal["Distinct"]
    name: str


class RateLimitSelectCondition(K8sModel):
    headers: list[HeaderMatch]


class RateLimitValue(K8sModel):
    requests: int = Field(ge=1, le=4294967295)
    unit: Literal["Second", "Minute", "Hour"]


class RateLimitRule(K8sModel):
    client_selectors: list[RateLimitSelectCondition]
    limit: RateLimitValue


class LocalRateLimit(K8sModel):
    rules: list[RateLimitRule] = Field(min_length=1, max_length=16)


class RateLimitSpec(K8sModel):
    local: LocalRateLimit


class BackendTrafficPolicySpec(PolicySpec):
    timeout: BackendTimeouts
    rate_limit: RateLimitSpec


class BackendTrafficPolicy(EnvoyGatewayObject):
    kind: Literal["BackendTrafficPolicy"] = "BackendTrafficPolicy"
    spec: BackendTrafficPolicySpec


class ServicePort(K8sModel):
    name: str
    protocol: Literal["TCP"] = "TCP"
    port: int
    target_port: int


class LoadBalancerServiceSpec(K8sModel):
    type: Literal["LoadBalancer"] = "LoadBalancer"
    load_balancer_class: str
    selector: dict[str, str]
    ports: list[ServicePort]
    load_balancer_source_ranges: list[str] | None = None


class LoadBalancerService(Manifest):
    api_version: Literal["v1"] = "v1"
    kind: Literal["Service"] = "Service"
    metadata: ObjectMeta
    spec: LoadBalancerServiceSpec
