"""The recordings the fake Kubernetes API replays stay honest: a fake whose answers drift from what
KubeRay and Kubernetes return would let `status` and `verify` pass tests and fail on a real cluster."""

from __future__ import annotations

from tests.fakes.kube import (
    ACTIVE_CLUSTER,
    GPU_NODES,
    WORKERS,
    fixture_json,
    healthy_cluster,
    selector_matches,
)
from tests.validators import crd_errors


def test_recorded_rayservice_is_valid_under_the_kuberay_1_7_crd():
    # The whole object, status included, against the vendored CRD, strict where the API server prunes.
    assert crd_errors(fixture_json("rayservice.json")) == []


def test_recorded_pods_run_where_their_selectors_send_them():
    cluster = healthy_cluster()
    for pod in cluster.pods:
        node_labels = cluster.node(pod["spec"]["nodeName"])["metadata"]["labels"]
        assert selector_matches(
            node_labels, ",".join(f"{k}={v}" for k, v in pod["spec"]["nodeSelector"].items())
        )
        assert pod["metadata"]["labels"]["ray.io/cluster"] == ACTIVE_CLUSTER
    assert {p["spec"]["nodeName"] for p in cluster.pods if p["metadata"]["name"] in WORKERS} == set(GPU_NODES)


def test_fake_applies_label_selectors_like_the_api_server():
    labels = {"ray.io/node-type": "worker", "ray.io/cluster": "a"}
    assert selector_matches(labels, "ray.io/node-type=worker,ray.io/cluster=a")
    assert selector_matches(labels, "ray.io/node-type")
    assert not selector_matches(labels, "ray.io/node-type=worker,ray.io/cluster=b")
    assert not selector_matches(labels, "ray.io/node-type!=worker")
    assert not selector_matches(labels, "role")
