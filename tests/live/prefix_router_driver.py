"""Run by tests/live/test_prefix_router.py in its own process: a local Ray 2.58 cluster on 127.0.0.1
(the pinned ray[serve], CPU), the stand-in app routed by the rendered `request_router_config`, one
request, then the prefix-tree actor killed (`ray.kill`, no restart: the actor is gone for good, as when
its node is removed), then four requests one after the other and four at once, each given `--bound`
seconds, then whether the tree is back with both replicas as tenants. Prints one line `RESULT <json>`;
the cluster goes with the process.

    PYTHONPATH=<plugins>:tests/live:. python tests/live/prefix_router_driver.py '<deployment_config json>' \
        --port 8123 --temp-dir /tmp/x
"""

from __future__ import annotations

import argparse
import json
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from tests.ray_llm_import import public_request_routers  # the repository root is on PYTHONPATH

APP = "qwen"
TREE = "LlmPrefixTreeActor"


def ask(port: int, prompt: str, bound: float) -> dict[str, Any]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/",
        data=json.dumps({"prompt": prompt}).encode(),
        headers={"Content-Type": "application/json"},
    )
    start = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=bound) as response:
            body = json.loads(response.read())
        return {"ok": True, "seconds": round(time.monotonic() - start, 2), "replica": body["replica"]}
    except Exception as error:
        return {"ok": False, "seconds": round(time.monotonic() - start, 2), "error": repr(error)}


def tree_tenants(ray: Any, namespace: str) -> int | None:
    try:
        tree = ray.get_actor(TREE, namespace=namespace)
        return len(ray.get(tree.getattr.remote("tenant_to_char_count"), timeout=5))
    except Exception:
        return None


def tree_node(ray: Any, tree: Any) -> str:
    """Where the GCS says the actor runs (no dashboard, so no state API): the head or another node."""
    head = next(n["NodeID"] for n in ray.nodes() if "node:__internal_head__" in n["Resources"])
    placed: dict[str, Any] = {}
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        placed = ray._private.state.actors(actor_id=tree._actor_id.hex())
        if placed.get("State") in ("ALIVE", 2):
            break
        time.sleep(0.2)
    return "head" if placed.get("Address", {}).get("NodeID") == head else "another node"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("deployment_config")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--temp-dir", required=True)
    parser.add_argument("--bound", type=float, default=10.0)
    parser.add_argument("--no-kill", action="store_true", help="the same requests, the tree left alone")
    args = parser.parse_args()
    deployment_config = json.loads(args.deployment_config)
    public_request_routers()

    import ray
    from prefix_standin import MODEL, build
    from ray import serve

    ray.init(
        num_cpus=4,
        include_dashboard=False,
        _node_ip_address="127.0.0.1",
        _temp_dir=args.temp_dir,
        log_to_driver=False,
    )
    serve.start(http_options={"host": "127.0.0.1", "port": args.port})
    serve.run(build(deployment_config), name=APP, route_prefix="/")
    namespace = f"serve::{APP}::{MODEL}"
    result: dict[str, Any] = {"first": ask(args.port, "You are a helpful assistant. " * 20, args.bound)}
    if not args.no_kill:
        tree = ray.get_actor(TREE, namespace=namespace)
        result["tree_node"] = tree_node(ray, tree)
        ray.kill(tree, no_restart=True)
    time.sleep(1)
    prompts = [f"Question {i}: what is the capital of country number {i}? " * 10 for i in range(4)]
    result["after_kill"] = [ask(args.port, p, args.bound) for p in prompts]
    with ThreadPoolExecutor(len(prompts)) as pool:  # then at once, as clients send them
        result["at_once"] = list(pool.map(lambda p: ask(args.port, p.upper(), args.bound), prompts))
    result["tree_back_with_tenants"] = None
    deadline = time.monotonic() + 20
    while not args.no_kill and time.monotonic() < deadline:
        ask(args.port, "You are a helpful assistant. " * 20, args.bound)
        result["tree_back_with_tenants"] = tree_tenants(ray, namespace)
        if result["tree_back_with_tenants"]:
            break
        time.sleep(1)
    print("RESULT " + json.dumps(result), flush=True)
    serve.shutdown()
    ray.shutdown()


if __name__ == "__main__":
    main()
