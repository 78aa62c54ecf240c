"""What the stack exposes, said in the preview: the API endpoint open to everyone, ranges nobody connects
from, API keys that cross a network in clear text."""

from __future__ import annotations

from ipaddress import IPv4Network

from config import PROJECT, Settings

DOCUMENTATION_RANGES = tuple(IPv4Network(r) for r in ("192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24"))
"""RFC 5737's example ranges: in a stack file, a placeholder someone forgot to replace."""
EVERYONE = IPv4Network("0.0.0.0/0")


def exposure_warnings(settings: Settings) -> list[str]:
    cluster, endpoint = settings.cluster, settings.endpoint
    warnings = []
    cidrs = cluster.public_access_cidrs or []
    if EVERYONE in cidrs:
        warnings.append(
            f"{PROJECT}:cluster.publicAccessCidrs includes 0.0.0.0/0: the Kubernetes API endpoint answers "
            "the whole internet (IAM still authenticates every request; CIS EKS 5.4, Security Hub EKS.1). "
            "Narrow it to your egress ranges, or turn endpointPublicAccess off"
        )
    for key, ranges in (
        ("cluster.publicAccessCidrs", cidrs),
        ("endpoint.sourceRanges", endpoint.source_ranges if endpoint.enabled else []),
    ):
        examples = [str(r) for r in ranges if any(r.subnet_of(d) for d in DOCUMENTATION_RANGES)]
        if examples:
            warnings.append(
                f"{PROJECT}:{key} {examples} are documentation ranges (RFC 5737) nobody connects from: "
                "replace them with your own (whoever runs `pulumi up` must reach the API endpoint)"
            )
    if endpoint.enabled and not endpoint.tls:
        warnings.append(
            f"{PROJECT}:endpoint has no certificateArn: API keys cross the VPC (and anything routed into it) "
            "in clear text on port 80; give it a certificate and hostname for TLS on 443"
        )
    return warnings
