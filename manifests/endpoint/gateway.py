"""The gateway's objects for the serving app, built from the settings in one place (`build_endpoint`):
GatewayClass, EnvoyProxy, Gateway, HTTPRoute, the Security-, ClientTraffic- and BackendTrafficPolicy and
the load balancer Service.

The request path: client -> NLB (TLS on 443 with an ACM certificate, or plain HTTP on 80 inside the VPC)
-> Envoy (API key check, timeouts) -> `<name>-serve-svc:8000` (Ray Serve's OpenAI API). What was read
upstream and decided here (Envoy Gateway v1.9.0, AWS Load Balancer Controller v3.5.0):

- API keys: a `SecurityPolicy` with `apiKeyAuth` on the Gateway (so on every route it serves), keys from
  one Secret whose data keys are the client names. Envoy's api_key_auth filter strips a leading
  `Bearer ` from a header, so OpenAI clients' `Authorization: Bearer <key>` works with the bare key
  stored; `x-api-key` is accepted too (the Kubernetes API server's service proxy, which `ops verify`
  can use, drops `Authorization`). The key header is removed before the request reaches Ray
  (`sanitize`). No key, or a wrong one: 401.
- Timeouts: Envoy's default route timeout is 15 s, which cuts a long streamed completion. The route's
  `timeouts.request` is the configured limit (`0s`: none), the client side's stream idle timeout the
  configured idle limit, and Envoy drops upstream connections after 60 s idle, before Ray Serve's own
  90 s keep-alive closes them under it (which would fail the next request with a reset).
- The load balancer Service is ours, not Envoy Gateway's: Envoy Gateway's own Service stays ClusterIP.
  Envoy Gateway deletes its Services asynchronously when a Gateway goes, so `pulumi destroy` would not
  wait for the NLB to go and could remove the controller first, orphaning the NLB, its ENIs and
  security groups (which block deleting the VPC). Ours is deleted by Pulumi, which waits until the
  controller's finalizer has removed the NLB, and only then removes the controller.
- Only `/v1` is routed: Ray Serve's `/-/routes` and `/-/healthz` stay inside the cluster.
- A rate limit per API key: the key check forwards the client's name in `CLIENT_HEADER`, and the route's
  BackendTrafficPolicy gives each distinct value its own local token bucket (`per_key_rate_limit`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from config import Settings
from config.endpoint import EndpointConfig
from manifests.endpoint.chart import GATEWAY_NAMESPACE, gateway_namespace
from manifests.endpoint.models import (
    ApiKeyAuth,
    BackendHttpTimeouts,
    BackendRef,
    BackendTimeouts,
    BackendTrafficPolicy,
    BackendTrafficPolicySpec,
    ClientHttpTimeouts,
    ClientTimeouts,
    ClientTrafficPolicy,
    ClientTrafficPolicySpec,
    DirectResponse,
    EnvoyContainer,
    EnvoyDeployment,
    EnvoyPod,
    EnvoyProxy,
    EnvoyProxyProvider,
    EnvoyProxySpec,
    EnvoyService,
    ExtractFrom,
    Gateway,
    GatewayClass,
    GatewayClassSpec,
    GatewayInfrastructure,
    GatewaySpec,
    HeaderMatch,
    HTTPRoute,
    HTTPRouteFilter,
    HTTPRouteFilterSpec,
    HTTPRouteSpec,
    InlineBody,
    KubernetesProvider,
    Listener,
    LoadBalancerService,
    LoadBalancerServiceSpec,
    LocalRateLimit,
    LocalRef,
    ObjectMeta,
    ParentRef,
    PathMatch,
    RateLimitRule,
    RateLimitSelectCondition,
    RateLimitSpec,
    RateLimitValue,
    Resources,
    RouteFilter,
    RouteMatch,
    RouteRule,
    RouteTimeouts,
    SecretRef,
    SecurityPolicy,
    SecurityPolicySpec,
    ServicePort,
)
from manifests.k8s import Manifest, tolerations_of
from manifests.load_balancer import LOAD_BALANCER_CLASS
from manifests.rayservice import serve_service_name
from planning.context import ClusterContext
from planning.names import cluster_scoped_name
from planning.nodes import placement
from planning.system_pods import ENVOY_PROXY

GATEWAY_CLASS = "envoy"
GATEWAY_CONTROLLER = "gateway.envoyproxy.io/gatewayclass-controller"
GATEWAY_API = "gateway.networking.k8s.io"
ENVOY_GATEWAY_API = "gateway.envoyproxy.io"
LISTENER = "http"
LISTENER_PORT = 80
ENVOY_CONTAINER_PORT = 10080
"""Envoy Gateway maps listener ports below 1024 to port + 10000 inside the proxy (translator.go)."""
ENVOY_READINESS_PORT = 19003
"""Envoy's readiness listener (`/ready`), which the NLB health-checks: a draining proxy leaves first."""
SERVE_PORT = 8000
API_PATH = "/v1"
KEY_HEADERS = ["authorization", "x-api-key"]
CLIENT_HEADER = "x-ray-llm-client"
"""Envoy's api_key_auth filter sets it to the authenticated client's name (replacing any the client
sent); the per-key rate limit counts each distinct value apart."""
UPSTREAM_IDLE_TIMEOUT = "60s"
"""Below Ray Serve's keep-alive (DEFAULT_UVICORN_KEEP_ALIVE_TIMEOUT_S = 90 in Ray 2.58)."""


