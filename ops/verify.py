"""`ops verify`: the smoke test after `pulumi up`, checks that each PASS or FAIL with a reason.

Through the endpoint's gateway it first checks that a request without an API key is refused (401)
and never reaches Ray, then lists the models and streams a completion with a key.

The NIXL check is the one that matters most: when NIXL cannot use libfabric it falls back to UCX, which
runs at TCP speed even on EFA, and nothing else fails. The Ray worker logs are the only place that
says which backend was instantiated, so the check reads them in every worker pod.
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

from ops.kube import RAY_CLUSTER_LABEL, RAY_NODE_TYPE_LABEL, KubeApi, OpsError, excerpt
from ops.kv_transfer import (
    BACKEND_PATTERN,
    EMULATED_PATTERN,
    HMEM_PATTERN,
    NO_CUDA_PATTERN,
    PROVIDER_PATTERN,
    WORKER_CONTAINER,
    ProbeSpec,
    judge,
    libfabric_problems,
    pick_pair,
    run_probe,
)
from ops.status import EFA_RESOURCE, GPU_NODE_SELECTOR, GPU_RESOURCE, Progress, parse_gpu_node, quiet
from planning.kv_path import Mechanism, TransferFloor

Clock = Callable[[], float]

MODELS_PATH = "models"
CHAT_PATH = "chat/completions"
PROMPT = "Explain the benefits of prefill/decode disaggregation."
MAX_TOKENS = 200
RAY_LOG_DIR = "/tmp/ray/session_latest/logs/"
NIXL_BACKEND_GREP = (
    "grep",
    "-rhoE",
    "|".join(
        (
            BACKEND_PATTERN,
            PROVIDER_PATTERN.replace("([A-Za-z0-9_;.-]+)", "[A-Za-z0-9_;.-]+"),
            HMEM_PATTERN,
            EMULATED_PATTERN,
            NO_CUDA_PATTERN,
        )
    ),
    RAY_LOG_DIR,
)

UCX_FALLBACK = (
    "NIXL fell back to UCX, which runs at TCP speed: the KV cache does not travel over EFA. Check "
    "`backends: [LIBFABRIC]` in both sides' kv_connector_extra_config (ray-llm-eks:model.nixlBackends), "
    "that the EFA device plugin runs on the GPU nodes and advertises vpc.amazonaws.com/efa, and that "
    "the workers have FI_PROVIDER=efa."
)

CHECK_AUTH = "API key required"
CHECK_MODELS = "GET /v1/models"
CHECK_CHAT = "streamed chat completion"
CHECK_NIXL = "NIXL backend"
CHECK_TRANSFER = "KV transfer"
CHECK_BANDWIDTH = "KV bandwidth"
CHECK_NODES = "GPU nodes"


@dataclass(frozen=True)
class VerifyTarget:
    namespace: str
    name: str
    """The RayService; its active Ray cluster scopes the worker pods."""
    model: str
    gateway: bool = False
    """Whether the requests go through the endpoint's gateway, which must refuse them without a key."""
    kv_connector: bool = True
    """Whether the workers run vLLM's NIXL connector: not with `serving.mode: aggregated`, whose
    replicas move no KV cache (the transfer probe still measures the path disaggregation would take)."""
    kv_backends: tuple[str, ...] = ("LIBFABRIC",)
    """The NIXL backends the stack's plan chose (planning/kv_path.py): what the workers must log."""
    kv_buffer_device: str = "cuda"
    """Where the plan keeps the KV buffers (GPU buffers over LIBFABRIC need rails with FI_HMEM)."""
    kv_mechanism: Mechanism | None = None
    """How the plan expects the KV bytes to cross (planning/kv_path.py: GPUDirect RDMA reads, emulated
    reads, host buffers on EFA, UCX over TCP); None: no plan, EFA by any mechanism."""
    kv_probe: ProbeSpec | None = None
    """The transfer probe to run between two GPU workers (ops/kv_transfer.py); None skips it."""
    kv_floor: TransferFloor | None = None
    """The plan's floor for the probe's rate (planning/kv_path.py); None: no stack, no floor."""
    kv_floor_override: float | None = None
    """GB/s the probe must reach, instead of the plan's floor (`--kv-floor`)."""
    gpu_selector: str = GPU_NODE_SELECTOR
    """The stack's GPU nodes (ops/status.py `gpu_node_selector`: its own label on a team's cluster)."""


