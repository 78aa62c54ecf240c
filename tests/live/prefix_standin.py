"""A stand-in for the LLM side the prefix router routes to, for the live tier: Ray Serve LLM's ingress
hands decode a request object with `messages` (or `prompt`), which is what the router reads
(prefix_aware_router.py:150-166); here an ingress hands `Model` a `Prompt`, through a handle whose
deployment carries the side's `request_router_config` exactly as the stack renders it. No vLLM: the
model answers with its replica id. Imported by the Ray workers, so it lives on their PYTHONPATH.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ray import serve
from starlette.requests import Request

MODEL = "Model"
"""The routed deployment's name: its prefix tree is `LlmPrefixTreeActor` in `serve::<app>::Model`."""


@dataclass
class Prompt:
    prompt: str


@serve.deployment(num_replicas=2, max_ongoing_requests=8)
class Model:
    def __call__(self, request: Prompt) -> str:
        return serve.get_replica_context().replica_id.unique_id


@serve.deployment(num_replicas=1)
class Ingress:
    def __init__(self, model: Any) -> None:
        self._model = model

    async def __call__(self, request: Request) -> dict[str, str]:
        body = await request.json()
        return {"replica": await self._model.remote(Prompt(prompt=body["prompt"]))}


def build(deployment_config: dict[str, Any]) -> Any:
    """The app: `Model` routed by the rendered side's `request_router_config`."""
    router = deployment_config.get("request_router_config")
    model = Model.options(request_router_config=router) if router else Model
    return Ingress.bind(model.bind())
