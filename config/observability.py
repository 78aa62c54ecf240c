"""The `observability` section: Prometheus, Grafana and Alertmanager in the cluster (kube-prometheus-
stack), GPU metrics (dcgm-exporter), the monitors that scrape Ray, Serve, vLLM and NIXL, the dashboards
and the alerts. Off, the stack installs none of it (for a Prometheus of your own: Ray's pods still
serve their metrics on the ports the monitors name; docs/operations.md says what to scrape).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from config.base import StrictModel, seconds_at_most


class ObservabilityConfig(StrictModel):
    """Metrics, dashboards and alerts, in the cluster, on the system nodes."""

    enabled: bool = Field(
        True,
        description="Install the metrics stack (Prometheus with persistent storage, Grafana, Alertmanager, "
        "dcgm-exporter), the Ray/vLLM monitors, dashboards and alerts.",
    )
    retention_days: int = Field(15, ge=1, le=365, description="How long Prometheus keeps metrics.")
    storage_gib: int = Field(
        50,
        ge=10,
        le=16384,
        description="Prometheus's persistent volume (gp3, encrypted). Prometheus also stops keeping data "
        "beyond 90 % of it, so a full disk never stops it.",
    )
    keep_volume_on_destroy: bool = Field(
        True,
        description="What `pulumi destroy` does with Prometheus's volume: true keeps it (the StorageClass "
        "says `Retain`: the metrics history survives the stack, and its KMS key is kept too; delete both "
        'by hand, docs/operations.md "Teardown"), false deletes it (`Delete`: the EBS CSI driver removes '
        "it while the stack removes the monitoring namespace). A change replaces the StorageClass; a volume "
        "that exists keeps the policy it was created with.",
    )
    ttft_objective_seconds: Annotated[float, seconds_at_most(120)] = Field(
        2.0,
        gt=0,
        description="Time to first token the p95 should stay below; an alert fires when it has not for "
        "10 minutes.",
    )
