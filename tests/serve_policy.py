"""A custom Serve autoscaling policy as Ray 2.58's controller gets it (pickled by value, built from the
rendered `policy_kwargs`, wrapped in Ray's delays), and the context it is called with."""

from __future__ import annotations

import sys
import time
from typing import Any

from ray.serve._private.autoscaling_state import _resolve_policy_callable
from ray.serve._private.common import DeploymentID
from ray.serve.autoscaling_policy import _apply_autoscaling_config
from ray.serve.config import AutoscalingConfig, AutoscalingContext, AutoscalingPolicy

from tests.fakes.pulumi import ROOT


def as_the_controller_gets_it(config: dict[str, Any], monkeypatch) -> tuple[AutoscalingConfig, Any]:
    """Ray's own path: the app build imports and pickles the policy by value; the Serve controller, where
    the module need not be importable, unpickles it, builds it with `policy_kwargs` and wraps it in the
    deployment's delays (ray/serve/_private/autoscaling_state.py `register`)."""
    monkeypatch.syspath_prepend(str(ROOT / "jobs"))  # as PYTHONPATH puts it on the Ray pods
    built = AutoscalingConfig(**config)
    serialized = built.policy.get_serialized_policy_def()
    assert serialized
    monkeypatch.setattr(sys, "path", [p for p in sys.path if not p.endswith("jobs")])
    monkeypatch.delitem(sys.modules, "llm_autoscaling")
    policy = AutoscalingPolicy.from_serialized_policy_def(
        {"policy_function": built.policy.policy_function, "policy_kwargs": built.policy.policy_kwargs},
        serialized,
    )
    callable_ = _resolve_policy_callable(policy)
    assert "llm_autoscaling" not in sys.modules
    return built, _apply_autoscaling_config(callable_)


def context(
    config: AutoscalingConfig,
    deployment: str,
    requests: float,
    target: int,
    state: dict[str, Any] | None = None,
) -> AutoscalingContext:
    return AutoscalingContext(
        deployment_id=DeploymentID(name=deployment, app_name="qwen"),
        deployment_name=deployment,
        app_name="qwen",
        current_num_replicas=target,
        target_num_replicas=target,
        running_replicas=[],
        total_num_requests=requests,
        total_queued_requests=0.0,
        aggregated_metrics={},
        raw_metrics={},
        capacity_adjusted_min_replicas=config.min_replicas,
        capacity_adjusted_max_replicas=config.max_replicas,
        policy_state=state or {},
        last_scale_up_time=None,
        last_scale_down_time=None,
        current_time=time.time(),
        config=config,
        total_pending_async_requests=0,
    )
