"""The `python -m ops` command line: argument parsing, defaults from the stack file, exit codes.

Exit codes: 0 success, 1 a check failed or the cluster answered badly, 2 the command could not start
(usage, stack config, kubeconfig, pulumi CLI). Reports go to stdout, progress and errors to stderr, so
`python -m ops render --stack dev > serving.yaml` stays clean. The cluster and the clock are
parameters of `main` so the tests drive the real command line against recorded responses.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from config.endpoint import DEFAULT_CLIENT
from config.serving import ModelConfig, ServingConfig
from config.settings import ConfigError, Settings, load_settings
from ops.dashboards import Popen, default_popen, describe, forwards, run_forwards
from ops.kube import ConnectOptions, KubeApi, OpsError, ServiceEndpoint, stack_prometheus
from ops.stack import PROJECT_ROOT, Runner, kubeconfig_from_stack, load_stack_settings, stack_output

if TYPE_CHECKING:
    from ops.status import ServingMetrics

Connect = Callable[[ConnectOptions], KubeApi]

# The project's defaults, for commands run without --stack: read from the config models, not repeated.
DEFAULT_NAMESPACE: str = ServingConfig.model_fields["namespace"].default
DEFAULT_NAME: str = ServingConfig.model_fields["name"].default
DEFAULT_MODEL: str = ModelConfig.model_fields["id"].default
API_KEY_ENV = "OPENAI_API_KEY"
"""Where `verify --base-url` takes the API key from without --stack (what OpenAI clients read too)."""


def progress(message: str) -> None:
    print(f"ops: {message}", file=sys.stderr, flush=True)


ROOT_HELP = f"directory holding Pulumi.yaml and the stack files (default: {PROJECT_ROOT})"
Subparsers = argparse._SubParsersAction
"""What `add_subparsers` returns: each command adds its parser to it."""


def _of_stack(sub: argparse.ArgumentParser, stack_help: str) -> None:
    """A command that needs a stack: --stack (required) and where its files are (--root)."""
    sub.add_argument("--stack", required=True, metavar="NAME", help=stack_help)
    sub.add_argument("--root", type=Path, default=PROJECT_ROOT, metavar="DIR", help=ROOT_HELP)


def _of_cluster(sub: argparse.ArgumentParser) -> None:
    """A command that talks to the cluster: a kubeconfig or a stack's, the RayService's namespace and name."""
    where = sub.add_mutually_exclusive_group()
    where.add_argument(
        "--kubeconfig",
        type=Path,
        metavar="FILE",
        help="kubeconfig to use (default: KUBECONFIG or ~/.kube/config, unless --stack)",
    )
    where.add_argument(
        "--stack",
        metavar="NAME",
        help="take the kubeconfig from `pulumi stack output kubeconfig` of this stack, and the "
        "namespace, name and model from Pulumi.NAME.yaml",
    )
    sub.add_argument(
        "--namespace",
        help=f"namespace of the RayService (default: the stack's, else {DEFAULT_NAMESPACE})",
    )
    sub.add_argument("--name", help=f"RayService name (default: the stack's, else {DEFAULT_NAME})")
    sub.add_argument("--root", type=Path, default=PROJECT_ROOT, metavar="DIR", help=ROOT_HELP)


def _plan_parser(commands: Subparsers) -> None:
    """`ops plan`: the program run offline, reported."""
    plan = commands.add_parser(
        "plan",
        help="offline: what a preview would create, the hardware fit, the nodes and the hourly cost",
        description="Run the Pulumi program offline, against the offline world the tests read too (no AWS, "
        "no Pulumi CLI), and print "
        "what a first `pulumi up` would create, by component; the hardware and fit summaries; the nodes; "
        "and the hourly cost by part, from your last preview's cached Price List answers or else from "
        "the project's dated price snapshot (the report says which).",
    )
    _of_stack(plan, "stack name: reads Pulumi.NAME.yaml")
    plan.add_argument(
        "--reservation-kind",
        choices=["odcr", "capacity-block"],
        default="odcr",
        help="what the reservation gpuNodes.capacityReservation (or a side's) names is mocked as (only EC2 "
        "knows): an "
        "On-Demand Capacity Reservation (default) or a Capacity Block, active for a week from yesterday",
    )


def _preflight_parser(commands: Subparsers) -> None:
    """`ops preflight`: what `pulumi up` needs from this machine and the account."""
    preflight = commands.add_parser(
        "preflight",
        help="before `pulumi up`: Pulumi CLI, AWS CLI v2, credentials and account, region, EC2 vCPU quotas",
        description="Check everything `pulumi up` needs from this machine and the account, all at once: the "
        "Pulumi CLI, the AWS CLI v2, credentials (and the account they belong to), the stack's region, "
        "and the EC2 On-Demand vCPU quotas there against both node groups at maxSize. Exits 2 when "
        "anything is missing.",
    )
    _of_stack(preflight, "stack name: reads Pulumi.NAME.yaml")


def _render_parser(commands: Subparsers) -> None:
    """`ops render`: the Kubernetes objects the stack applies, as YAML."""
    render = commands.add_parser(
        "render",
        help="print every Kubernetes object of the serving layer, endpoint and metrics stack as YAML",
        description="Print, offline, every Kubernetes object the stack applies itself (namespaces, network "
        "policies, service accounts, Secrets, jobs, the RayService, the gateway's objects, monitors, "
        "dashboards) as multi-document YAML: the same functions the Pulumi program calls. Secrets' values "
        "are placeholders; the Helm charts' own objects are not included.",
    )
    _of_stack(render, "stack name: reads Pulumi.NAME.yaml")
    render.add_argument(
        "--account-id",
        metavar="ID",
        help="the stack's AWS account, which names the model cache's bucket (default: shown as <account-id>)",
    )
    render.add_argument(
        "--vpc-cidr",
        action="append",
        metavar="CIDR",
        help="with cluster.existingClusterName (required there): a range of the cluster's VPC, as the "
        "network policies admit the load balancer and the API server from it; repeat for each (`aws ec2 "
        "describe-vpcs --vpc-ids <id> --query 'Vpcs[].CidrBlockAssociationSet[].CidrBlock'`). Add-ons set "
        "to auto are rendered as installed: only a preview looks at what the cluster runs",
    )


def _status_parser(commands: Subparsers) -> None:
    """`ops status`: the deployed RayService, its pods and GPU/EFA capacity."""
    status = commands.add_parser(
        "status",
        help="RayService and application status, Ray pods and their nodes, GPU/EFA capacity",
        description="Show the RayService's Ready condition, its deprecated serviceStatus and each serve "
        "application's status; every Ray pod with its node and phase; and each GPU node's allocatable "
        "nvidia.com/gpu and vpc.amazonaws.com/efa. Exits 1 when the RayService does not exist.",
    )
    _of_cluster(status)


def _verify_parser(commands: Subparsers) -> None:
    """`ops verify`: the smoke test after `pulumi up`."""
    verify = commands.add_parser(
        "verify",
        help="smoke test after `pulumi up`: models, a streamed chat, the KV path (backend, a transfer "
        "checked byte by byte and timed), GPU/EFA capacity",
        description="Check that the endpoint's gateway refuses a request without an API key (401), that "
        "GET /v1/models lists the model, that a streamed chat completion returns text (reporting time to "
        "first token and tokens/s), that every Ray worker's logs show the NIXL backend the plan chose, that "
        "a known buffer moved between two GPU workers through NIXL arrives intact over the planned transport "
        "(libfabric's efa provider, or the transport UCX names) at no less than the plan's floor, and that "
        "every GPU node offers nvidia.com/gpu and vpc.amazonaws.com/efa. With --stack and the "
        "endpoint on, HTTP goes to the gateway through the Kubernetes API server's service proxy, with a "
        "key from the stack's `apiKeys` output; without it, to the serve Service. --base-url calls a URL "
        f"instead (the key then from --stack, else ${API_KEY_ENV}). Exits 1 if any check fails.",
    )
    _of_cluster(verify)
    verify.add_argument(
        "--base-url",
        metavar="URL",
        help="call the OpenAI API here instead of through the API server, e.g. http://127.0.0.1:8000/v1 "
        "after `kubectl port-forward -n inference svc/ray-llm-serve-svc 8000:8000`",
    )
    verify.add_argument(
        "--model", metavar="ID", help=f"model id (default: the stack's, else {DEFAULT_MODEL})"
    )
    verify.add_argument(
        "--kv-probe-mib",
        type=_probe_mib,
        default=256,
        metavar="N",
        help="MiB the KV transfer probe moves between two GPU workers through NIXL, five times (default "
        "256, in 4 MiB blocks; up to 4096); 0 skips the probe",
    )
    verify.add_argument(
        "--kv-floor",
        type=_positive_float,
        metavar="GB/S",
        help="the least KV transfer rate to accept, instead of the plan's floor (the preview's "
        '"KV transfer floor" line)',
    )
    verify.add_argument(
        "--client",
        metavar="NAME",
        help="whose API key to use, of the stack's endpoint.clients (default: `default`, else the "
        "first by name)",
    )


def _dashboards_parser(commands: Subparsers) -> None:
    """`ops dashboards`: Grafana, Prometheus and the Ray dashboard port-forwarded."""
    dashboards = commands.add_parser(
        "dashboards",
        help="Grafana, Prometheus and the Ray dashboard on localhost (kubectl port-forward), until Ctrl-C",
        description="Port-forward Grafana (127.0.0.1:3000, where the Ray dashboard's metrics tabs load "
        "their panels from), Prometheus (127.0.0.1:9090) and the Ray dashboard (127.0.0.1:8265) with "
        "the stack's kubeconfig, print their URLs and Grafana's login, and keep them open until Ctrl-C. "
        "Needs kubectl and the stack's metrics stack (observability.enabled).",
    )
    _of_cluster(dashboards)


def _summary_parser(commands: Subparsers) -> None:
    """`ops summary`: the stack's outputs as Markdown."""
    summary = commands.add_parser(
        "summary",
        help="the deployed stack's outputs as Markdown (secrets masked), for a CI job summary",
        description="Print the stack's outputs as a Markdown table, from `pulumi stack output --json` "
        "without --show-secrets: Pulumi masks every secret output, so nothing secret is printed.",
    )
    _of_stack(summary, "the deployed stack")


