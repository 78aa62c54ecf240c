"""Run the Pulumi program (__main__.py) under Pulumi's mocks, offline, against a `World` that answers
every read (world/offline.py), recording what it registers. `ops plan` reports from such a run, and
the tests run every stack this way (tests/fakes/pulumi.py).

No Pulumi CLI, no AWS, no cluster: the engine is pulumi's `MockMonitor`, which `RecordingMonitor`
reads every RegisterResource request from (parents, dependencies, options; `MockResourceArgs` carries
none of them). It also turns resource references in a request into their URNs before the mocks
deserialize it: deserializing references while the program still runs was flaky (pulumi/pulumi#6561,
"attached to a different loop"). `OfflineMocks` gives resources the outputs AWS and the Kubernetes
API would (a kubeconfig, ARNs, an NLB's hostname) and answers the invokes components make (policy
documents, add-on versions, prices from planning/price_snapshot.py); any other invoke fails, so a new
data source cannot quietly return nothing.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib.util
import json
import logging
import os
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
from google.protobuf import json_format, struct_pb2
from pulumi.runtime import mocks as pulumi_mocks
from pulumi.runtime import resource as pulumi_resource
from pulumi.runtime import rpc as pulumi_rpc
from pulumi.runtime import settings as pulumi_settings
from pulumi.runtime import sync_await as pulumi_sync_await
from pulumi.runtime.proto import resource_pb2, source_pb2

from planning.cost import PRICE_CACHE_ENV
from world.reads import World

PROJECT_ROOT = Path(__file__).resolve().parents[1]
PROJECT = "ray-llm-eks"

RESOURCE_SIG = "5cf8f73096256a8f31e491e813e4eb8e"
SECRET_SIG = "1b47061264138c4ac30d75fd1eb44270"
SIG_KEY = "4dabf18193072939515e22adb298388d"
NLB_HOSTNAME = "k8s-envoygat-rayllmga-0123456789-0123456789abcdef.elb.sa-east-1.amazonaws.com"
"""The DNS name the mocked load balancer controller gives every NLB."""


def _fake_prices() -> dict[str, float]:
    from planning.price_snapshot import PRICES

    service = {"eks": "AmazonEKS", "nat": "NAT Gateway", "nlb": "Load Balancer-Network"}
    return {service.get(key, key.removeprefix("ec2:")): price for key, price in PRICES.items()}


FAKE_PRICES = _fake_prices()
"""USD per hour the mocked Price List API answers, in every region: the project's price snapshot
(planning/price_snapshot.py), so any type the catalog knows has a price. A type missing from it gets
"no price", as the real API gives for a type a region does not sell."""


def price_product(service_code: str, filters: dict[str, str]) -> str | None:
    """A Price List product as `get_product` returns it (terms.OnDemand.*.priceDimensions.*), or None."""
    key = (
        filters.get("instanceType") or filters.get("productFamily")
        if service_code != "AmazonEKS"
        else service_code
    )
    if key == "Compute":
        key = service_code
    price = FAKE_PRICES.get(key or "")
    if price is None:
        return None
    sku = "SKU123"
    unit = "Hours" if service_code == "AmazonEKS" else "Hrs"
    return json.dumps(
        {
            "product": {"sku": sku, "attributes": dict(filters)},
            "terms": {
                "OnDemand": {
                    f"{sku}.JRTCKXETXF": {
                        "priceDimensions": {
                            f"{sku}.JRTCKXETXF.6YS6EN2CT7": {
                                "unit": unit,
                                "pricePerUnit": {"USD": f"{price:.10f}"},
                            }
                        }
                    }
                },
                "Reserved": {
                    "x": {"priceDimensions": {"y": {"unit": "Hrs", "pricePerUnit": {"USD": "0.0001"}}}}
                },
            },
        }
    )


@dataclass
class Secret:
    """An input value that travelled as a Pulumi secret."""

    value: Any


@dataclass
class Registration:
    type: str
    name: str
    urn: str
    parent: str
    dependencies: list[str]
    property_dependencies: dict[str, list[str]]
    provider: str
    delete_before_replace: bool
    retain_on_delete: bool
    protect: bool
    ignore_changes: list[str]
    replace_on_changes: list[str]
    custom_timeouts: dict[str, str]
    aliases: list[dict[str, Any]]
    custom: bool
    inputs: dict[str, Any]
    import_id: str = ""
    """What `import` adopts: a resource the stack would then own, and `destroy` delete."""


def _plain(value: Any) -> Any:
    """Struct values -> Python, resource references -> URN, secrets -> Secret(value)."""
    if isinstance(value, dict):
        sig = value.get(SIG_KEY)
        if sig == RESOURCE_SIG:
            return value["urn"]
        if sig == SECRET_SIG:
            return Secret(_plain(value.get("value")))
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _has_refs(value: Any) -> bool:
    if isinstance(value, dict):
        return value.get(SIG_KEY) == RESOURCE_SIG or any(_has_refs(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_refs(v) for v in value)
    return False


class _NotPlainError(Exception):
    """A value the SDK's serializer must see (an Output, a resource, an asset)."""


