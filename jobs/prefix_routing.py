"""Ray Serve LLM's prefix-affinity router, kept answering when its prefix tree is lost
(`serving.requestRouter: prefix`).

Ray 2.58's `PrefixCacheAffinityRouter` (ray/llm/_internal/serve/routing_policies/prefix_aware/
prefix_aware_router.py) keeps its prefix tree in one detached actor per deployment, created with Ray's
actor defaults (:119-124): no restart, and one CPU to be placed, so on any node with a CPU free, a GPU
worker included, which that actor then keeps from ever being idle. Every routing step calls it with a
blocking `ray.get` (:263-272 to pick a replica, :296 and :320-335 on replica changes, :414-418 after a
request is routed). Once the actor is gone the call raises, the exception ends Serve's routing task
(ray/serve/_private/request_router/request_router.py:1276-1277, "Unexpected error in
_fulfill_pending_requests") and leaves the request's future unset: every request through that router
waits forever.

`ResilientPrefixRouter` is that router with three changes:

- It creates the tree actor itself where Serve places its own controller: on the head node, with no CPU
  (`num_cpus=0`, `resources={"node:__internal_head__": 0.001}`, as ray/serve/_private/default_impl.py:
  268-276 does), which KubeRay's autoscaler never removes; so no GPU node is held by it.
- It waits at most `tree_timeout_s` for the tree; when the tree does not answer in time or is gone, a
  request goes by Serve's power of two choices (the parent's own fallback when it picks no replica,
  prefix_aware_router.py:352-358, 385-391), and replica changes and routed requests skip the tree.
- It finds the tree again, or creates a new one (`get_if_exists`), without blocking a request: every
  `tree_retry_s` while it is lost it asks for the tree and adds the replicas it knows as tenants, and
  prefix affinity resumes once that call has answered, with the eviction loop started again.

A restarted or new tree starts empty, so affinity resumes from nothing, as after a deploy. Loaded by
Ray as `prefix_routing:ResilientPrefixRouter` (serveConfigV2's `request_router_config`) from the
ConfigMap on the Ray pods' PYTHONPATH, where the app is built; Ray pickles it by value for every
handle's router (ray/serve/config.py `_serialize_request_router_cls`). Needs only Ray.
"""

from __future__ import annotations

import logging
import time
from typing import Any, cast

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RaySystemError
from ray.llm._internal.serve.routing_policies.prefix_aware.prefix_aware_router import (
    PrefixCacheAffinityRouter,
)
from ray.serve._private.request_router.request_router import FIFOMixin, RequestRouter

logger = logging.getLogger("ray.serve")

TREE_ACTOR_NAME = "LlmPrefixTreeActor"
"""The parent's name for it (prefix_aware_router.py:110), in the same namespace: one tree per
deployment, whichever router class made it."""
HEAD_NODE_RESOURCE = "node:__internal_head__"
"""Ray's resource of the head node (ray/_common/constants.py HEAD_NODE_RESOURCE_NAME)."""
TREE_OPTIONS: dict[str, Any] = {
    "get_if_exists": True,
    "lifetime": "detached",
    "num_cpus": 0,
    "resources": {HEAD_NODE_RESOURCE: 0.001},
}
"""Where Serve keeps its own controller (ray/serve/_private/default_impl.py:268-276): the head, no CPU.
No `max_restarts`: a restarted tree would come back without its tenants, which the parent adds only
when the replicas change; the router re-creates it and adds them itself."""
CONNECT_TIMEOUT_S = 30.0
"""How long a new tree may take to start (a worker process on the head) before it is asked again."""


class TreeUnreachableError(Exception):
    """The prefix tree did not answer within `tree_timeout_s`."""


class _BoundedMethod:
    def __init__(self, method: Any, timeout_s: float) -> None:
        self._method = method
        self._timeout_s = timeout_s

    def remote(self, *args: Any) -> Any:
        """The call's ObjectRef once it has answered, so the parent's `ray.get` does not wait."""
        ref = self._method.remote(*args)
        ready, _ = ray.wait([ref], timeout=self._timeout_s)
        if not ready:
            raise TreeUnreachableError(f"no answer from the prefix tree within {self._timeout_s} s")
        return ref