def _bench_parser(commands: Subparsers) -> None:
    """`ops bench`: a load test in the cluster."""
    bench = commands.add_parser(
        "bench",
        help="load test in the cluster (vllm bench serve): latency percentiles, tokens/s, $ per 1M tokens",
        description="Run `vllm bench serve` from the serving image as a Job in the serving namespace, "
        "against the stack's endpoint with one client's API key (without the endpoint, the serve "
        "Service), and report TTFT, inter-token and end-to-end latency (p50, p90, p99), requests/s, output "
        "tokens/s and dollars per million output tokens from the stack's hourly cost. The result file "
        "(--json) records the stack, serving mode, GPUs, KV path, workload and each point; --sweep runs "
        "one Job per concurrency. `python -m ops bench compare A.json B.json` compares result files "
        "(--help there). Exits 1 if requests failed or the Job failed.",
    )
    _of_stack(bench, "the deployed stack (its kubeconfig, endpoint and keys)")
    bench.add_argument(
        "--input-len", type=int, default=1024, metavar="N", help="prompt tokens (default 1024)"
    )
    bench.add_argument("--output-len", type=int, default=256, metavar="N", help="output tokens (default 256)")
    bench.add_argument(
        "--concurrency", type=int, default=8, metavar="N", help="requests in flight (default 8)"
    )
    bench.add_argument(
        "--sweep",
        type=_concurrencies,
        metavar="N,N,...",
        help="one run per concurrency, in this order (e.g. 1,4,16,64), each recorded; replaces --concurrency",
    )
    bench.add_argument(
        "--ratios",
        type=_ratios,
        metavar="P:D,P:D,...",
        help="run the points once per prefill:decode replica ratio (e.g. 1:1,2:1,1:2), set on the live stack "
        "through Ray Serve's REST API without a deploy and put back at the end; one result file each",
    )
    bench.add_argument(
        "--request-rate",
        type=_positive_float,
        metavar="RPS",
        help="requests per second, Poisson arrivals (default: all at once, up to the concurrency)",
    )
    bench.add_argument("--label", help="the run's name in comparisons (default: '<stack> (<mode>)')")
    bench.add_argument("--requests", type=int, default=200, metavar="N", help="requests in all (default 200)")
    bench.add_argument("--client", default=DEFAULT_CLIENT, help=f"whose API key (default {DEFAULT_CLIENT})")
    bench.add_argument("--tokenizer", help="Hugging Face tokenizer (default: the stack's model.source)")
    bench.add_argument("--name", default="bench", help="the Job's name (default bench)")
    bench.add_argument(
        "--json",
        type=Path,
        metavar="FILE",
        help="the result file (default: bench-<stack>-<mode>-<UTC time>.json here), rewritten after each "
        "point",
    )
    bench.add_argument(
        "--kubeconfig", type=Path, metavar="FILE", help="kubeconfig to use (default: the stack's output)"
    )