@dataclass(frozen=True)
class EndpointManifests:
    """Everything the endpoint applies, in the order it must exist. The API keys' Secret is not here:
    only the Pulumi program holds the keys (`api_keys_secret` names it)."""

    gateway_namespace: dict[str, Any] | None
    """The gateway's namespace (Envoy Gateway and its proxies; its policies: manifests/traffic.py). None
    with an existing cluster's Envoy Gateway, whose namespace is its team's."""
    gateway_class: GatewayClass | None
    """None: the existing Envoy Gateway's accepted GatewayClass (`gateway.spec.gatewayClassName`)."""
    envoy_proxy: EnvoyProxy
    gateway: Gateway
    route: HTTPRoute
    security_policy: SecurityPolicy
    client_traffic_policy: ClientTrafficPolicy
    backend_traffic_policy: BackendTrafficPolicy
    load_balancer: LoadBalancerService
    parked_response: HTTPRouteFilter | None
    """While parked: the route answers 503 with this instead of reaching Ray."""
    api_keys_secret: str
    """Secret in the serving namespace: one data key per client, its API key as the value."""
    clients: tuple[str, ...]

    def custom_resources(self) -> list[Manifest]:
        """The Gateway API and Envoy Gateway objects, in dependency order."""
        return [
            *([self.gateway_class] if self.gateway_class else []),
            self.envoy_proxy,
            self.gateway,
            *([self.parked_response] if self.parked_response else []),
            self.route,
            self.security_policy,
            self.client_traffic_policy,
            self.backend_traffic_policy,
        ]


def gateway_namespace_of(context: ClusterContext) -> str:
    """Where Envoy Gateway runs the proxies (its controller's namespace, Envoy Gateway's default deploy
    type: internal/infrastructure/kubernetes/proxy_infra.go at v1.9.0), so where the NLB's Service goes."""
    existing = context.addons.gateway
    return existing.namespace if existing else GATEWAY_NAMESPACE


def load_balancer_service_name(rayservice_name: str) -> str:
    """The NLB's Service, in the gateway's namespace (`gateway_namespace_of`)."""
    return f"{rayservice_name}-gateway"


def api_keys_name(rayservice_name: str) -> str:
    """The SecurityPolicy checking the keys, and the keys' Secret, in the serving namespace."""
    return f"{rayservice_name}-api-keys"


def _seconds(value: int) -> str:
    return f"{value}s"


def proxy_selector(gateway_name: str, gateway_namespace_: str) -> dict[str, str]:
    """The labels Envoy Gateway puts on a Gateway's proxy pods (internal/infrastructure/kubernetes/proxy/
    resource.go and gatewayapi/helpers.go at v1.9.0)."""
    return {
        "app.kubernetes.io/name": "envoy",
        "app.kubernetes.io/component": "proxy",
        "app.kubernetes.io/managed-by": "envoy-gateway",
        "gateway.envoyproxy.io/owning-gateway-name": gateway_name,
        "gateway.envoyproxy.io/owning-gateway-namespace": gateway_namespace_,
    }


def load_balancer_annotations(settings: Settings, context: ClusterContext) -> dict[str, str]:
    """How the load balancer controller builds the NLB (docs/guide/service/annotations.md, v3.5.0). On an
    existing cluster its subnets are named (`aws-load-balancer-subnets`): the team's VPC need not carry
    the role tags the controller otherwise looks for."""
    endpoint = settings.endpoint
    prefix = "service.beta.kubernetes.io/aws-load-balancer"
    annotations = {
        f"{prefix}-scheme": endpoint.scheme,
        # With loadBalancerClass set the controller defaults to instance targets; the pods' own IPs
        # skip the node hop and need no NodePort.
        f"{prefix}-nlb-target-type": "ip",
        f"{prefix}-healthcheck-protocol": "http",
        f"{prefix}-healthcheck-port": str(ENVOY_READINESS_PORT),
        f"{prefix}-healthcheck-path": "/ready",
        f"{prefix}-attributes": "load_balancing.cross_zone.enabled=true",
    }
    if context.load_balancer_subnets:
        annotations[f"{prefix}-subnets"] = ",".join(context.load_balancer_subnets)
    if endpoint.certificate_arn:
        annotations |= {
            f"{prefix}-ssl-cert": endpoint.certificate_arn,
            f"{prefix}-ssl-ports": str(endpoint.port),
            f"{prefix}-ssl-negotiation-policy": "ELBSecurityPolicy-TLS13-1-2-2021-06",
        }
    return annotations


