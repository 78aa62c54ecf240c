"""One Helm release from a chart described in manifests/charts.py: the Pulumi plumbing the device
plugins and the KubeRay operator share (not a component of its own)."""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

from manifests.charts import HelmChart


def helm_release(
    name: str, chart: HelmChart, opts: pulumi.ResourceOptions, namespace: pulumi.Input[str] | None = None
) -> k8s.helm.v3.Release:
    """`namespace` overrides the chart's when the release must wait for a Namespace resource. A chart in
    an OCI registry (`oci://...`) is named by its full reference; Helm pulls it like any other."""
    oci = chart.repo.startswith("oci://")
    return k8s.helm.v3.Release(
        name,
        name=chart.chart,
        chart=f"{chart.repo}/{chart.chart}" if oci else chart.chart,
        version=chart.version,
        repository_opts=None if oci else k8s.helm.v3.RepositoryOptsArgs(repo=chart.repo),
        namespace=namespace or chart.namespace,
        values=chart.values,
        skip_crds=chart.skip_crds or None,
        opts=opts,
    )