def build_parser() -> argparse.ArgumentParser:
    """`python -m ops`: each command adds its own parser (the `_*_parser` functions above)."""
    parser = argparse.ArgumentParser(
        prog="python -m ops",
        description="Render the serving layer offline, or report on and smoke-test a deployed stack.",
        epilog="Exit codes: 0 success, 1 a check failed, 2 usage or configuration error.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in (
        _plan_parser,
        _preflight_parser,
        _render_parser,
        _status_parser,
        _verify_parser,
        _dashboards_parser,
        _summary_parser,
        _bench_parser,
    ):
        add(commands)
    return parser


def compare_parser() -> argparse.ArgumentParser:
    """`python -m ops bench compare`: its own parser, since `bench` itself runs a benchmark."""
    parser = argparse.ArgumentParser(
        prog="python -m ops bench compare",
        description="Compare `ops bench` result files side by side: per concurrency the runs have in "
        "common, each metric of each run, its ratio to the first run, and the better one marked (*). "
        "Refuses runs of different workloads (input or output length, requests, request rate, tokenizer) "
        "unless --force. --plot FILE.html draws throughput per GPU against TTFT and ITL over the sweep, "
        "one line per run, as a self-contained HTML page (needs plotly).",
        epilog="Exit codes: 0 success, 2 usage, unreadable files or different workloads.",
    )
    parser.add_argument("runs", nargs="+", type=Path, metavar="RESULT.json", help="two or more result files")
    parser.add_argument("--force", action="store_true", help="compare runs of different workloads anyway")
    parser.add_argument("--plot", type=Path, metavar="FILE.html", help="also draw the comparison here")
    parser.add_argument(
        "--percentile",
        choices=("p50", "p90", "p99"),
        default="p50",
        help="the latency percentile the picture shows (default p50)",
    )
    return parser


