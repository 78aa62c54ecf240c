"""The endpoint applications call: Envoy Gateway (Helm, on the system nodes) with its CRDs, the Gateway,
the HTTPRoute to Ray Serve, the API key SecurityPolicy and the timeout policies, the clients' keys, and
the load balancer Service the AWS Load Balancer Controller turns into an NLB.

Keys: a generated key per client (pulumi-random, kept in state as a secret) unless the stack's `apiKeys`
gives one. All live in one Kubernetes Secret that the SecurityPolicy reads; Envoy Gateway watches it, so
adding, rotating or removing a client rewrites that Secret and nothing else.

Teardown: the load balancer Service depends on the controller (`load_balancer_ready`), so `pulumi
destroy` deletes it first and waits while the controller's finalizer removes the NLB; Envoy Gateway and
the Gateway objects go next, the controller after them (see manifests/endpoint.py for why the Service
is ours rather than Envoy Gateway's).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import pulumi_random as random
from pydantic import SecretStr

from components.helm import crds as chart_crds
from components.helm import helm_release
from components.network_policy import network_policies as apply_network_policies
from manifests.endpoint.chart import envoy_gateway_chart, envoy_gateway_crds
from manifests.endpoint.gateway import EndpointManifests
from planning.nodes import Placement

API_KEY_LENGTH = 48
"""Characters of a generated key: letters and digits, about 285 bits."""
LOAD_BALANCER_TIMEOUT = "20m"
"""Creating the NLB and its first healthy targets takes a few minutes; deleting it, one or two."""


class Endpoint(pulumi.ComponentResource):
    api_keys: pulumi.Output[dict[str, str]]
    """Each client's API key, a Pulumi secret."""
    load_balancer_hostname: pulumi.Output[str]
    """The NLB's DNS name, once the controller has made it."""
    url: pulumi.Output[str]
    """The OpenAI base URL (`.../v1`): by `hostname` when configured, else by the NLB's name."""

    def __init__(
        self,
        name: str,
        *,
        manifests: EndpointManifests,
        rotations: Mapping[str, int],
        given_keys: Mapping[str, SecretStr],
        hostname: str | None,
        tls: bool,
        serving_namespace: pulumi.Input[str],
        provider: k8s.Provider,
        system_nodes: Sequence[pulumi.Resource],
        placement: Placement,
        load_balancer_ready: Sequence[pulumi.Resource],
        network_policies: Sequence[dict[str, Any]],
        opts: pulumi.ResourceOptions | None = None,
    ):
        """`rotations`: client -> its `rotation` (a generated key is replaced when it changes);
        `given_keys`: the keys the stack's `apiKeys` sets; `serving_namespace`: where the RayService's
        Service is (the Gateway, its route and policies, and the keys' Secret go there too);
        `load_balancer_ready`: the AWS Load Balancer Controller's CRDs, association and release;
        `network_policies`: the gateway's namespace's, where the stack installs Envoy Gateway
        (manifests/traffic.py)."""
        super().__init__("ray-llm-eks:endpoint:Endpoint", name, None, opts)
        child = pulumi.ResourceOptions(parent=self, provider=provider)
        on_system_nodes = pulumi.ResourceOptions.merge(
            child, pulumi.ResourceOptions(depends_on=list(system_nodes))
        )
        # Envoy Gateway itself, unless an existing cluster runs one (`gateway_namespace` None).
        gateway: list[pulumi.Resource] = []  # what the Gateway API objects wait for
        proxies: list[pulumi.Resource] = []  # what the load balancer's Service waits for
        if manifests.gateway_namespace is not None:
            namespace = k8s.core.v1.Namespace(
                f"{name}-gateway-ns", metadata=manifests.gateway_namespace["metadata"], opts=on_system_nodes
            )
            apply_network_policies(
                f"{name}-policy",
                network_policies,
                pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=[namespace])),
            )
            crds = chart_crds(f"{name}-crds", envoy_gateway_crds(), child)
            release = helm_release(
                f"{name}-envoy-gateway",
                envoy_gateway_chart(placement),
                pulumi.ResourceOptions.merge(on_system_nodes, pulumi.ResourceOptions(depends_on=[crds])),
                namespace=namespace.metadata.name,
            )
            gateway, proxies = [crds, release], [namespace, release]
        after_gateway = pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=gateway))

        keys: dict[str, pulumi.Output[str]] = {}
        for client in manifests.clients:
            given = given_keys.get(client)
            if given is not None:
                keys[client] = pulumi.Output.secret(given.get_secret_value())
            else:
                keys[client] = random.RandomPassword(
                    f"{name}-key-{client}",
                    length=API_KEY_LENGTH,
                    special=False,
                    keepers={"rotation": str(rotations.get(client, 0))},
                    opts=pulumi.ResourceOptions(parent=self),
                ).result
        self.api_keys = pulumi.Output.secret(pulumi.Output.all(**keys))
        keys_secret = k8s.core.v1.Secret(
            f"{name}-api-keys",
            metadata=k8s.meta.v1.ObjectMetaArgs(name=manifests.api_keys_secret, namespace=serving_namespace),
            type="Opaque",
            # pulumi-kubernetes makes a Secret's stringData a Pulumi secret itself; the keys are secrets.
            string_data=self.api_keys,
            opts=child,
        )

        created: dict[str, k8s.apiextensions.CustomResource] = {}
        for manifest in manifests.custom_resources():
            rendered = manifest.to_dict()
            metadata = rendered["metadata"]
            if "namespace" in metadata:
                metadata = dict(metadata, namespace=serving_namespace)
            depends = [keys_secret] if manifest is manifests.security_policy else []
            created[rendered["kind"]] = k8s.apiextensions.CustomResource(
                f"{name}-{rendered['kind'].lower()}",
                api_version=rendered["apiVersion"],
                kind=rendered["kind"],
                metadata=metadata,
                spec=rendered["spec"],
                opts=pulumi.ResourceOptions.merge(after_gateway, pulumi.ResourceOptions(depends_on=depends)),
            )

        service = manifests.load_balancer.to_dict()
        self.load_balancer = k8s.core.v1.Service(
            f"{name}-load-balancer",
            metadata=service["metadata"],
            spec=service["spec"],
            opts=pulumi.ResourceOptions.merge(
                child,
                pulumi.ResourceOptions(
                    # The controller makes the NLB and, at destroy, removes it: it must outlive this.
                    # The Gateway brings up the Envoy pods this Service selects.
                    depends_on=[*load_balancer_ready, *proxies, created["Gateway"]],
                    custom_timeouts=pulumi.CustomTimeouts(
                        create=LOAD_BALANCER_TIMEOUT,
                        update=LOAD_BALANCER_TIMEOUT,
                        delete=LOAD_BALANCER_TIMEOUT,
                    ),
                ),
            ),
        )
        self.load_balancer_hostname = self.load_balancer.status.apply(_ingress_hostname)
        scheme = "https" if tls else "http"
        self.url = (
            pulumi.Output.from_input(f"{scheme}://{hostname}/v1")
            if hostname
            else self.load_balancer_hostname.apply(lambda host: f"{scheme}://{host}/v1")
        )
        self.register_outputs(
            {"url": self.url, "loadBalancerHostname": self.load_balancer_hostname, "apiKeys": self.api_keys}
        )


def _ingress_hostname(status: object) -> str:
    """The NLB's DNS name from the Service's status (pulumi-kubernetes waits until it is there)."""
    ingress = getattr(getattr(status, "load_balancer", None), "ingress", None) or []
    return (getattr(ingress[0], "hostname", None) or "") if ingress else ""