@dataclass(frozen=True)
class CheckResult:
    name: str
    passed: bool
    reason: str

    def format(self) -> str:
        first, *rest = self.reason.splitlines() or [""]
        lines = [f"{'PASS' if self.passed else 'FAIL'}  {self.name}: {first}"]
        return "\n".join(lines + [f"      {line}" for line in rest])


@dataclass(frozen=True)
class VerifyReport:
    checks: tuple[CheckResult, ...]

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)

    def format(self) -> str:
        failed = [c.name for c in self.checks if not c.passed]
        summary = f"{len(self.checks) - len(failed)} of {len(self.checks)} checks passed"
        if failed:
            summary += "; FAILED: " + ", ".join(failed)
        return "\n".join([*(c.format() for c in self.checks), "", summary])


@dataclass(frozen=True)
class StreamStats:
    """What one streamed chat completion showed."""

    text: str
    reasoning: str
    """`reasoning_content` deltas, when the server splits a thinking model's reasoning out."""
    content_chunks: int
    tokens: int
    token_source: Literal["usage", "content chunks"]
    ttft_s: float | None
    """Seconds from sending the request to the first chunk carrying text."""
    tokens_per_s: float | None
    """Tokens after the first, over the time from the first text chunk to the last chunk of the choice."""
    finish_reason: str | None
    done: bool
    """Whether `data: [DONE]` arrived (else the stream was cut off)."""
    error: str | None


def summarize_stream(lines: Iterable[str], start: float, clock: Clock) -> StreamStats:
    """Read an OpenAI chat-completion SSE stream, timing each event with `clock` as it arrives."""
    text: list[str] = []
    reasoning: list[str] = []
    content_chunks = 0
    usage_tokens: int | None = None
    first: float | None = None
    last: float | None = None
    finish_reason: str | None = None
    done = False
    error: str | None = None
    for line in lines:
        now = clock()
        if not line.startswith("data:"):
            continue  # blank separators, `:` comments, `event:`/`id:` fields
        payload = line.removeprefix("data:").strip()
        if payload == "[DONE]":
            done = True
            break
        try:
            chunk = json.loads(payload)
        except json.JSONDecodeError:
            error = f"an event that is not JSON: {payload[:120]!r}"
            break
        if not isinstance(chunk, dict):
            error = f"an event that is not a JSON object: {payload[:120]!r}"
            break
        if chunk.get("error"):
            failure = chunk["error"]
            error = failure.get("message", str(failure)) if isinstance(failure, dict) else str(failure)
            break
        usage = chunk.get("usage")
        if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
            usage_tokens = usage["completion_tokens"]
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            piece = delta.get("content") or ""
            thought = delta.get("reasoning_content") or delta.get("reasoning") or ""
            if piece or thought:
                content_chunks += 1
                text.append(piece)
                reasoning.append(thought)
                first = now if first is None else first
                last = now
            if choice.get("finish_reason"):
                finish_reason = choice["finish_reason"]
                last = now
    tokens = usage_tokens if usage_tokens is not None else content_chunks
    rate = None
    if first is not None and last is not None and last > first and tokens > 1:
        rate = (tokens - 1) / (last - first)
    return StreamStats(
        text="".join(text),
        reasoning="".join(reasoning),
        content_chunks=content_chunks,
        tokens=tokens,
        token_source="usage" if usage_tokens is not None else "content chunks",
        ttft_s=None if first is None else first - start,
        tokens_per_s=rate,
        finish_reason=finish_reason,
        done=done,
        error=error,
    )


def kubernetes_status(body: str) -> bool:
    """Whether an HTTP body is a Kubernetes API `Status` object (the API server speaking, not a proxied
    application)."""
    try:
        document = json.loads(body)
    except (ValueError, TypeError):
        return False
    return isinstance(document, dict) and document.get("kind") == "Status" and "apiVersion" in document


