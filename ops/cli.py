"""The `python -m ops` command line: argument parsing, defaults from the stack file, exit codes.

Exit codes: 0 success, 1 a check failed or the cluster answered badly, 2 the command could not start
(usage, stack config, kubeconfig, pulumi CLI). Reports go to stdout, progress and errors to stderr, so
`python -m ops render --stack dev > serving.yaml` stays clean. The cluster and the clock are
parameters of `main` so the tests drive the real command line against recorded responses.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from config.serving import ModelConfig, ServingConfig
from config.settings import ConfigError, Settings
from ops.kube import ConnectOptions, KubeApi, OpsError, ServiceEndpoint
from ops.stack import PROJECT_ROOT, Runner, kubeconfig_from_stack, load_stack_settings

Connect = Callable[[ConnectOptions], KubeApi]

# The project's defaults, for commands run without --stack: read from the config models, not repeated.
DEFAULT_NAMESPACE: str = ServingConfig.model_fields["namespace"].default
DEFAULT_NAME: str = ServingConfig.model_fields["name"].default
DEFAULT_MODEL: str = ModelConfig.model_fields["id"].default


def progress(message: str) -> None:
    print(f"ops: {message}", file=sys.stderr, flush=True)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m ops",
        description="Render the serving layer offline, or report on and smoke-test a deployed stack.",
        epilog="Exit codes: 0 success, 1 a check failed, 2 usage or configuration error.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    root_help = f"directory holding Pulumi.yaml and the stack files (default: {PROJECT_ROOT})"

    render = commands.add_parser(
        "render",
        help="print the serving Namespace and RayService as YAML, exactly as `pulumi up` creates them",
        description="Print, offline, the serving Namespace and RayService of a stack as multi-document "
        "YAML: the same functions the Pulumi program calls, so this is what `pulumi up` applies.",
    )
    render.add_argument("--stack", required=True, metavar="NAME", help="stack name: reads Pulumi.NAME.yaml")
    render.add_argument("--root", type=Path, default=PROJECT_ROOT, metavar="DIR", help=root_help)
    render.add_argument(
        "--account-id",
        metavar="ID",
        help="the stack's AWS account, which names the model cache's bucket (default: shown as <account-id>)",
    )

    status = commands.add_parser(
        "status",
        help="RayService and application status, Ray pods and their nodes, GPU/EFA capacity",
        description="Show the RayService's Ready condition, its deprecated serviceStatus and each serve "
        "application's status; every Ray pod with its node and phase; and each GPU node's allocatable "
        "nvidia.com/gpu and vpc.amazonaws.com/efa. Exits 1 when the RayService does not exist.",
    )
    verify = commands.add_parser(
        "verify",
        help="smoke test after `pulumi up`: models, a streamed chat, NIXL over EFA, GPU/EFA capacity",
        description="Check that GET /v1/models lists the model, that a streamed chat completion returns "
        "text (reporting time to first token and tokens/s), that every Ray worker's logs show NIXL's "
        "LIBFABRIC backend and no UCX, and that every GPU node offers nvidia.com/gpu and "
        "vpc.amazonaws.com/efa. HTTP goes through the Kubernetes API server's service proxy unless "
        "--base-url is given. Exits 1 if any check fails.",
    )
    for sub in (status, verify):
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
        sub.add_argument("--root", type=Path, default=PROJECT_ROOT, metavar="DIR", help=root_help)
    verify.add_argument(
        "--base-url",
        metavar="URL",
        help="call the OpenAI API here instead of through the API server, e.g. http://127.0.0.1:8000/v1 "
        "after `kubectl port-forward -n inference svc/ray-llm-serve-svc 8000:8000`",
    )
    verify.add_argument(
        "--model", metavar="ID", help=f"model id (default: the stack's, else {DEFAULT_MODEL})"
    )
    return parser


def main(
    argv: Sequence[str] | None = None,
    *,
    connect: Connect | None = None,
    run: Runner = subprocess.run,
    clock: Callable[[], float] = time.monotonic,
) -> int:
    args = build_parser().parse_args(argv)  # usage errors exit 2 here
    try:
        if args.command == "render":
            return _render(args)
        return _against_cluster(args, connect or _connect_kube, run, clock)
    except ConfigError as error:
        print(f"ops: {error}", file=sys.stderr)
        return 2
    except OpsError as error:
        print(f"ops: error: {error}", file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt:
        print("ops: interrupted", file=sys.stderr)
        return 130


def _render(args: argparse.Namespace) -> int:
    from ops.render import render_manifests
    from planning import plan_stack

    settings = load_stack_settings(args.root, args.stack)
    plan = plan_stack(settings, stack=args.stack, account_id=args.account_id)
    for warning in plan.warnings:
        progress(f"warning: {warning}")
    sys.stdout.write(render_manifests(settings, plan))
    return 0


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


def _against_cluster(
    args: argparse.Namespace, connect: Connect, run: Runner, clock: Callable[[], float]
) -> int:
    from ops.status import collect_status
    from ops.verify import VerifyTarget, verify

    settings: Settings | None = load_stack_settings(args.root, args.stack) if args.stack else None
    namespace = args.namespace or (settings.serving.namespace if settings else DEFAULT_NAMESPACE)
    name = args.name or (settings.serving.name if settings else DEFAULT_NAME)
    endpoint = ServiceEndpoint(namespace, _serve_service(name))
    base_url = getattr(args, "base_url", None)
    with _kubeconfig(args, run) as kubeconfig:
        api = connect(ConnectOptions(kubeconfig, endpoint, base_url))
        if args.command == "status":
            report = collect_status(api, namespace, name, progress)
            print(report.format())
            return 0 if report.rayservice is not None else 1
        model = args.model or (settings.model.id if settings else DEFAULT_MODEL)
        via = base_url or f"the API server's proxy to svc/{endpoint.service}:{endpoint.port} in {namespace}"
        progress(f"verifying {namespace}/{name}, model {model}; HTTP via {via}")
        result = verify(api, VerifyTarget(namespace, name, model), clock=clock, progress=progress)
        print(result.format())
        return 0 if result.passed else 1