class _BoundedTree:
    """The tree actor's handle as the parent uses it (`self._tree_actor.<method>.remote(...)`), each call
    bounded in time."""

    def __init__(self, handle: Any, timeout_s: float) -> None:
        self.handle = handle
        self._timeout_s = timeout_s

    def __getattr__(self, name: str) -> _BoundedMethod:
        return _BoundedMethod(getattr(self.handle, name), self._timeout_s)


TREE_ERRORS = (RayActorError, RaySystemError, GetTimeoutError, TreeUnreachableError)
"""What a lost tree raises: dead or restarting (RayActorError, ActorDiedError among them), unreachable."""


class ResilientPrefixRouter(FIFOMixin, PrefixCacheAffinityRouter):
    def initialize_state(
        self,
        imbalanced_threshold: float | None = float("inf"),
        match_rate_threshold: float | None = 0.1,
        do_eviction: bool | None = False,
        eviction_threshold_chars: int | None = 400_000,
        eviction_target_chars: int | None = 360_000,
        eviction_interval_secs: int | None = 10,
        tree_actor: Any = None,
        tree_timeout_s: float = 2.0,
        tree_retry_s: float = 5.0,
    ) -> None:
        """The parent's arguments (`tree_actor`: a handle to use instead of finding or creating one, for
        tests), and: `tree_timeout_s`, the longest a request waits on the tree before it goes by power
        of two; `tree_retry_s`, how often a lost tree is looked for again."""
        self._tree_timeout_s = tree_timeout_s
        self._tree_retry_s = tree_retry_s
        self._tree_ok = False
        self._tree_pending: Any = None
        self._tree_pending_since = 0.0
        self._tree_retry_at = 0.0
        self._given_tree = tree_actor
        super().initialize_state(
            imbalanced_threshold=imbalanced_threshold,
            match_rate_threshold=match_rate_threshold,
            do_eviction=do_eviction,
            eviction_threshold_chars=eviction_threshold_chars,
            eviction_target_chars=eviction_target_chars,
            eviction_interval_secs=eviction_interval_secs,
            tree_actor=cast(Any, _BoundedTree(tree_actor, tree_timeout_s)),  # _connect's from here on
        )
        self._tree_usable()

    # The tree: where it lives, and whether it answers.

    def _tree_namespace(self) -> str:
        from ray.serve._private.constants import SERVE_NAMESPACE

        parts = [SERVE_NAMESPACE]
        if self._deployment_id:
            parts += [p for p in (self._deployment_id.app_name, self._deployment_id.name) if p]
        return "::".join(parts)

    def _connect(self) -> None:
        """Find or create the tree on the head, register it for `serve.shutdown`, and send it this
        router's replicas; the answer is collected by `_tree_usable`, never waited for here."""
        from ray.llm._internal.serve.routing_policies.prefix_aware.prefix_tree import PrefixTreeActor
        from ray.serve._private.constants import SERVE_CONTROLLER_NAME, SERVE_NAMESPACE

        handle: Any = self._given_tree
        if handle is None:
            handle = PrefixTreeActor.options(  # type: ignore[attr-defined]
                name=TREE_ACTOR_NAME, namespace=self._tree_namespace(), **TREE_OPTIONS
            ).remote()
            controller: Any = ray.get_actor(SERVE_CONTROLLER_NAME, namespace=SERVE_NAMESPACE)
            controller._register_shutdown_cleanup_actor.remote(handle)
        self._tree_actor = _BoundedTree(handle, self._tree_timeout_s)
        self._tree_pending = handle.add_tenants.remote(self._tenants(), time.time())
        self._tree_pending_since = time.monotonic()

    def _tenants(self) -> list[str]:
        return [replica_id.to_full_id_str() for replica_id in self._replica_id_set]

    def _tree_usable(self) -> bool:
        """Whether the tree answers now; while it does not, look for it again every `tree_retry_s`."""
        if self._tree_ok:
            return True
        now = time.monotonic()
        if self._tree_pending is None:
            if now < self._tree_retry_at:
                return False
            try:
                self._connect()
            except Exception as error:  # the controller or GCS unreachable: try again later
                logger.warning("Prefix tree not reachable (%s); routing by power of two choices", error)
                self._tree_retry_at = now + self._tree_retry_s
                return False
        pending: Any = self._tree_pending
        ready, _ = ray.wait([pending], timeout=0)
        if not ready:
            if now - self._tree_pending_since > CONNECT_TIMEOUT_S:
                self._tree_pending, self._tree_retry_at = None, now + self._tree_retry_s
            return False
        try:
            ray.get(pending)
        except TREE_ERRORS as error:
            logger.warning("Prefix tree not reachable (%s); routing by power of two choices", error)
            self._tree_pending, self._tree_retry_at = None, now + self._tree_retry_s
            return False
        self._tree_pending = None
        handle = self._tree_actor.handle
        handle.add_tenants.remote(self._tenants(), time.time())  # replicas added while it was connecting
        self._eviction_loop_running = False
        if self._do_eviction:
            handle.start_eviction_loop.remote(
                self._eviction_threshold_chars, self._eviction_target_chars, self._eviction_interval_secs
            )
            self._eviction_loop_running = True
        self._tree_ok = True
        logger.info("Prefix tree reachable: routing by prefix affinity")
        return True

    def _lose_tree(self, error: BaseException) -> None:
        logger.warning("Prefix tree lost (%r); routing by power of two choices until it is back", error)
        self._tree_ok = False
        self._tree_pending = None
        self._tree_retry_at = time.monotonic()  # a dead tree is re-created at the next request

    # No request left unanswered.

    def _fulfill_next_pending_request(self, replica: Any, request_metadata: Any = None) -> None:
        """The replica chosen for a request goes to that request (the base's exact match, so prefix
        affinity holds); where a routing task carries none, to the oldest waiting request (FIFOMixin, as
        Serve's power-of-two router does). Ray's class matches exactly only: a routing task that exits
        for having more tasks than requests (request_router.py:1243-1244) drops the request it took from
        the queue, and the tasks left route for no request and assign nothing
        (request_router.py:1111-1131), so that request waits forever; seen live with four concurrent
        requests and the tree intact."""
        if self._get_pending_request_matching_internal_request_id(request_metadata) is not None:
            RequestRouter._fulfill_next_pending_request(self, replica, request_metadata)
        else:
            super()._fulfill_next_pending_request(replica, request_metadata)

    # The parent's hooks, each falling back where the tree does not answer.

    async def _prefix_match_best_replicas(self, pending_request: Any, candidate_replicas: list[Any]) -> Any:
        if not self._tree_usable():
            return [[]]  # the parent then takes power of two's choice
        try:
            return await super()._prefix_match_best_replicas(pending_request, candidate_replicas)
        except TREE_ERRORS as error:
            self._lose_tree(error)
        except (KeyError, ValueError) as error:
            # A request without a prompt, or a tenant another router removed: power of two for this one.
            logger.debug("Prefix routing skipped for one request: %r", error)
        return [[]]

    def on_request_routed(self, pending_request: Any, replica_id: Any, result: Any) -> None:
        if not self._tree_ok:
            return
        try:
            super().on_request_routed(pending_request, replica_id, result)
        except TREE_ERRORS as error:
            self._lose_tree(error)
        except ValueError:
            pass  # a request without a prompt: nothing to remember

    def update_replicas(self, replicas: list[Any]) -> None:
        if self._tree_ok:
            try:
                super().update_replicas(replicas)  # Serve's bookkeeping first, then the tree
            except TREE_ERRORS as error:
                self._lose_tree(error)
            return
        super(PrefixCacheAffinityRouter, self).update_replicas(replicas)
        self._tree_usable()

    def on_replica_actor_died(self, replica_id: Any) -> None:
        if self._tree_ok:
            try:
                super().on_replica_actor_died(replica_id)  # Serve's bookkeeping first, then the tree
            except TREE_ERRORS as error:
                self._lose_tree(error)
            return
        super(PrefixCacheAffinityRouter, self).on_replica_actor_died(replica_id)