def check_key_required(api: KubeApi) -> CheckResult:
    """The gateway refuses a request without a key (Envoy's api_key_auth answers 401 itself)."""
    response = api.http_get(MODELS_PATH, headers={})
    if response.status == 401 and kubernetes_status(response.body):
        # The API server's own refusal (its Status object), not the gateway's: ours was never sent on.
        return CheckResult(
            CHECK_AUTH,
            False,
            "the API server answered 401 itself (a Kubernetes Status), so the gateway was never asked: "
            "the kubeconfig's credentials are not accepted",
        )
    if response.status == 401:
        return CheckResult(CHECK_AUTH, True, "a request without a key gets 401")
    if response.status == 200:
        return CheckResult(
            CHECK_AUTH,
            False,
            "a request without a key was served: the API key SecurityPolicy is not in force (see the "
            "endpoint section of `python -m ops status`)",
        )
    return CheckResult(
        CHECK_AUTH,
        False,
        f"a request without a key got HTTP {response.status}, not 401: {excerpt(response.body)}",
    )


def check_models(api: KubeApi, model: str) -> CheckResult:
    response = api.http_get(MODELS_PATH)
    if response.status != 200:
        hint = ""
        if response.status == 503:
            hint = " (the serve Service has no ready endpoint yet: see `python -m ops status`)"
        elif response.status == 401:
            hint = " (the gateway refused the API key: is it one of the stack's `apiKeys`?)"
        return CheckResult(CHECK_MODELS, False, f"HTTP {response.status}{hint}: {excerpt(response.body)}")
    try:
        listed = json.loads(response.body)
        ids = [m["id"] for m in listed["data"]]
    except (json.JSONDecodeError, KeyError, TypeError):
        return CheckResult(CHECK_MODELS, False, f"not an OpenAI model list: {excerpt(response.body)}")
    if model not in ids:
        served = ", ".join(ids) or "none"
        return CheckResult(CHECK_MODELS, False, f"model {model} is not served (served: {served})")
    return CheckResult(CHECK_MODELS, True, f"model {model} is served")


def chat_request(model: str) -> dict[str, Any]:
    return {
        "model": model,
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": MAX_TOKENS,
        "temperature": 0.7,
        "stream": True,
        # The final chunk then carries exact token counts; without it we count content chunks.
        "stream_options": {"include_usage": True},
    }


def check_chat(api: KubeApi, model: str, clock: Clock) -> CheckResult:
    start = clock()
    stats = summarize_stream(api.http_post_stream(CHAT_PATH, chat_request(model)), start, clock)
    if stats.error:
        return CheckResult(CHECK_CHAT, False, f"the stream reported an error: {stats.error}")
    if not (stats.text or stats.reasoning):
        return CheckResult(
            CHECK_CHAT, False, f"the stream carried no text (finish_reason {stats.finish_reason or 'none'})"
        )
    if not stats.done:
        return CheckResult(
            CHECK_CHAT, False, f"the stream stopped after {stats.content_chunks} text chunks without [DONE]"
        )
    rate = f"{stats.tokens_per_s:.1f} tokens/s" if stats.tokens_per_s is not None else "tokens/s n/a"
    ttft = f"{stats.ttft_s:.2f} s" if stats.ttft_s is not None else "n/a"
    reply = excerpt(stats.text or stats.reasoning, 80)
    return CheckResult(
        CHECK_CHAT,
        True,
        f"time to first token {ttft}, {rate} ({stats.tokens} tokens by {stats.token_source}, "
        f"finish_reason {stats.finish_reason or 'none'})\nreply: {reply!r}",
    )


def backend_counts(grep_output: str) -> Counter[str]:
    return Counter(re.findall(BACKEND_PATTERN, grep_output))


def worker_selector(api: KubeApi, target: VerifyTarget) -> str:
    """Workers of the RayService's active Ray cluster: during an upgrade the namespace holds two."""
    selector = f"{RAY_NODE_TYPE_LABEL}=worker"
    rayservice = api.get_rayservice(target.namespace, target.name)
    active = ((rayservice or {}).get("status") or {}).get("activeServiceStatus") or {}
    if active.get("rayClusterName"):
        selector += f",{RAY_CLUSTER_LABEL}={active['rayClusterName']}"
    return selector