PARKED_MESSAGE = {
    "error": {
        "message": "This model is parked: its GPUs are stopped to save cost. Ask its operators to unpark it "
        "(autoscaling.parked: false, then pulumi up); serving resumes in about 15 minutes.",
        "type": "service_unavailable",
        "code": 503,
    }
}
"""The body of every request while parked, in the OpenAI API's error shape."""


def per_key_rate_limit(endpoint: EndpointConfig) -> RateLimitSpec:
    """Each API key's own token bucket on every Envoy replica (a local rate limit whose rule selects
    each distinct value of the client header the API key check sets). Each replica allows its share of
    `endpoint.rateLimit.requests`, so a client gets no more in total however its connections spread."""
    share = endpoint.rate_limit.requests // endpoint.gateway_replicas
    return RateLimitSpec(
        local=LocalRateLimit(
            rules=[
                RateLimitRule(
                    client_selectors=[
                        RateLimitSelectCondition(headers=[HeaderMatch(type="Distinct", name=CLIENT_HEADER)])
                    ],
                    limit=RateLimitValue(requests=share, unit=endpoint.rate_limit.unit),
                )
            ]
        )
    )


def _route_rule(settings: Settings, parked_filter: str | None) -> RouteRule:
    matches = [RouteMatch(path=PathMatch(type="PathPrefix", value=API_PATH))]
    if parked_filter:
        return RouteRule(
            matches=matches,
            filters=[
                RouteFilter(
                    type="ExtensionRef",
                    extension_ref=LocalRef(
                        group=ENVOY_GATEWAY_API, kind="HTTPRouteFilter", name=parked_filter
                    ),
                )
            ],
        )
    return RouteRule(
        matches=matches,
        backend_refs=[BackendRef(name=serve_service_name(settings.serving.name), port=SERVE_PORT)],
        timeouts=RouteTimeouts(request=_seconds(settings.endpoint.request_timeout_seconds)),
    )


def _envoy_proxy(settings: Settings, meta: ObjectMeta) -> EnvoyProxy:
    """The Gateway's proxies: their replicas, on the system nodes, behind Envoy Gateway's own ClusterIP
    Service (the NLB's Service is the stack's: `_load_balancer`)."""
    where = placement(settings)
    envoy_requests = Resources(
        requests={"cpu": ENVOY_PROXY.cpu, "memory": ENVOY_PROXY.memory}, limits={"memory": "1Gi"}
    )
    return EnvoyProxy(
        metadata=meta,
        spec=EnvoyProxySpec(
            provider=EnvoyProxyProvider(
                kubernetes=KubernetesProvider(
                    envoy_deployment=EnvoyDeployment(
                        replicas=settings.endpoint.gateway_replicas,
                        pod=EnvoyPod(
                            node_selector=where.system_selector,
                            tolerations=tolerations_of(where.system_tolerations),
                        ),
                        container=EnvoyContainer(resources=envoy_requests),
                    ),
                    envoy_service=EnvoyService(type="ClusterIP"),
                )
            )
        ),
    )


def _security_policy(meta: ObjectMeta, gateway_ref: LocalRef) -> SecurityPolicy:
    """The API key check: keys from the Secret of the policy's own name."""
    return SecurityPolicy(
        metadata=meta,
        spec=SecurityPolicySpec(
            # The Gateway, not the route: every route on it needs a key, one added later too. A
            # route-level SecurityPolicy would replace this one for its route (Envoy Gateway v1.9:
            # the most specific target wins), and the stack makes none.
            target_refs=[gateway_ref],
            api_key_auth=ApiKeyAuth(
                credential_refs=[SecretRef(name=meta.name)],
                extract_from=[ExtractFrom(headers=list(KEY_HEADERS))],
                forward_client_id_header=CLIENT_HEADER,
                sanitize=True,
            ),
        ),
    )


