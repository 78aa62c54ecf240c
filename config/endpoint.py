"""The `endpoint` section: how applications reach the model. An AWS Network Load Balancer (made by the
AWS Load Balancer Controller) in front of Envoy Gateway, which checks each request's API key and routes
it to Ray Serve's OpenAI API. Ray Serve LLM checks no key itself, so the gateway is the only door.

API keys are named clients. The stack generates each client's key (a Pulumi secret), unless the
stack's `apiKeys` secret gives one; adding, rotating or removing a client is a config change and an
`up`, which rewrites one Kubernetes Secret and restarts nothing.
"""

from __future__ import annotations

from ipaddress import IPv4Network
from typing import Annotated, Literal

from pydantic import Field, model_validator

from config.base import AcmCertificateArn, DnsLabel, StrictModel, never_public, raise_all, seconds_at_most

DEFAULT_CLIENT = "default"


class ClientConfig(StrictModel):
    """One application allowed to call the endpoint, with a key of its own."""

    rotation: int = Field(
        0,
        ge=0,
        description="Bump it to replace this client's generated key at the next `up` (the old key stops "
        "working once Envoy Gateway reloads the Secret, within seconds). Ignored for a key given in "
        "`apiKeys`.",
    )


class RateLimitConfig(StrictModel):
    """How many requests each API key may make, whatever else calls the endpoint: one heavy client
    cannot crowd out the others. Over the limit the gateway answers 429 (OpenAI clients retry it)."""

    requests: int = Field(
        600,
        ge=1,
        le=1_000_000,
        description="Requests per `unit` for each API key, all the gateway's Envoy replicas together (each "
        "replica allows its share, `requests / gatewayReplicas`, so a client never gets more, whichever "
        "replicas its connections reach).",
    )
    unit: Literal["Second", "Minute", "Hour"] = Field(
        "Minute", description="The window `requests` refills over (Envoy's token bucket)."
    )


class EndpointConfig(StrictModel):
    """The OpenAI-compatible endpoint behind a load balancer, with API keys. Off: the model is reachable
    only through `kubectl port-forward`, as before."""

    enabled: bool = Field(
        True, description="Put the model behind Envoy Gateway and an NLB, reachable with API keys."
    )
    scheme: Literal["internal", "internet-facing"] = Field(
        "internal",
        description="`internal`: an NLB in the private subnets, reachable from the VPC and what is peered "
        "or connected to it. `internet-facing`: an NLB in the public subnets; needs `certificateArn` "
        "(API keys never cross the internet in clear text) and `sourceRanges`.",
    )
    source_ranges: list[IPv4Network] = Field(
        [],
        description="Who may connect (the NLB security group's inbound rules, Kubernetes "
        "`loadBalancerSourceRanges`). Required when internet-facing (write 0.0.0.0/0 to mean everyone). "
        "Unset for internal: the VPC's own range (`network.vpcCidr`); add the ranges of peered networks, "
        "VPNs or Transit Gateway attachments that should reach it.",
    )
    certificate_arn: AcmCertificateArn | None = Field(
        None,
        description="ACM certificate (in the stack's region) the NLB terminates TLS with, on port 443. "
        "Without it the endpoint speaks plain HTTP on port 80, which only `internal` allows.",
    )
    hostname: str | None = Field(
        None,
        max_length=253,
        pattern=r"^([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\.)+[a-z]{2,63}$",
        description="The DNS name clients use, one the certificate covers; point it (CNAME or Route 53 "
        "alias) at the NLB's name, output `loadBalancerHostname`. Required with `certificateArn`: the "
        "NLB's own name never matches a certificate.",
    )
    clients: dict[DnsLabel, ClientConfig] = Field(
        {DEFAULT_CLIENT: ClientConfig()},  # type: ignore[call-arg]
        min_length=1,
        description="The applications that may call the endpoint, each with its own key (output `apiKeys`, "
        "a secret). Removing a client revokes its key.",
    )
    request_timeout_seconds: Annotated[int, seconds_at_most(86400)] = Field(
        900,
        ge=0,
        description="Longest a request may take, streamed completions included, before the gateway cuts "
        "it (Envoy's default is 15 s, which cuts long generations); 0: no limit.",
    )
    idle_timeout_seconds: Annotated[int, seconds_at_most(86400)] = Field(
        300,
        ge=10,
        description="Longest a connection or a stream may go without a byte before the gateway closes it "
        "(a streamed completion sends a chunk per token, so only a stalled engine hits it).",
    )
    gateway_replicas: int = Field(
        1,
        ge=1,
        le=10,
        description="Envoy proxy pods on the system nodes; 2 or more keep the endpoint up while one is "
        "replaced.",
    )
    rate_limit: RateLimitConfig = Field(
        default_factory=RateLimitConfig,  # type: ignore[arg-type]
        description="The request rate each API key may not exceed (default 600 per minute).",
    )

    @property
    def tls(self) -> bool:
        return self.certificate_arn is not None

    @property
    def port(self) -> int:
        """The port clients connect to: 443 with TLS, else 80."""
        return 443 if self.tls else 80

    @model_validator(mode="after")
    def _reachable_safely(self) -> EndpointConfig:
        """Every problem at once (each its own line), not one per run."""
        if not self.enabled:
            return self
        problems = []
        if self.scheme == "internet-facing" and not self.tls:
            problems.append(
                "certificateArn is required when scheme is internet-facing: without TLS the API keys "
                "would cross the internet in clear text (or use scheme internal)"
            )
        private = never_public(self.source_ranges)
        if self.scheme == "internet-facing" and private:
            problems.append(
                f"sourceRanges {private} are private ranges, which no connection to an internet-facing NLB "
                "ever comes from (traffic from a VPC reaches it from its NAT's public address); list the "
                "public ranges, or use scheme internal for clients inside the VPC"
            )
        if self.scheme == "internet-facing" and not self.source_ranges:
            problems.append(
                "sourceRanges is required when scheme is internet-facing: list who may connect (e.g. "
                "your offices' egress ranges), or 0.0.0.0/0 for everyone"
            )
        if self.rate_limit.requests < self.gateway_replicas:
            problems.append(
                f"rateLimit.requests ({self.rate_limit.requests}) is below gatewayReplicas "
                f"({self.gateway_replicas}): each Envoy replica allows requests / gatewayReplicas per key, "
                "which would be 0; raise rateLimit.requests (or use a shorter unit)"
            )
        if self.tls and not self.hostname:
            problems.append(
                "hostname is required with certificateArn: clients must connect by a name the "
                "certificate covers, which the NLB's own name never is"
            )
        raise_all(type(self).__name__, problems)
        return self