def check_nixl_backend(api: KubeApi, target: VerifyTarget, progress: Progress = quiet) -> CheckResult:
    selector = worker_selector(api, target)
    pods = sorted(api.list_pods(target.namespace, selector), key=lambda p: p["metadata"]["name"])
    if not pods:
        return CheckResult(CHECK_NIXL, False, f"no Ray worker pod in {target.namespace} ({selector})")
    findings: list[str] = []
    ucx = missing = unreadable = False
    wrong_path: list[str] = []
    for pod in pods:
        name = pod["metadata"]["name"]
        phase = (pod.get("status") or {}).get("phase") or "Unknown"
        if phase != "Running":
            findings.append(f"{name}: {phase}, not Running, so its logs cannot be searched")
            unreadable = True
            continue
        progress(f"searching the Ray logs of {name} for the NIXL backend")
        try:
            result = api.exec_in_pod(target.namespace, name, WORKER_CONTAINER, NIXL_BACKEND_GREP)
        except OpsError as error:
            findings.append(f"{name}: {error}")
            unreadable = True
            continue
        counts = backend_counts(result.stdout)
        seen = ", ".join(f"{backend} x{n}" for backend, n in sorted(counts.items()))
        if counts["LIBFABRIC"] and "LIBFABRIC" in target.kv_backends:
            wrong_path += libfabric_problems(name, result.stdout, target.kv_buffer_device)
            providers = sorted(set(re.findall(PROVIDER_PATTERN, result.stdout)))
            if providers:
                seen += f"; provider {', '.join(providers)}"
            if EMULATED_PATTERN in result.stdout:
                seen += "; GPU buffers by emulated reads (not registered with the EFA device)"
                if target.kv_mechanism == "gpudirect":
                    wrong_path.append(
                        f"{name}: libfabric could not register GPU memory with the EFA device, so it "
                        "emulates reads through host bounce buffers where the plan expected GPUDirect "
                        "RDMA: the node's NVIDIA driver must export GPU memory to EFA (dma-buf or "
                        "nvidia-peermem)"
                    )
        if counts["UCX"] and "UCX" not in target.kv_backends:
            findings.append(f"{name}: {seen}")
            ucx = True
        elif counts["LIBFABRIC"] or counts["UCX"]:
            findings.append(f"{name}: {seen}")
        elif result.returncode is None:
            findings.append(f"{name}: grep did not finish in time")
            unreadable = True
        elif result.returncode > 1:  # grep: 1 means no match, 2 means it could not read
            findings.append(f"{name}: could not search {RAY_LOG_DIR} ({excerpt(result.stderr, 160)})")
            unreadable = True
        else:
            findings.append(f"{name}: no NIXL backend was logged yet")
            missing = True
    if ucx:
        return CheckResult(CHECK_NIXL, False, "\n".join([UCX_FALLBACK, *findings]))
    if wrong_path:
        return CheckResult(CHECK_NIXL, False, "\n".join([*wrong_path, *findings]))
    if missing:
        return CheckResult(
            CHECK_NIXL,
            False,
            "\n".join(
                [
                    "no NIXL backend was logged yet in some workers: the engines log it when they start; "
                    "wait for the application to be RUNNING (`python -m ops status`) and run verify again",
                    *findings,
                ]
            ),
        )
    if unreadable:
        return CheckResult(CHECK_NIXL, False, "\n".join(["could not read every worker's logs", *findings]))
    if "LIBFABRIC" in target.kv_backends:
        verdict = "LIBFABRIC (EFA) in every worker, no UCX"
    else:
        verdict = "UCX in every worker, as the plan chose (KV over TCP: planning/kv_path.py)"
    return CheckResult(CHECK_NIXL, True, "\n".join([verdict, *findings]))


