"""One Helm release from a chart described in manifests/charts.py, and the CRDs a chart's controller needs:
the Pulumi plumbing every component that installs a chart shares (not a component of its own)."""

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


def crds(name: str, files: list[str], opts: pulumi.ResourceOptions) -> k8s.yaml.v2.ConfigGroup:
    """A chart's CRDs, applied by the stack: Helm installs a chart's crds/ once and never upgrades them.
    Kept at `destroy` (`retain_on_delete`): deleting a CRD deletes every object of it; they go with the
    cluster."""
    return k8s.yaml.v2.ConfigGroup(
        name,
        files=files,
        opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(retain_on_delete=True)),
    )
