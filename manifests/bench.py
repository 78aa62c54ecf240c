"""The load test `ops bench` runs inside the cluster: a Job running `vllm bench serve` from the serving
image against the stack's own endpoint (the gateway's Service, with one client's API key from the
keys' Secret; without the endpoint, the serve Service).

Why vLLM's client: it ships in the image the workers already run (nothing to install or pull), it is
the client vLLM's own PD and NIXL results are published with, and vLLM 0.26's `bench serve`
(vllm/benchmarks/serve.py) reports TTFT, TPOT, ITL and end-to-end latency with chosen percentiles,
request and output-token throughput, and writes them as JSON (`--save-result`). guidellm and
inference-perf would each be another pinned image to pull onto the system nodes.

The random dataset (`--dataset-name random`) needs the model's tokenizer, which the client reads
from Hugging Face (`model.source`, or `--tokenizer`). The JSON goes to the log after a marker line,
which `ops bench` reads back.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any

from config import Settings
from manifests.endpoint.chart import GATEWAY_NAMESPACE
from manifests.endpoint.gateway import api_keys_name, load_balancer_service_name
from manifests.network_policy import BENCH_PODS as BENCH_LABELS
from manifests.rayservice import HF_TOKEN_KEY, HF_TOKEN_SECRET, serve_service_name
from planning.nodes import placement

RESULT_MARKER = "=== ray-llm-eks bench result ==="
RESULT_FILE = "/tmp/bench/result.json"


@dataclass(frozen=True)
class BenchOptions:
    input_len: int = 1024
    output_len: int = 256
    concurrency: int = 8
    requests: int = 200
    request_rate: float | None = None
    """Requests per second (vLLM's `--request-rate`, Poisson arrivals); None: all at once, as many in
    flight as `concurrency` allows."""
    client: str = "default"
    tokenizer: str | None = None
    name: str = "bench"
    gateway_namespace: str = GATEWAY_NAMESPACE
    """Where the endpoint's load balancer Service is (an existing cluster's Envoy Gateway runs elsewhere)."""


def target_url(settings: Settings, gateway_namespace: str = GATEWAY_NAMESPACE) -> str:
    if settings.endpoint.enabled:
        service = load_balancer_service_name(settings.serving.name)
        return f"http://{service}.{gateway_namespace}.svc:{settings.endpoint.port}"
    return f"http://{serve_service_name(settings.serving.name)}.{settings.serving.namespace}.svc:8000"


def bench_command(settings: Settings, options: BenchOptions) -> list[str]:
    tokenizer = options.tokenizer or settings.model.source
    directory, filename = RESULT_FILE.rsplit("/", 1)
    args = [
        "vllm",
        "bench",
        "serve",
        "--backend",
        "openai-chat",
        "--base-url",
        target_url(settings, options.gateway_namespace),
        "--endpoint",
        "/v1/chat/completions",
        "--model",
        settings.model.id,
        "--tokenizer",
        tokenizer,
        "--dataset-name",
        "random",
        "--random-input-len",
        str(options.input_len),
        "--random-output-len",
        str(options.output_len),
        "--num-prompts",
        str(options.requests),
        "--max-concurrency",
        str(options.concurrency),
        *(["--request-rate", f"{options.request_rate:g}"] if options.request_rate is not None else []),
        "--ignore-eos",
        "--percentile-metrics",
        "ttft,tpot,itl,e2el",
        "--metric-percentiles",
        "50,90,99",
        "--save-result",
        "--result-dir",
        directory,
        "--result-filename",
        filename,
    ]
    # shlex quotes every word, whatever it holds (a model source may hold a quote: issue 39).
    quoted = shlex.join(args)
    return [
        "sh",
        "-c",
        f"mkdir -p {shlex.quote(directory)} && {quoted} && echo {shlex.quote(RESULT_MARKER)} && "
        f"cat {shlex.quote(RESULT_FILE)}",
    ]


def bench_job(settings: Settings, image: str, options: BenchOptions) -> dict[str, Any]:
    """A Job in the serving namespace, on the system nodes, that runs once and is kept an hour."""
    env: list[dict[str, Any]] = [{"name": "HF_HUB_DISABLE_TELEMETRY", "value": "1"}]
    if settings.endpoint.enabled:
        # vLLM's client sends OPENAI_API_KEY as `Authorization: Bearer` (lib/endpoint_request_func.py)
        env.append(
            {
                "name": "OPENAI_API_KEY",
                "valueFrom": {
                    "secretKeyRef": {"name": api_keys_name(settings.serving.name), "key": options.client}
                },
            }
        )
    if settings.hugging_face_token:
        env.append(
            {
                "name": "HF_TOKEN",
                "valueFrom": {"secretKeyRef": {"name": HF_TOKEN_SECRET, "key": HF_TOKEN_KEY}},
            }
        )
    timeout = 60 * 60
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": options.name,
            "namespace": settings.serving.namespace,
            "labels": dict(BENCH_LABELS),
        },
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": timeout,
            "ttlSecondsAfterFinished": 3600,
            "template": {
                "metadata": {"labels": dict(BENCH_LABELS)},
                "spec": {
                    "restartPolicy": "Never",
                    **placement(settings).on_system_nodes(),
                    "automountServiceAccountToken": False,
                    "containers": [
                        {
                            "name": "bench",
                            "image": image,
                            "command": bench_command(settings, options),
                            "env": env,
                            "resources": {
                                "requests": {"cpu": "1", "memory": "2Gi"},
                                "limits": {"cpu": "2", "memory": "4Gi"},
                            },
                            "securityContext": {
                                "allowPrivilegeEscalation": False,
                                "capabilities": {"drop": ["ALL"]},
                            },
                        }
                    ],
                },
            },
        },
    }