def check_kv_transfer(
    api: KubeApi,
    target: VerifyTarget,
    progress: Progress = quiet,
    sleep: Callable[[float], None] = time.sleep,
    clock: Clock = time.monotonic,
) -> list[CheckResult]:
    """Move a known buffer between two GPU workers through NIXL (ops/kv_transfer.py): the bytes, the
    transport, and the rate against the plan's floor."""
    assert target.kv_probe is not None
    pods = api.list_pods(target.namespace, worker_selector(api, target))
    pair = pick_pair(pods)
    if isinstance(pair, str):
        single_node = "never leaves" in pair
        reason = pair + ("; nothing to probe" if single_node else "")
        return [
            CheckResult(CHECK_TRANSFER, single_node, reason),
            CheckResult(CHECK_BANDWIDTH, single_node, reason),
        ]
    run = run_probe(api, target.namespace, pair, target.kv_probe, progress, sleep=sleep, clock=clock)
    transfer, bandwidth = judge(
        run,
        target.kv_probe,
        buffer_device=target.kv_buffer_device,
        planned=target.kv_mechanism,
        floor=target.kv_floor,
        floor_override=target.kv_floor_override,
    )
    return [
        CheckResult(CHECK_TRANSFER, transfer.passed, transfer.reason),
        CheckResult(CHECK_BANDWIDTH, bandwidth.passed, bandwidth.reason),
    ]


def check_gpu_nodes(api: KubeApi, selector: str = GPU_NODE_SELECTOR) -> CheckResult:
    nodes = [parse_gpu_node(n) for n in api.list_nodes(selector)]
    if not nodes:
        return CheckResult(CHECK_NODES, False, f"no node is labelled {selector} (is the GPU node group up?)")
    problems = []
    for node in sorted(nodes, key=lambda n: n.name):
        if node.gpus < 1:
            problems.append(f"{node.name}: allocatable {GPU_RESOURCE} is {node.gpus} (NVIDIA device plugin?)")
        if node.efa < 1:
            problems.append(
                f"{node.name}: allocatable {EFA_RESOURCE} is {node.efa} (EFA device plugin running there, "
                "and the node launched with an EFA interface?)"
            )
    if problems:
        return CheckResult(CHECK_NODES, False, "\n".join(problems))
    listing = ", ".join(f"{n.name} ({n.gpus} GPU, {n.efa} EFA)" for n in sorted(nodes, key=lambda n: n.name))
    return CheckResult(
        CHECK_NODES, True, f"{len(nodes)} with {GPU_RESOURCE} >= 1 and {EFA_RESOURCE} >= 1: {listing}"
    )


def verify(
    api: KubeApi,
    target: VerifyTarget,
    clock: Clock = time.monotonic,
    progress: Progress = quiet,
    sleep: Callable[[float], None] = time.sleep,
) -> VerifyReport:
    """Run every check, even after a failure: the report should name everything that is wrong."""
    steps: list[tuple[tuple[str, ...], str, Callable[[], CheckResult | list[CheckResult]]]] = []
    if target.gateway:
        steps.append(((CHECK_AUTH,), "calling the gateway without a key", lambda: check_key_required(api)))
    steps += [
        ((CHECK_MODELS,), "listing models", lambda: check_models(api, target.model)),
        (
            (CHECK_CHAT,),
            f"streaming a chat completion from {target.model}",
            lambda: check_chat(api, target.model, clock),
        ),
        (
            (CHECK_NIXL,),
            "finding the Ray worker pods",
            lambda: (
                check_nixl_backend(api, target, progress)
                if target.kv_connector
                else CheckResult(
                    CHECK_NIXL, True, "not used: serving.mode is aggregated, no KV cache crosses nodes"
                )
            ),
        ),
    ]
    if target.kv_probe is not None:
        steps.append(
            (
                (CHECK_TRANSFER, CHECK_BANDWIDTH),
                "moving a known buffer between two GPU workers through NIXL",
                lambda: check_kv_transfer(api, target, progress, sleep, clock),
            )
        )
    steps.append(
        ((CHECK_NODES,), "reading GPU node capacity", lambda: check_gpu_nodes(api, target.gpu_selector))
    )
    results: list[CheckResult] = []
    for names, doing, run in steps:
        progress(doing)
        try:
            outcome = run()
            results += outcome if isinstance(outcome, list) else [outcome]
        except OpsError as error:
            results += [CheckResult(name, False, str(error)) for name in names]
        except (ValueError, KeyError, TypeError) as error:
            # A malformed answer fails its check; it must not hide the other checks' verdicts.
            results += [CheckResult(name, False, f"unexpected answer: {error!r}") for name in names]
    return VerifyReport(tuple(results))
