"""What runs in a team's cluster, from its Kubernetes API with the Kubernetes client: CRDs by name,
Deployments, DaemonSets, prometheus-operator's Prometheus objects, GatewayClasses, Envoy Gateway's
configuration and the namespaces' labels (planning/addons.py makes an Inventory of them). The token
comes from `aws eks get-token` as the provider's identity (world/aws.py)."""

from __future__ import annotations

import base64
import json
import tempfile
from typing import Any, cast

from planning.addons import ENVOY_GATEWAY_CONFIG, Inventory, inventory_from_api
from planning.existing_cluster import ClusterDescription

METADATA_ONLY = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"


def inventory(cluster: ClusterDescription, token: str) -> Inventory | str:
    """The cluster's inventory; why not, as a string, when the API refuses or cannot be reached."""
    from kubernetes import client

    with tempfile.NamedTemporaryFile(suffix=".pem") as authority:
        authority.write(base64.b64decode(cluster.certificate_authority))
        authority.flush()
        configuration = client.Configuration()
        configuration.host = cluster.endpoint
        configuration.ssl_ca_cert = authority.name  # pyright: ignore[reportAttributeAccessIssue]
        api = client.ApiClient(configuration)
        headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}

        def listing(
            path: str, metadata_only: bool = False, query: list[tuple[str, str]] | None = None
        ) -> dict[str, Any]:
            response = api.call_api(
                path,
                "GET",
                query_params=query or [],
                header_params={**headers, **({"Accept": METADATA_ONLY} if metadata_only else {})},
                auth_settings=[],
                _preload_content=False,
                _return_http_data_only=True,
                _request_timeout=30,
            )
            return json.loads(cast(Any, response).data)

        try:
            crds = listing("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", metadata_only=True)
            names = {c["metadata"]["name"] for c in crds.get("items") or []}
            return inventory_from_api(
                crds,
                listing("/apis/apps/v1/deployments"),
                listing("/apis/apps/v1/daemonsets"),
                listing("/apis/monitoring.coreos.com/v1/prometheuses")
                if "prometheuses.monitoring.coreos.com" in names
                else None,
                listing("/apis/gateway.networking.k8s.io/v1/gatewayclasses")
                if "gatewayclasses.gateway.networking.k8s.io" in names
                else None,
                listing(
                    "/api/v1/configmaps",
                    query=[("fieldSelector", f"metadata.name={ENVOY_GATEWAY_CONFIG[0]}")],
                ),
                listing("/api/v1/namespaces", metadata_only=True),
            )
        except Exception as error:  # the client's ApiException, urllib3's and TLS errors alike
            status = getattr(error, "status", None)
            return f"the API server answered {status}" if status else f"cannot reach the API server: {error}"