def _as_struct_value(value: Any) -> Any:
    """`value` as pulumi's `serialize_property` gives plain data (a tuple as a list, a None inside
    kept), or _NotPlainError."""
    kind = type(value)
    if kind is dict:
        return {k: _as_struct_value(v) for k, v in value.items()}
    if kind is list or kind is tuple:
        return [_as_struct_value(v) for v in value]
    if kind is str or kind is bool or kind is int or kind is float or value is None:
        return value
    raise _NotPlainError(kind)


def plain_state(state: dict[str, Any]) -> struct_pb2.Struct:
    """The Struct pulumi's `serialize_properties` makes of a resource's state that is plain data (a
    property that is None dropped), without its trip through the event loop; _NotPlainError if not."""
    struct = struct_pb2.Struct()
    for key, value in state.items():
        if value is not None:
            struct[key] = _as_struct_value(value)
    return struct


def _refs_to_urns(value: Any) -> Any:
    if isinstance(value, dict):
        if value.get(SIG_KEY) == RESOURCE_SIG:
            return value["urn"]
        return {k: _refs_to_urns(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_refs_to_urns(v) for v in value]
    return value


class RecordingMonitor(pulumi_mocks.MockMonitor):
    def __init__(self, mocks: pulumi_mocks.Mocks):
        super().__init__(mocks)
        self.registrations: list[Registration] = []

    def RegisterResource(self, request):  # noqa: N802 (gRPC method name)
        raw = json_format.MessageToDict(request.object)
        urn = self.make_urn(request.parent, request.type, request.name)
        if request.type != "pulumi:pulumi:Stack":
            self.registrations.append(
                Registration(
                    type=request.type,
                    name=request.name,
                    urn=urn,
                    parent=request.parent,
                    dependencies=list(request.dependencies),
                    property_dependencies={k: list(v.urns) for k, v in request.propertyDependencies.items()},
                    provider=request.provider,
                    delete_before_replace=request.deleteBeforeReplace,
                    retain_on_delete=request.retainOnDelete,
                    protect=request.protect,
                    ignore_changes=list(request.ignoreChanges),
                    replace_on_changes=list(request.replaceOnChanges),
                    custom_timeouts=json_format.MessageToDict(request.customTimeouts),
                    aliases=[json_format.MessageToDict(a) for a in request.aliases],
                    custom=request.custom,
                    inputs=_plain(raw),
                    import_id=request.importId,
                )
            )
        if _has_refs(raw):  # rewritten only where there is a reference (a rewrite is a sixth of a run)
            request.object.Clear()
            request.object.update(_refs_to_urns(raw))
        if request.type == "pulumi:pulumi:Stack":
            return super().RegisterResource(request)
        # pulumi's MockMonitor.RegisterResource, but the state the mocks return goes into the response
        # as it is where it is plain data (nearly always): the SDK's serializer would await every value
        # of it through the event loop, a tenth of a run, to the same Struct.
        pulumi_sync_await._ensure_event_loop()
        inputs = pulumi_rpc.deserialize_properties(request.object)
        id_, state = self.mocks.new_resource(
            pulumi_mocks.MockResourceArgs(
                typ=request.type,
                name=request.name,
                inputs=inputs,
                provider=request.provider,
                resource_id=request.importId,
                custom=request.custom or False,
                transforms=pulumi_mocks._resolve_callbacks(request.transforms),
            )
        )
        id_ = id_ or ""  # the response's id where the mocks give none: proto3's unset string
        try:
            response = plain_state(state)
        except _NotPlainError:
            response = pulumi_sync_await._sync_await(pulumi_rpc.serialize_properties(state, {}))
        self.resources[urn] = pulumi_mocks.MockMonitor.ResourceRegistration(urn, id_, state)
        return resource_pb2.RegisterResourceResponse(urn=urn, id=id_, object=response)


def mock_id(type_: str, name: str) -> str:
    """The id the mocks give a resource: its type's short name and its name (`subnet/network-private-x`),
    so a subnet and a route table of the same name never share an id."""
    return f"{type_.rsplit(':', 1)[-1][0].lower()}{type_.rsplit(':', 1)[-1][1:]}/{name}"


ARN_OF = {
    "aws:iam/role:Role": "arn:aws:iam::123456789012:role/{name}",
    "aws:kms/key:Key": "arn:aws:kms:{region}:123456789012:key/{name}",
    "aws:s3/bucket:Bucket": "arn:aws:s3:::{name}",
    "aws:cloudwatch/logGroup:LogGroup": "arn:aws:logs:{region}:123456789012:log-group:{name}",
}
"""The ARN the mocked AWS gives each kind of resource it creates (its name stands in for an id)."""


class OfflineMocks(pulumi_mocks.Mocks):
    """What AWS and the Kubernetes API give the resources the program creates, and the answers to
    the invokes its components make."""

    def __init__(self, region: str, outputs: dict[str, Any] | None = None):
        """`outputs`: the stack's outputs as its last deployment left them (what a StackReference to
        itself reads; none before the first)."""
        self.region = region
        self.outputs = outputs or {}
        self.calls: list[tuple[str, dict]] = []
        self.transforms: dict[str, list[Any]] = {}
        """Resource name -> the transforms it declared (the mock monitor does not run them)."""
        self.run: StackRun | None = None
        """The run these mocks serve, also when the program raised (nothing registered then)."""

    def new_resource(self, args: pulumi_mocks.MockResourceArgs):
        if args.transforms:
            self.transforms[args.name] = list(args.transforms)
        if args.typ == "pulumi:pulumi:StackReference":
            return args.resource_id, {"name": args.inputs.get("name"), "outputs": self.outputs}
        outputs = dict(args.inputs)
        if args.typ == "eks:index:Cluster":
            kubeconfig = {"apiVersion": "v1", "kind": "Config", "clusters": [{"name": args.name}]}
            outputs.update(
                kubeconfig=kubeconfig,
                kubeconfigJson=json.dumps(kubeconfig),
                oidcProviderArn=f"arn:aws:iam::123456789012:oidc-provider/oidc.eks.example/id/{args.name}",
                oidcIssuer=f"oidc.eks.example/id/{args.name}",
                clusterSecurityGroupId="sg-cluster",
            )
        elif args.typ == "kubernetes:core/v1:Service" and args.inputs["spec"].get("type") == "LoadBalancer":
            # What the load balancer controller writes back once the NLB exists (pulumi-kubernetes waits).
            outputs["status"] = {"loadBalancer": {"ingress": [{"hostname": NLB_HOSTNAME}]}}
        elif args.typ == "random:index/randomPassword:RandomPassword":
            # As the provider: `length` characters, new ones whenever a keeper changes.
            seed = f"{args.name}-{json.dumps(args.inputs.get('keepers'), sort_keys=True)}"
            outputs["result"] = hashlib.sha256(seed.encode()).hexdigest()[: int(args.inputs["length"])]
        elif args.typ == "aws:ec2/launchTemplate:LaunchTemplate":
            outputs.update(latestVersion=1, defaultVersion=1)
        elif args.typ in ARN_OF:
            # ARNs as AWS forms them, so the IAM checks can match them against each action's resources.
            given = args.inputs.get("bucket") or args.inputs.get("name") or args.name
            outputs.update(arn=ARN_OF[args.typ].format(region=self.region, name=given), name=args.name)
        return mock_id(args.typ, args.name), outputs

    def call(self, args: pulumi_mocks.MockCallArgs):
        self.calls.append((args.token, dict(args.args)))
        answer = self.answer(args.token, dict(args.args))
        if answer is None:
            raise NotImplementedError(f"the offline run does not answer the invoke {args.token}")
        return answer

    def answer(self, token: str, given: dict[str, Any]) -> tuple[dict[str, Any], list[Any]] | None:
        """The invoke's answer, or None for one this engine does not know."""
        if token == "aws:iam/getPolicyDocument:getPolicyDocument":
            document = json.dumps({"Statement": given.get("statements")})
            return {"id": "policy", "json": document}, []
        if token == "aws:eks/getAddonVersion:getAddonVersion":
            minor = given["kubernetesVersion"]
            return {
                "id": given["addonName"],
                "addonName": given["addonName"],
                "kubernetesVersion": minor,
                "version": f"v1.12.1-eksbuild.{minor.split('.')[1]}",
            }, []
        if token == "aws:pricing/getProduct:getProduct":
            filters = {f["field"]: f["value"] for f in given["filters"]}
            product = price_product(given["serviceCode"], filters)
            if product is None:  # as the API: no product matched
                return {}, [("filters", "Pricing product query did not return any elements")]
            return {"id": "product", "result": product, "serviceCode": given["serviceCode"]}, []
        return None


@dataclass
class StackRun:
    registrations: list[Registration]
    exports: dict[str, Any] = field(default_factory=dict)
    secret_exports: set[str] = field(default_factory=set)
    calls: list[tuple[str, dict]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    """What the program logged at warning level (what `pulumi preview` shows as warnings)."""
    infos: list[str] = field(default_factory=list)
    """What it logged at info level (what `pulumi preview` prints as diagnostics)."""
    transforms: dict[str, list[Any]] = field(default_factory=dict)
    """Resource name -> the transforms it declared, to run in tests on what a component's child gets."""

    def of_type(self, type_: str) -> list[Registration]:
        return [r for r in self.registrations if r.type == type_]

    def one(self, type_: str, name: str | None = None) -> Registration:
        found = [r for r in self.of_type(type_) if name is None or r.name == name]
        assert len(found) == 1, f"expected one {type_} {name or ''}, got {[r.name for r in found]}"
        return found[0]

    def id_of(self, reg: Registration) -> str:
        return mock_id(reg.type, reg.name)

    def by_urn(self, urn: str) -> Registration:
        return next(r for r in self.registrations if r.urn == urn)

    def ancestors(self, reg: Registration) -> list[Registration]:
        chain = []
        while reg.parent and "::pulumi:pulumi:Stack::" not in reg.parent:
            parents = [r for r in self.registrations if r.urn == reg.parent]
            if not parents:
                break
            reg = parents[0]
            chain.append(reg)
        return chain


def as_engine_config(config: dict[str, Any]) -> dict[str, str]:
    """Stack-file values as the engine hands them to the program: objects as JSON strings."""
    return {k: v if isinstance(v, str) else json.dumps(v) for k, v in config.items()}


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.INFO)
        self.warnings: list[str] = []
        self.infos: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        (self.warnings if record.levelno >= logging.WARNING else self.infos).append(record.getMessage())


# The SDK walks the Python stack at every registration to tell the engine where the resource was
# declared (for its error messages); the mocks discard it, and it is a sixth of a stack run's time.
pulumi_resource._get_stack_trace = source_pb2.StackTrace  # type: ignore[assignment]


class _InlineLoop(asyncio.SelectorEventLoop):
    """The SDK sends every engine call (register, invoke) through `run_in_executor`, to keep the event
    loop free while a real engine answers over gRPC. The mocks answer at once in this thread, so the
    call runs inline: a thread hop per resource was half of a stack run's time."""

    def run_in_executor(self, executor: Any, func: Any, *args: Any) -> asyncio.Future[Any]:
        future = self.create_future()
        try:
            future.set_result(func(*args))
        except BaseException as error:  # handed to whoever awaits it, as the executor would
            future.set_exception(error)
        return future


_PROGRAM: Any = None


def program() -> Any:
    """__main__.py as a module (loaded once: its imports are most of a first run's time)."""
    global _PROGRAM
    if _PROGRAM is None:
        spec = importlib.util.spec_from_file_location("stack_program", PROJECT_ROOT / "__main__.py")
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = (
            module  # as Python registers `__main__` (dataclasses look themselves up there)
        )
        spec.loader.exec_module(module)
        _PROGRAM = module
    return _PROGRAM


def run_offline(
    values: dict[str, Any],
    *,
    stack: str,
    world: World,
    secrets: dict[str, Any] | None = None,
    mocks: OfflineMocks | None = None,
    price_cache: Path | None = None,
) -> StackRun:
    """__main__.main(world) for a stack's config values (secrets among them by key), under the mocks.
    The program's own refusal (a ConfigError) propagates, as a preview prints it. The prices the
    mocked Price List API gives go to `price_cache` (a fresh temporary file by default), never to the
    project's cache, which holds what real previews saw."""
    previous = os.environ.get(PRICE_CACHE_ENV)
    os.environ[PRICE_CACHE_ENV] = str(price_cache or Path(tempfile.mkdtemp()) / "prices.json")
    try:
        return _run(values, stack=stack, world=world, secrets=secrets, mocks=mocks)
    finally:
        if previous is None:
            os.environ.pop(PRICE_CACHE_ENV, None)
        else:
            os.environ[PRICE_CACHE_ENV] = previous


def _run(
    values: dict[str, Any],
    *,
    stack: str,
    world: World,
    secrets: dict[str, Any] | None,
    mocks: OfflineMocks | None,
) -> StackRun:
    region = str(values.get("aws:region"))
    mocks = mocks or OfflineMocks(region)
    asyncio.set_event_loop(_InlineLoop())
    pulumi_settings.ROOT.set(None)
    monitor = RecordingMonitor(mocks)
    logger = logging.getLogger(f"stack-run-{id(mocks)}")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    capture = _Capture()
    logger.handlers = [capture]
    pulumi.runtime.set_mocks(
        mocks, project=PROJECT, stack=stack, preview=False, monitor=monitor, logger=logger
    )
    pulumi.runtime.set_all_config(as_engine_config(values), list((secrets or {}).keys()))
    stack_program = program()
    run = StackRun(
        registrations=monitor.registrations,
        calls=mocks.calls,
        warnings=capture.warnings,
        infos=capture.infos,
        transforms=mocks.transforms,
    )
    mocks.run = run

    @pulumi.runtime.test
    def registered():
        stack_program.main(world)
        root = pulumi_settings.get_root_resource()
        outputs: dict[str, Any] = dict(getattr(root, "outputs", {}) or {})
        resolved = {k: pulumi.Output.from_input(v) for k, v in outputs.items()}

        async def secrecy():
            return {k for k, v in resolved.items() if await v.is_secret()}

        def store(values: dict[str, Any]):
            run.exports.update(values)

        return pulumi.Output.all(
            pulumi.Output.all(**resolved).apply(store),
            pulumi.Output.from_input(asyncio.ensure_future(secrecy())).apply(run.secret_exports.update),
        )

    registered()
    return run