def _load_balancer(settings: Settings, context: ClusterContext) -> LoadBalancerService:
    """The NLB's Service, where Envoy Gateway runs the proxies, selecting the Gateway's proxy pods."""
    endpoint, name = settings.endpoint, settings.serving.name
    return LoadBalancerService(
        metadata=ObjectMeta(
            name=load_balancer_service_name(name),
            namespace=gateway_namespace_of(context),
            annotations=load_balancer_annotations(settings, context),
        ),
        spec=LoadBalancerServiceSpec(
            # Explicit: the API server refuses to change it once set, and nothing else sets it.
            load_balancer_class=LOAD_BALANCER_CLASS,
            selector=proxy_selector(name, settings.serving.namespace),
            ports=[
                ServicePort(
                    name="https" if endpoint.tls else "http",
                    port=endpoint.port,
                    target_port=ENVOY_CONTAINER_PORT,
                )
            ],
            # Never empty: the controller would open the NLB's security group to 0.0.0.0/0.
            load_balancer_source_ranges=[str(r) for r in endpoint.source_ranges] or list(context.vpc_cidrs),
        ),
    )


def _parked_response(meta: ObjectMeta) -> HTTPRouteFilter:
    """While parked: 503 with `PARKED_MESSAGE`, in place of Ray."""
    return HTTPRouteFilter(
        metadata=meta,
        spec=HTTPRouteFilterSpec(
            direct_response=DirectResponse(
                content_type="application/json",
                body=InlineBody(inline=json.dumps(PARKED_MESSAGE)),
                status_code=503,
            )
        ),
    )


def build_endpoint(settings: Settings, context: ClusterContext) -> EndpointManifests | None:
    """None when `endpoint.enabled` is false. With an existing cluster's Envoy Gateway, no namespace,
    policies or GatewayClass of the stack's: its Gateway uses that controller's accepted class (Envoy
    Gateway reconciles every GatewayClass of its controller name since v1.0) with the stack's own
    EnvoyProxy (`infrastructure.parametersRef`, which replaces a class-level one), and the NLB's Service
    goes where that controller runs the proxies."""
    endpoint = settings.endpoint
    if not endpoint.enabled:
        return None
    existing_gateway = context.addons.gateway
    name, serving_namespace = settings.serving.name, settings.serving.namespace

    def meta(object_name: str, object_namespace: str | None = serving_namespace) -> ObjectMeta:
        return ObjectMeta(name=object_name, namespace=object_namespace)

    route_ref = LocalRef(group=GATEWAY_API, kind="HTTPRoute", name=name)
    gateway_ref = LocalRef(group=GATEWAY_API, kind="Gateway", name=name)
    proxy_name = f"{name}-proxy"
    parked_name = f"{name}-parked" if settings.autoscaling.parked else None
    return EndpointManifests(
        gateway_namespace=None if existing_gateway else gateway_namespace(),
        gateway_class=None
        if existing_gateway
        else GatewayClass(
            metadata=meta(cluster_scoped_name(settings, GATEWAY_CLASS), None),
            spec=GatewayClassSpec(controller_name=GATEWAY_CONTROLLER),
        ),
        envoy_proxy=_envoy_proxy(settings, meta(proxy_name)),
        gateway=Gateway(
            metadata=meta(name),
            spec=GatewaySpec(
                gateway_class_name=existing_gateway.class_name
                if existing_gateway
                else cluster_scoped_name(settings, GATEWAY_CLASS),
                listeners=[Listener(name=LISTENER, protocol="HTTP", port=LISTENER_PORT)],
                infrastructure=GatewayInfrastructure(
                    parameters_ref=LocalRef(group=ENVOY_GATEWAY_API, kind="EnvoyProxy", name=proxy_name)
                ),
            ),
        ),
        route=HTTPRoute(
            metadata=meta(name),
            spec=HTTPRouteSpec(
                parent_refs=[ParentRef(name=name, section_name=LISTENER)],
                rules=[_route_rule(settings, parked_name)],
            ),
        ),
        security_policy=_security_policy(meta(api_keys_name(name)), gateway_ref),
        client_traffic_policy=ClientTrafficPolicy(
            metadata=meta(f"{name}-client"),
            spec=ClientTrafficPolicySpec(
                target_refs=[gateway_ref],
                timeout=ClientTimeouts(
                    http=ClientHttpTimeouts(
                        idle_timeout=_seconds(endpoint.idle_timeout_seconds),
                        stream_idle_timeout=_seconds(endpoint.idle_timeout_seconds),
                    )
                ),
            ),
        ),
        backend_traffic_policy=BackendTrafficPolicy(
            metadata=meta(f"{name}-upstream"),
            spec=BackendTrafficPolicySpec(
                target_refs=[route_ref],
                timeout=BackendTimeouts(
                    http=BackendHttpTimeouts(connection_idle_timeout=UPSTREAM_IDLE_TIMEOUT)
                ),
                rate_limit=per_key_rate_limit(endpoint),
            ),
        ),
        load_balancer=_load_balancer(settings, context),
        parked_response=_parked_response(meta(parked_name)) if parked_name else None,
        api_keys_secret=api_keys_name(name),
        clients=tuple(sorted(endpoint.clients)),
    )
