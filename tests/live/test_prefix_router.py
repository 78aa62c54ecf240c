"""Live: routing survives the prefix-tree actor's loss (issue 46).

The side's `request_router_config` as a stack renders it (prod, with the prefix cache opted into so the
prefix router is rendered at all: docs/design.md, "Routing"), and the Ray pods' PYTHONPATH as the
plugins ConfigMap renders it, on a local Ray 2.58 cluster (the pinned ray[serve], CPU, 127.0.0.1 only,
its own temporary directory; tests/live/prefix_router_driver.py in its own process, so the cluster goes
with it). The stand-in (tests/live/prefix_standin.py) stands in for vLLM: what is checked is the router.

Seen against the stack before its own router (`ray.serve.llm.request_router.PrefixCacheAffinityRouter`):
after `ray.kill` of the tree, 4 of 4 requests unanswered within the bound, and no tree again; and,
with the tree intact, 4 of 4 requests sent at once unanswered (Ray's class fulfils a routed replica
only for the exact request: jobs/prefix_routing.py `_fulfill_next_pending_request`).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from manifests.rayservice import build_serving
from manifests.serve_app import PREFIX_ROUTER
from planning import plan_stack
from tests.fakes.pulumi import ROOT, stack_file_config, stack_settings

HERE = Path(__file__).resolve().parent
BOUND_S = 8.0
"""How long a request may take after the kill: the stand-in answers in well under a second."""
DRIVER_TIMEOUT_S = 150
"""A loaded two-core machine starts Ray and Serve in 10 to 60 s; four bounded requests, then recovery."""


def rendered(stack: str = "prod") -> tuple[dict[str, Any], dict[str, str]]:
    """Decode's deployment_config and the plugins ConfigMap's files, as `stack` renders them with the
    prefix cache opted into."""
    model = stack_file_config(stack).get("ray-llm-eks:model", {})
    extra = {**model.get("extraEngineKwargs", {}), "enable_prefix_caching": True}
    settings = stack_settings(stack, model={"extraEngineKwargs": extra})
    serving = build_serving(settings, plan_stack(settings, stack=stack))
    (app,) = yaml.safe_load(serving.rayservice.spec.serve_config_v2)["applications"]
    return app["args"]["decode_config"]["deployment_config"], serving.plugins["data"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_driver(deployment_config: dict[str, Any], plugins: dict[str, str]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="rl46-") as temp:
        path = Path(temp) / "plugins"
        path.mkdir()
        for name, text in plugins.items():
            (path / name).write_text(text)
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(path), str(HERE), str(ROOT)]),
            "RAY_USAGE_STATS_ENABLED": "0",
        }
        done = subprocess.run(
            [
                sys.executable,
                str(HERE / "prefix_router_driver.py"),
                json.dumps(deployment_config),
                *("--port", str(free_port()), "--temp-dir", str(Path(temp) / "ray"), "--bound", str(BOUND_S)),
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=DRIVER_TIMEOUT_S,
            cwd=ROOT,
        )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, f"driver exited {done.returncode}: {(done.stdout + done.stderr)[-3000:]}"
    return json.loads(lines[-1].removeprefix("RESULT "))


def test_requests_are_answered_after_the_prefix_tree_is_killed():
    deployment_config, plugins = rendered()
    assert deployment_config["request_router_config"]["request_router_class"] == PREFIX_ROUTER
    result = run_driver(deployment_config, plugins)
    assert result["first"]["ok"], result
    assert result["tree_node"] == "head", result
    for after in (result["after_kill"], result["at_once"]):
        assert all(r["ok"] and r["seconds"] < BOUND_S for r in after), after
    # The router found the tree again (a new one, on the head) with both replicas as tenants.
    assert result["tree_back_with_tenants"] == 2, result