def _concurrencies(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text}: concurrencies as whole numbers, e.g. 1,4,16") from None
    if any(v < 1 for v in values) or len(set(values)) != len(values):
        raise argparse.ArgumentTypeError(f"{text}: distinct concurrencies of at least 1")
    return values


def _ratios(text: str) -> tuple[tuple[int, int], ...]:
    from ops.bench_ratio import parse_ratios

    try:
        return parse_ratios(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _probe_mib(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 4096:
        raise argparse.ArgumentTypeError(f"{value}: 0 (no probe) to 4096 MiB")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text}: a rate above 0")
    return value


def main(
    argv: Sequence[str] | None = None,
    *,
    connect: Connect | None = None,
    run: Runner = subprocess.run,
    clock: Callable[[], float] = time.monotonic,
    popen: Popen = default_popen,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    if words[:2] == ["bench", "compare"]:
        args = compare_parser().parse_args(words[2:])
        args.command = "bench compare"
    else:
        args = build_parser().parse_args(words)  # usage errors exit 2 here
    try:
        if args.command == "bench compare":
            return _bench_compare(args)
        if args.command == "render":
            return _render(args)
        if args.command == "plan":
            return _plan(args)
        if args.command == "preflight":
            return _preflight(args, run)
        if args.command == "bench":
            return _bench(args, connect or _connect_kube, run, sleep)
        if args.command == "dashboards":
            return _dashboards(args, run, popen, sleep)
        if args.command == "summary":
            return _summary(args, run)
        return _against_cluster(args, connect or _connect_kube, run, clock, sleep)
    except ConfigError as error:
        print(f"ops: {error}", file=sys.stderr)
        return 2
    except OpsError as error:
        print(f"ops: error: {error}", file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt:
        print("ops: interrupted", file=sys.stderr)
        return 130


def _summary(args: argparse.Namespace, run: Runner) -> int:
    from ops.summary import outputs_markdown, stack_outputs

    try:
        outputs = stack_outputs(args.stack, args.root, run)
    except RuntimeError as error:  # no stack: it cannot start (no Pulumi CLI is an OpsError)
        print(f"ops: error: {error}", file=sys.stderr)
        return 2
    print(outputs_markdown(args.stack, outputs), end="")
    return 0


def _plan(args: argparse.Namespace) -> int:
    from ops.plan import plan_report
    from ops.stack import load_stack_config

    config = load_stack_config(args.root, args.stack)
    settings = load_settings(config)
    progress(f"running the program for stack {args.stack} under the mocks (a few seconds)")
    sys.stdout.write(
        plan_report(args.stack, settings, config, args.root, reservation_kind=args.reservation_kind)
    )
    return 0


def _bench(args: argparse.Namespace, connect: Connect, run: Runner, sleep: Callable[[float], None]) -> int:
    import datetime
    import json

    from manifests.bench import BenchOptions
    from ops.bench import format_report, format_sweep, run_document, run_sweep, stack_hourly
    from planning import plan_stack

    settings = load_stack_settings(args.root, args.stack)
    if settings.autoscaling.parked:
        raise OpsError(f"stack {args.stack} is parked: nothing serves to load", exit_code=2)
    for flag in ("input_len", "output_len", "concurrency", "requests"):
        if getattr(args, flag) < 1:
            raise OpsError(f"--{flag.replace('_', '-')} must be at least 1", exit_code=2)
    concurrencies = args.sweep or (args.concurrency,)
    plan = plan_stack(settings, stack=args.stack)
    options = BenchOptions(
        input_len=args.input_len,
        output_len=args.output_len,
        concurrency=concurrencies[0],
        requests=args.requests,
        request_rate=args.request_rate,
        client=args.client,
        tokenizer=args.tokenizer,
        name=args.name,
        gateway_namespace=_gateway_namespace(args, settings, run),
    )
    clients = sorted(settings.endpoint.clients)
    if settings.endpoint.enabled and args.client not in clients:
        raise OpsError(f"--client {args.client}: the stack's clients are {', '.join(clients)}", exit_code=2)
    hourly, source = stack_hourly(settings, args.root)
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    path: Path = args.json or Path(f"bench-{args.stack}-{plan.mode}-{stamp}.json")
    if args.ratios:
        return _bench_ratios(args, connect, run, sleep, settings, plan, options, path)

    def save(points: list[Any]) -> None:
        document = run_document(args.stack, settings, plan, options, points, hourly, source, args.label)
        path.write_text(json.dumps(document, indent=2) + "\n")

    with _kubeconfig(args, run) as kubeconfig:
        _credentials_work(kubeconfig, run)
        api = connect(ConnectOptions(kubeconfig, ServiceEndpoint(settings.serving.namespace, "unused")))
        api.check_access()
        points = run_sweep(api, settings, plan.image, options, concurrencies, progress, save, sleep=sleep)
    for point in points:
        print(
            format_report(point.result, replace(options, concurrency=point.concurrency), hourly, source),
            end="",
        )
    if len(points) > 1:
        print(f"sweep of stack {args.stack} ({plan.mode}), {options.requests} requests per point:")
        print(format_sweep(points, hourly), end="")
    progress(f"wrote {path}")
    failed = any(p.result.failed or not p.result.completed for p in points)
    return 1 if failed else 0


def _bench_ratios(
    args: argparse.Namespace,
    connect: Connect,
    run: Runner,
    sleep: Callable[[float], None],
    settings: Any,
    plan: Any,
    options: Any,
    path: Path,
) -> int:
    """`--ratios`: the sweep once per prefill:decode ratio (ops/bench_ratio.py), a result file each
    (`<file>-<P>x<D>.json`), and the comparison of them all."""
    import json

    from ops.bench import format_sweep, run_document, run_sweep, stack_hourly
    from ops.bench_compare import compare_report, load_runs
    from ops.bench_ratio import dashboard_rest, ratio_problems, run_ratio_sweep

    problems = ratio_problems(settings, plan, args.ratios)
    if problems:
        raise OpsError("\n".join(problems), exit_code=2)
    hourly, source = stack_hourly(settings, args.root)
    concurrencies = args.sweep or (args.concurrency,)
    paths: list[Path] = []

    def measure(ratio: tuple[int, int]) -> list[Any]:
        ratio_path = path.with_name(f"{path.stem}-{ratio[0]}x{ratio[1]}{path.suffix or '.json'}")
        named = replace(options, name=f"{options.name}-r{ratio[0]}x{ratio[1]}")

        def save(points: list[Any]) -> None:
            document = run_document(
                args.stack, settings, plan, named, points, hourly, source, args.label, ratio=ratio
            )
            ratio_path.write_text(json.dumps(document, indent=2) + "\n")

        points = run_sweep(api, settings, plan.image, named, concurrencies, progress, save, sleep=sleep)
        paths.append(ratio_path)
        print(f"P:D {ratio[0]}:{ratio[1]}, {options.requests} requests per point:")
        print(format_sweep(points, hourly), end="")
        return points

    with _kubeconfig(args, run) as kubeconfig:
        _credentials_work(kubeconfig, run)
        api = connect(ConnectOptions(kubeconfig, ServiceEndpoint(settings.serving.namespace, "unused")))
        api.check_access()
        measured = run_ratio_sweep(
            dashboard_rest(api, settings),
            settings.serving.application_name,
            args.ratios,
            measure,
            progress,
            sleep,
        )
    for written in paths:
        progress(f"wrote {written}")
    if len(paths) > 1:
        print(compare_report(load_runs(paths)), end="")
    failed = any(p.result.failed or not p.result.completed for _, points in measured for p in points)
    return 1 if failed else 0


def _bench_compare(args: argparse.Namespace) -> int:
    from ops.bench_compare import compare_report, load_runs, write_plot

    runs = load_runs(args.runs)
    print(compare_report(runs, force=args.force), end="")
    if args.plot:
        write_plot(runs, args.plot, args.percentile)
        progress(f"wrote {args.plot}")
    return 0


def _preflight(args: argparse.Namespace, run: Runner) -> int:
    from ops.preflight import format_findings, preflight

    report, code = format_findings(preflight(load_stack_settings(args.root, args.stack), run))
    sys.stdout.write(report)
    return code


def _render(args: argparse.Namespace) -> int:
    from ops.render import render_manifests
    from planning import plan_stack

    settings = load_stack_settings(args.root, args.stack)
    plan = plan_stack(settings, stack=args.stack, account_id=args.account_id)
    if settings.cluster.existing_cluster_name:
        from ipaddress import IPv4Network

        from planning.context import offline_existing

        if not args.vpc_cidr:
            raise OpsError(
                f"Pulumi.{args.stack}.yaml serves on cluster {settings.cluster.existing_cluster_name}: "
                "pass its VPC's ranges with --vpc-cidr (the network policies name them)",
                exit_code=2,
            )
        try:
            cidrs = tuple(str(IPv4Network(c)) for c in args.vpc_cidr)
        except ValueError as error:
            raise OpsError(f"--vpc-cidr: {error}", exit_code=2) from None
        plan = replace(plan, context=offline_existing(settings, cidrs))
        progress(
            "add-ons set to auto are rendered as installed: a preview decides from what the cluster runs"
        )
    elif args.vpc_cidr:
        raise OpsError("--vpc-cidr is for a stack on an existing cluster; this stack makes its own VPC", 2)
    for warning in plan.warnings:
        progress(f"warning: {warning}")
    sys.stdout.write(render_manifests(settings, plan))
    return 0


def _dashboards(args: argparse.Namespace, run: Runner, popen: Popen, sleep: Callable[[float], None]) -> int:
    settings: Settings | None = load_stack_settings(args.root, args.stack) if args.stack else None
    if settings and not settings.observability.enabled:
        raise OpsError(
            f"stack {args.stack} runs no metrics stack (observability.enabled is false)", exit_code=2
        )
    namespace = args.namespace or (settings.serving.namespace if settings else DEFAULT_NAMESPACE)
    name = args.name or (settings.serving.name if settings else DEFAULT_NAME)
    prometheus = _prometheus(args, settings, run)
    chosen = forwards(namespace, name, None if prometheus == stack_prometheus() else prometheus)
    with _kubeconfig(args, run) as kubeconfig:
        from ops.kube import kubeconfig_path

        if not kubeconfig_path(kubeconfig).is_file():
            raise OpsError(
                f"no kubeconfig at {kubeconfig_path(kubeconfig)}: give --stack or --kubeconfig", exit_code=2
            )
        _credentials_work(kubeconfig, run)
        print(describe(chosen, args.stack), flush=True)
        return run_forwards(chosen, kubeconfig, popen, sleep)


def _connect_kube(options: ConnectOptions) -> KubeApi:
    from ops.kube import KubeClient

    return KubeClient(options)


def _serve_service(name: str) -> str:
    """KubeRay's Service in front of the serve application, by the one rule the program also uses."""
    from pydantic import ValidationError

    from manifests.rayservice import serve_service_name

    try:
        serving = ServingConfig.model_validate({"name": name})
    except ValidationError as error:
        message = error.errors(include_url=False)[0]["msg"]
        raise OpsError(f"--name {name!r} is not a RayService name: {message}", exit_code=2) from None
    return serve_service_name(serving.name)


@contextmanager
def _kubeconfig(args: argparse.Namespace, run: Runner) -> Iterator[Path | None]:
    if args.kubeconfig:
        if not args.kubeconfig.is_file():
            raise OpsError(f"no kubeconfig file {args.kubeconfig}", exit_code=2)
        yield args.kubeconfig
    elif args.stack:
        progress(f"reading the kubeconfig of stack {args.stack} (pulumi stack output kubeconfig)")
        with kubeconfig_from_stack(args.stack, args.root, run) as path:
            yield path
    else:
        yield None


def _with_kv_plan(metrics: ServingMetrics | None, settings: Settings, stack: str) -> ServingMetrics | None:
    """The plan's KV path (offline: the catalog's facts, as `ops verify` reads it) beside the live one,
    where prefill and decode move a KV cache."""
    if metrics is None or settings.serving.mode != "disaggregated":
        return metrics
    from manifests.observability.kv_path import KvPathFigures
    from planning import plan_stack

    plan = plan_stack(settings, stack=stack)
    return replace(metrics, plan=KvPathFigures.of(plan))


def _running_cost(root: Path, settings: Settings, running: Mapping[str | None, int]) -> str:
    """From the prices the last preview or up cached (Pulumi's program asks the Price List API)."""
    from planning.cost import PriceCache, planned_zone_count, price_cache_path, price_queries, running_cost

    cache = PriceCache(price_cache_path(root), max_age=None)
    prices = cache.prices(settings.region, [q.key for q in price_queries(settings)])
    return running_cost(settings, prices, planned_zone_count(settings), running)


def _api_key(args: argparse.Namespace, settings: Settings | None, run: Runner) -> str | None:
    """The key of `--client` (else of `default`, else of the first client) from the stack's `apiKeys`
    output; without a stack whose endpoint is on, OPENAI_API_KEY (or none)."""
    if not (settings and settings.endpoint.enabled):
        return os.environ.get(API_KEY_ENV) or None
    progress(f"reading the API keys of stack {args.stack} (pulumi stack output apiKeys)")
    keys = stack_output(args.stack, args.root, "apiKeys", run)
    if not isinstance(keys, dict) or not keys:
        raise OpsError(f"stack {args.stack} has no `apiKeys` output (has `pulumi up` run?)", exit_code=2)
    client = args.client or (DEFAULT_CLIENT if DEFAULT_CLIENT in keys else sorted(keys)[0])
    if client not in keys:
        raise OpsError(f"--client {client}: the stack's clients are {', '.join(sorted(keys))}", exit_code=2)
    return str(keys[client])


def _on_team_cluster(
    args: argparse.Namespace, settings: Settings | None, run: Runner, output: str
) -> str | None:
    """Where (`namespace/name`) a stack on an existing cluster put a Service whose place is the team's
    add-on's: its output `output`. None on the stack's own cluster, where the place is fixed."""
    if not (settings and settings.cluster.existing_cluster_name and args.stack):
        return None
    found = stack_output(args.stack, args.root, output, run)
    if not (isinstance(found, str) and found.count("/") == 1):
        raise OpsError(
            f"stack {args.stack}'s `{output}` output is not namespace/name: {found!r}", exit_code=2
        )
    return found


def _gateway_namespace(args: argparse.Namespace, settings: Settings | None, run: Runner) -> str:
    """Where the endpoint's load balancer Service is: the stack's own Envoy Gateway's namespace, or on a
    team's cluster whatever the stack's `loadBalancerService` output says (its Envoy Gateway's)."""
    from manifests.endpoint.chart import GATEWAY_NAMESPACE

    if not (settings and settings.endpoint.enabled):
        return GATEWAY_NAMESPACE
    found = _on_team_cluster(args, settings, run, "loadBalancerService")
    return found.split("/")[0] if found else GATEWAY_NAMESPACE


def _prometheus(args: argparse.Namespace, settings: Settings | None, run: Runner) -> ServiceEndpoint:
    """The Prometheus that scrapes the stack: its own, or on a team's cluster the one its
    `prometheusService` output names (the team's, where the stack uses it)."""
    from manifests.observability.charts import PROMETHEUS_PORT

    if not (settings and settings.observability.enabled):
        return stack_prometheus()
    found = _on_team_cluster(args, settings, run, "prometheusService")
    if not found:
        return stack_prometheus()
    namespace, service = found.split("/")
    return ServiceEndpoint(namespace, service, PROMETHEUS_PORT)


def _http_route(
    args: argparse.Namespace,
    settings: Settings | None,
    namespace: str,
    name: str,
    key: str | None,
    gateway_namespace: str,
) -> tuple[ServiceEndpoint, dict[str, str], bool]:
    """Where verify's OpenAI requests go (the Service behind the API server's proxy, unless
    --base-url), the headers carrying the key, and whether a gateway checks keys on that way."""
    from manifests.endpoint.gateway import load_balancer_service_name

    if args.base_url:
        return ServiceEndpoint(namespace, _serve_service(name)), _bearer(key), key is not None
    if settings and settings.endpoint.enabled:
        assert key is not None
        gateway = ServiceEndpoint(gateway_namespace, load_balancer_service_name(name), settings.endpoint.port)
        # The API server drops `Authorization` after authenticating with it; the route takes x-api-key too.
        return gateway, {"x-api-key": key}, True
    return ServiceEndpoint(namespace, _serve_service(name)), {}, False


def _bearer(key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"} if key else {}


def _kv_target(args: argparse.Namespace, settings: Settings | None) -> dict[str, Any]:
    """VerifyTarget's KV fields: the NIXL backends, buffer device, mechanism and floor the stack's plan
    chose (offline: the catalog's facts), and the transfer probe; without a stack, LIBFABRIC with GPU
    buffers over EFA by any mechanism, and no floor."""
    from ops.kv_transfer import MIB, ProbeSpec

    connector = True
    if settings is None:
        backends, device, mechanism, floor = ("LIBFABRIC",), "cuda", None, None
    else:
        from planning import plan_stack

        plan = plan_stack(settings, stack=args.stack)
        backends, device = plan.kv_path.backends, plan.kv_path.buffer_device
        mechanism, floor = plan.kv_path.mechanism, plan.kv_floor
        connector = plan.mode == "disaggregated"
    probe = None
    if args.kv_probe_mib:
        block = 4 * MIB if args.kv_probe_mib % 4 == 0 else MIB  # vLLM's blocks are smaller; NIXL splits
        probe = ProbeSpec(
            backends=tuple(backends),
            memory="VRAM" if device == "cuda" else "DRAM",
            blocks=args.kv_probe_mib * MIB // block,
            block_bytes=block,
        )
    return {
        "kv_connector": connector,
        "kv_backends": tuple(backends),
        "kv_buffer_device": device,
        "kv_mechanism": mechanism,
        "kv_probe": probe,
        "kv_floor": floor,
        "kv_floor_override": args.kv_floor,
    }


def _credentials_work(kubeconfig: Path | None, run: Runner) -> None:
    """The kubeconfig's credential plugin first: its failure is one line and exit 2, not a 401 later."""
    from ops.kube import exec_plugin_problem

    problem = exec_plugin_problem(kubeconfig, run)
    if problem:
        raise OpsError(problem, exit_code=2)


def _against_cluster(
    args: argparse.Namespace,
    connect: Connect,
    run: Runner,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
) -> int:
    from ops.status import collect_status, gpu_node_selector
    from ops.verify import VerifyTarget, verify

    settings: Settings | None = load_stack_settings(args.root, args.stack) if args.stack else None
    namespace = args.namespace or (settings.serving.namespace if settings else DEFAULT_NAMESPACE)
    name = args.name or (settings.serving.name if settings else DEFAULT_NAME)
    if args.command == "status":
        with _kubeconfig(args, run) as kubeconfig:
            _credentials_work(kubeconfig, run)
            api = connect(ConnectOptions(kubeconfig, ServiceEndpoint(namespace, _serve_service(name))))
            api.check_access()
            report = collect_status(
                api,
                namespace,
                name,
                progress,
                _gateway_namespace(args, settings, run),
                _prometheus(args, settings, run),
                gpu_node_selector(settings),
            )
            if settings:
                report = replace(
                    report,
                    parked=settings.autoscaling.parked,
                    cost=_running_cost(args.root, settings, Counter(n.side for n in report.gpu_nodes)),
                    metrics=_with_kv_plan(report.metrics, settings, args.stack),
                )
            print(report.format())
            return 0 if report.rayservice is not None or report.parked else 1
    if settings and settings.autoscaling.parked:
        raise OpsError(
            f"stack {args.stack} is parked (autoscaling.parked): no model serves, the endpoint answers 503; "
            "set autoscaling.parked: false and `pulumi up` first"
        )
    with _kubeconfig(args, run) as kubeconfig:
        _credentials_work(kubeconfig, run)
        key = _api_key(args, settings, run)
        gateway_namespace = _gateway_namespace(args, settings, run)
        endpoint, headers, gateway = _http_route(args, settings, namespace, name, key, gateway_namespace)
        api = connect(ConnectOptions(kubeconfig, endpoint, args.base_url, headers))
        api.check_access()
        model = args.model or (settings.model.id if settings else DEFAULT_MODEL)
        via = args.base_url or (
            f"the API server's proxy to svc/{endpoint.service}:{endpoint.port} in {endpoint.namespace}"
        )
        progress(f"verifying {namespace}/{name}, model {model}; HTTP via {via}")
        target = VerifyTarget(
            namespace,
            name,
            model,
            gateway=gateway,
            gpu_selector=gpu_node_selector(settings),
            **_kv_target(args, settings),
        )
        result = verify(api, target, clock=clock, progress=progress, sleep=sleep)
        print(result.format())
        return 0 if result.passed else 1
