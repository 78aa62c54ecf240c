"""What `pulumi preview` says of an update against the last deployment, without a stack run: the outputs a
deployment leaves for the next one (rayClusterFingerprint, rayImage, servingMode) and the notices the
program makes of them (`__main__.warn_of_changes`: planning/upgrades.py's `cluster_change_notice` and
`mode_change_notice`), from the plan and the RayService the program builds for the dev stack file with some
sections overridden. tests/test_upgrades.py holds one stack run's outputs and warnings to these."""

from __future__ import annotations

from typing import Any

from manifests.rayservice import build_rayservice
from planning.upgrades import cluster_change_notice, mode_change_notice
from tests.fakes.pulumi import plan_of, stack_settings

SWITCH_AND_CLUSTER = {"serving": {"mode": "aggregated", "head": {"cpuRequest": "1.5"}}}
"""An update of the dev stack whose preview says both notices (a serving.mode switch and a Ray cluster
change, the head's request): the one update run tests/test_upgrades.py and tests/test_serving_mode.py
make (the same arguments: one run per session)."""
OUTPUTS = ("rayClusterFingerprint", "rayImage", "servingMode")
"""The outputs the next preview reads of the last deployment (a StackReference to the stack itself)."""


def deployment(**sections: dict[str, Any]) -> dict[str, str]:
    """The OUTPUTS a deployment of the dev stack file with some sections overridden leaves."""
    settings = stack_settings("dev", **sections)
    plan = plan_of("dev", None, **sections)
    return {
        "rayClusterFingerprint": build_rayservice(settings, plan).cluster_fingerprint(),
        "rayImage": plan.image,
        "servingMode": settings.serving.mode,
    }


def preview_notices(before: dict[str, Any], /, **sections: dict[str, Any]) -> list[str]:
    """What preview warns of an update to the dev stack file with some sections overridden, where the last
    deployment left the outputs `before` ({}: the first deployment; without servingMode: a deployment
    from before the mode existed): the notices the program logs, in its order, None left out."""
    settings = stack_settings("dev", **sections)
    plan = plan_of("dev", None, **sections)
    after = deployment(**sections)
    fingerprint = after["rayClusterFingerprint"]
    notices = [
        cluster_change_notice(
            plan.upgrade,
            (before.get("rayClusterFingerprint"), before.get("rayImage")),
            (fingerprint, plan.image),
        ),
        mode_change_notice(
            plan.upgrade,
            (before.get("rayClusterFingerprint"), before.get("servingMode")),
            (fingerprint, settings.serving.mode),
            plan.gpu_workers,
            settings.autoscaling.graceful_shutdown_seconds,
        ),
    ]
    return [notice for notice in notices if notice]
