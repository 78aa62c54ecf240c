"""Run the real Pulumi program (__main__.py) under Pulumi mocks and record what it registers.

`MockResourceArgs` carries no parent, dependencies or options, so `RecordingMonitor` reads every
RegisterResource request itself. It also turns resource references in a request into their URNs
before the mocks deserialize it: deserializing references while the program still runs was flaky
(pulumi/pulumi#6561, "attached to a different loop").

The AWS invokes the program makes are answered here; any other invoke fails the test, so a new data
source cannot quietly return nothing.
"""

from __future__ import annotations

import asyncio
import gc
import hashlib
import importlib.util
import json
import logging
import os
import sys
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pulumi
import yaml
from google.protobuf import json_format
from pulumi.runtime import mocks as pulumi_mocks
from pulumi.runtime import resource as pulumi_resource
from pulumi.runtime import settings as pulumi_settings
from pulumi.runtime.proto import source_pb2

from config.base import load_yaml
from tests.fakes.capacity import NOW as MOCKED_NOW
from tests.fakes.capacity import describe as describe_reservations
from tests.fakes.existing import TeamCluster, description, team_inventory

ROOT = Path(__file__).resolve().parents[2]
STACK_FILES = sorted(p.name.removeprefix("Pulumi.").removesuffix(".yaml") for p in ROOT.glob("Pulumi.*.yaml"))
"""Every stack file's stack name, yours included: tests parametrize over these, never a hand-kept list."""


def _config_problem(stack: str) -> str | None:
    """Why a stack file's config is refused (the loader's own message), or None."""
    from config import ConfigError, load_settings

    try:
        load_settings(yaml.safe_load((ROOT / f"Pulumi.{stack}.yaml").read_text())["config"])
    except ConfigError as error:
        return str(error)
    except (KeyError, TypeError, yaml.YAMLError) as error:
        return f"not a stack file (a top-level `config:` map): {error}"
    return None


REFUSED_STACKS = {stack: problem for stack in STACK_FILES if (problem := _config_problem(stack))}
"""Stack files the config loader refuses: one test names each with the loader's message
(tests/test_stack.py), instead of every stack test failing on it."""
STACKS = [stack for stack in STACK_FILES if stack not in REFUSED_STACKS]
"""The stack files the program runs for: what the stack tests parametrize over."""
PROJECT = "ray-llm-eks"
RESOURCE_SIG = "5cf8f73096256a8f31e491e813e4eb8e"
SECRET_SIG = "1b47061264138c4ac30d75fd1eb44270"
SIG_KEY = "4dabf18193072939515e22adb298388d"
EC2_INSTANCE_TYPES: dict[str, dict[str, Any]] = json.loads(
    (ROOT / "tests" / "fixtures" / "ec2" / "instance-types.json").read_text()
)
"""DescribeInstanceTypes' real answers for the types the tests use (tests/fixtures/ec2/README.md)."""
CALLER_ARN = "arn:aws:sts::123456789012:assumed-role/deployer/ci-session"
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


"""Who runs `pulumi up` in the mocked world (STS GetCallerIdentity)."""

# Zones that offer each instance type in the mocked world, per region (sa-east-1c lacks g6.8xlarge);
# any other region offers every type in its zones a, b and c (StackMocks `any_region`).
DEFAULT_OFFERINGS = {
    "sa-east-1": {
        "g6.8xlarge": ["sa-east-1a", "sa-east-1b"],
        "g6e.8xlarge": ["sa-east-1a", "sa-east-1b"],
        "g6e.12xlarge": ["sa-east-1a", "sa-east-1b"],
    },
    "us-east-1": {
        "g6.8xlarge": ["us-east-1a", "us-east-1b", "us-east-1c", "us-east-1d"],
        "p5.48xlarge": ["us-east-1a", "us-east-1b"],
    },
}


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
        request.object.Clear()
        request.object.update(_refs_to_urns(raw))
        return super().RegisterResource(request)


def catalog_answer(name: str) -> dict[str, Any] | None:
    """EC2's answer synthesized from planning/catalog.py, for catalogued types the fixture lacks (the
    hardware-class tests use the fixture's real figures)."""
    from planning.catalog import CATALOG

    spec = CATALOG.get(name)
    if spec is None:
        return None
    gpus = [
        {
            "name": spec.gpu_model,
            "manufacturer": "NVIDIA",
            "count": spec.gpus,
            "memorySize": round(spec.gpu_memory_gb * 1e9 / 2**20),
        }
    ]
    answer = {
        "id": name,
        "defaultVcpus": spec.vcpu,
        "memorySize": spec.memory_gib * 1024,
        "efaSupported": spec.has_efa,
    }
    answer["gpuses"] = gpus if spec.has_gpu else []
    if spec.has_efa:
        answer["efaMaximumInterfaces"] = spec.efa_interfaces
    return answer


@dataclass
class AwsState:
    """What exists in the mocked AWS account before the run: the stack's VPC (by its tags) and the EKS
    clusters of the region. Empty: a first `up`."""

    vpc_tags: dict[str, str] | None = None
    clusters: list[str] = field(default_factory=list)
    caller_arn: str = CALLER_ARN
    instance_types: dict[str, dict[str, Any]] = field(default_factory=lambda: dict(EC2_INSTANCE_TYPES))
    """What EC2 says about each instance type (DescribeInstanceTypes)."""
    outputs: dict[str, Any] = field(default_factory=dict)
    """The stack's outputs as its last deployment left them (what a StackReference to itself reads)."""
    team: TeamCluster | None = field(default_factory=TeamCluster)
    """A team's cluster in the region (tests/fakes/existing.py), for `cluster.existingClusterName`."""
    efa_group_tags: dict[str, str] | None = None
    """An existing-cluster stack's record, on its EFA security group (its tags after an `up`)."""
    reservations: tuple[dict[str, Any], ...] = ()
    """EC2 capacity reservations of the account (tests/fakes/capacity.py), DescribeCapacityReservations'
    items."""
    resource_groups: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Resource group ARN -> the IDs of the capacity reservations in it."""


def deployed(run: StackRun, before: AwsState | None = None) -> AwsState:
    """The AWS account as `run` would have left it: its VPC with the tags it set, its cluster; or, on a
    team's cluster (as `before` had it), its EFA security group with the record it carries."""
    groups = [r for r in run.of_type("aws:ec2/securityGroup:SecurityGroup") if r.name.endswith("-efa")]
    if groups:
        start = before or AwsState()
        return replace(start, efa_group_tags=dict(groups[0].inputs["tags"]), outputs=dict(run.exports))
    vpc = run.one("aws:ec2/vpc:Vpc").inputs["tags"]
    clusters = [run.one("eks:index:Cluster").inputs["name"]]
    return AwsState(vpc_tags=dict(vpc), clusters=clusters, outputs=dict(run.exports))


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


class StackMocks(pulumi_mocks.Mocks):
    def __init__(
        self,
        offerings: dict[str, dict[str, list[str]]],
        aws: AwsState,
        region: str = "sa-east-1",
        any_region: bool = False,
    ):
        """`any_region`: a region `offerings` does not model offers every type in its zones a, b and c
        (how a stack file for any region runs in the mocked world)."""
        self.offerings = offerings
        self.any_region = any_region
        self.aws = aws
        self.region = region
        self.calls: list[tuple[str, dict]] = []
        self.transforms: dict[str, list[Any]] = {}
        """Resource name -> the transforms it declared (the mock monitor does not run them)."""

    def new_resource(self, args: pulumi_mocks.MockResourceArgs):
        if args.transforms:
            self.transforms[args.name] = list(args.transforms)
        if args.typ == "pulumi:pulumi:StackReference":
            return args.resource_id, {"name": args.inputs.get("name"), "outputs": self.aws.outputs}
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

    def _team_call(self, token: str, given: dict[str, Any]) -> tuple[dict[str, Any], list[Any]] | None:
        """EKS and EC2 on a team's cluster (tests/fakes/existing.py); None for any other invoke."""
        team = self.aws.team
        missing = ("name", "ResourceNotFoundException: No cluster found")
        if token == "aws:eks/getCluster:getCluster":
            if team is None or given["name"] != team.name:
                return {}, [missing]
            return team.describe(), []
        if team is None:
            return None
        if token == "aws:ec2/getRouteTables:getRouteTables":
            ids = list(team.route_tables()) if given.get("vpcId") == team.vpc_id else []
            return {"id": "route-tables", "ids": ids}, []
        if token == "aws:ec2/getRouteTable:getRouteTable":
            return team.route_tables()[given["routeTableId"]], []
        if token == "aws:ec2/getSubnets:getSubnets":
            (wanted,) = given["filters"]
            assert wanted["name"] == "vpc-id"
            ids = [s.id for s in team.subnets] if team.vpc_id in wanted["values"] else []
            return {"id": "subnets", "ids": ids}, []
        if token == "aws:ec2/getSubnet:getSubnet":
            found = team.subnet(given["id"])
            return (found, []) if found else ({}, [("id", "InvalidSubnetID.NotFound")])
        if token == "aws:eks/getAddon:getAddon":
            found = team.addon(given["addonName"])
            return (found, []) if found else ({}, [("addonName", "ResourceNotFoundException: No addon")])
        if token == "aws:eks/getAccessEntry:getAccessEntry":
            tags = team.access_entries.get(given["principalArn"])
            if tags is None:
                return {}, [("principalArn", "ResourceNotFoundException: no access entry")]
            return {"id": given["principalArn"], "principalArn": given["principalArn"], "tags": tags}, []
        if token == "aws:ec2/getSecurityGroups:getSecurityGroups":
            tags = self.aws.efa_group_tags or {}
            wanted = {f["name"].removeprefix("tag:"): f["values"] for f in given.get("filters") or []}
            found = bool(tags) and all(tags.get(k) in v for k, v in wanted.items())
            return {"id": "groups", "ids": ["sg-0ef0ef0ef0ef0ef00"] if found else []}, []
        if token == "aws:ec2/getSecurityGroup:getSecurityGroup":
            return {"id": given["id"], "tags": self.aws.efa_group_tags or {}}, []
        return None

    def call(self, args: pulumi_mocks.MockCallArgs):
        self.calls.append((args.token, dict(args.args)))
        if args.token == "aws:ec2/getInstanceTypeOfferings:getInstanceTypeOfferings":
            wanted = args.args["filters"][0]["values"][0]
            region = args.args["region"]
            if self.any_region and region not in self.offerings:
                zones = [f"{region}{letter}" for letter in "abc"]
            else:
                zones = self.offerings.get(region, {}).get(wanted, [])
            result = {
                "id": "offerings",
                "locations": zones,
                "locationTypes": ["availability-zone"] * len(zones),
                "instanceTypes": [wanted] * len(zones),
            }
            return result, []
        if args.token == "aws:iam/getPolicyDocument:getPolicyDocument":
            document = json.dumps({"Statement": args.args.get("statements")})
            return {"id": "policy", "json": document}, []
        if args.token == "aws:index/getCallerIdentity:getCallerIdentity":
            return {
                "id": "123456789012",
                "accountId": "123456789012",
                "arn": self.aws.caller_arn,
                "userId": "AROA:x",
            }, []
        if args.token == "aws:iam/getSessionContext:getSessionContext":
            # As AWS answers: an assumed role's session names its role; other ARNs pass through.
            arn = args.args["arn"]
            _, partition, _, _, account, resource = arn.split(":", 5)
            if resource.startswith("assumed-role/"):
                name = resource.split("/")[1]
                return {"id": arn, "arn": arn, "issuerArn": f"arn:{partition}:iam::{account}:role/{name}"}, []
            return {"id": arn, "arn": arn, "issuerArn": arn}, []
        if args.token == "aws:ec2/getVpcs:getVpcs":
            (wanted,) = args.args["filters"]
            tags = self.aws.vpc_tags or {}
            key = wanted["name"].removeprefix("tag:")
            found = ["vpc-deployed"] if tags.get(key) in wanted["values"] else []
            return {"id": args.args["region"], "ids": found}, []
        if args.token == "aws:ec2/getVpc:getVpc":
            team = self.aws.team
            if team and args.args["id"] == team.vpc_id:
                return team.vpc(), []
            assert args.args["id"] == "vpc-deployed"
            return {"id": "vpc-deployed", "tags": self.aws.vpc_tags}, []
        answer = self._team_call(args.token, dict(args.args))
        if answer is not None:
            return answer
        if args.token == "aws:ec2/getInstanceType:getInstanceType":
            name = args.args["instanceType"]
            answer = self.aws.instance_types.get(name) or catalog_answer(name)
            if answer is None:  # as EC2 refuses it; the SDK raises it in the program
                return {}, [("instanceType", f"InvalidInstanceType: {name} does not exist")]
            return answer, []
        if args.token == "aws:eks/getAddonVersion:getAddonVersion":
            minor = args.args["kubernetesVersion"]
            return {
                "id": args.args["addonName"],
                "addonName": args.args["addonName"],
                "kubernetesVersion": minor,
                "version": f"v1.12.1-eksbuild.{minor.split('.')[1]}",
            }, []
        if args.token == "aws:pricing/getProduct:getProduct":
            filters = {f["field"]: f["value"] for f in args.args["filters"]}
            product = price_product(args.args["serviceCode"], filters)
            if product is None:  # as the API: no product matched
                return {}, [("filters", "Pricing product query did not return any elements")]
            return {"id": "product", "result": product, "serviceCode": args.args["serviceCode"]}, []
        if args.token == "aws:eks/getClusters:getClusters":
            return {"id": args.args["region"], "names": self.aws.clusters}, []
        raise NotImplementedError(f"the tests do not mock the invoke {args.token}")


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


YOUR_ADDRESS = "1.2.3.4/32"
"""Who may reach the API endpoint in a minimal stack file."""


def minimal_config(region: str, **sections: dict[str, Any]) -> dict[str, Any]:
    """The least a stack file must say: its region, and who may reach the public API endpoint."""
    config: dict[str, Any] = {
        "aws:region": region,
        f"{PROJECT}:cluster": {"publicAccessCidrs": [YOUR_ADDRESS]},
    }
    for section, values in sections.items():
        config[f"{PROJECT}:{section}"] = {**config.get(f"{PROJECT}:{section}", {}), **values}
    return config


def stack_file_config(stack: str = "dev") -> dict[str, Any]:
    """A stack file's config as YAML values (what `ops render` reads)."""
    return load_yaml((ROOT / f"Pulumi.{stack}.yaml").read_text())["config"]


def stack_settings(stack: str = "dev", **sections: dict[str, Any]) -> Any:
    """A stack file's settings with some sections' keys overridden (what `ops render` would load)."""
    from config import load_settings

    config = stack_file_config(stack)
    for section, values in sections.items():
        config[f"{PROJECT}:{section}"] = {**config.get(f"{PROJECT}:{section}", {}), **values}
    return load_settings(config)


OWN_CLUSTER_STACKS = [
    s for s in STACKS if not stack_file_config(s).get(f"{PROJECT}:cluster", {}).get("existingClusterName")
]
"""The stack files that create their own VPC and cluster."""
EXISTING_CLUSTER_STACKS = [s for s in STACKS if s not in OWN_CLUSTER_STACKS]
"""The stack files that serve on a team's cluster (the mocked one of tests/fakes/existing.py)."""


def plan_of(stack: str = "dev", team: TeamCluster | None = None, **sections: dict[str, Any]) -> Any:
    """A stack file's plan as the program makes it at preview: on a team's cluster, with the context
    the program reads from it (the mocked team's by default)."""
    from planning import plan_stack
    from planning.addons import plan_addons
    from planning.context import existing_cluster
    from planning.existing_cluster import plan_existing

    settings = stack_settings(stack, **sections)
    plan = plan_stack(settings, stack=stack)
    if not settings.cluster.existing_cluster_name:
        return plan
    team = team or TeamCluster()
    offered = DEFAULT_OFFERINGS.get(settings.region, {}).get(settings.gpu_nodes.instance_type) or [
        f"{settings.region}{z}" for z in "abc"
    ]
    existing = plan_existing(settings, description(team), offered, None)
    addons = plan_addons(settings, team_inventory(team))
    return replace(plan, context=existing_cluster(settings, existing, addons))


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


def _load_program():
    spec = importlib.util.spec_from_file_location("stack_program", ROOT / "__main__.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # as Python registers `__main__` (dataclasses look themselves up there)
    spec.loader.exec_module(module)
    return module


_PROGRAM = None
_RUNS: dict[str, StackRun] = {}
LAST_RUN: StackRun | None = None
"""The most recent run, also when the program raised (to show that nothing was registered)."""


def run_stack(
    config: dict[str, Any] | None = None,
    *,
    stack: str = "dev",
    overrides: dict[str, dict[str, Any]] | None = None,
    offerings: dict[str, dict[str, list[str]]] | None = None,
    secrets: dict[str, str] | None = None,
    aws: AwsState | None = None,
    price_cache: Path | None = None,
) -> StackRun:
    """Run __main__.main() for a stack file's config, with per-section overrides merged in. A run is
    deterministic, so one with the same arguments is answered from the last time (tests only read it)."""
    global _PROGRAM, LAST_RUN
    key = json.dumps(
        [config, stack, overrides, offerings, secrets, aws and vars(aws), price_cache],
        sort_keys=True,
        default=str,
    )
    if key in _RUNS:
        return _RUNS[key]
    values = dict(config if config is not None else stack_file_config(stack))
    for section, changes in (overrides or {}).items():
        name = f"{PROJECT}:{section}"
        values[name] = {**values.get(name, {}), **changes}
    values.update(secrets or {})

    # Each run asks the (mocked) Price List API afresh, unless a test hands it a cache.
    os.environ["RAY_LLM_EKS_PRICE_CACHE"] = str(price_cache or Path(tempfile.mkdtemp()) / "prices.json")
    asyncio.set_event_loop(_InlineLoop())
    pulumi_settings.ROOT.set(None)
    mocks = StackMocks(
        offerings if offerings is not None else DEFAULT_OFFERINGS,
        aws or AwsState(),
        str(values.get("aws:region")),
        any_region=offerings is None,
    )
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
    if _PROGRAM is None:
        _PROGRAM = _load_program()
    stack_program = _PROGRAM
    # The program reads a team's cluster's workloads from its Kubernetes API: here, the fake team's.
    world = aws or AwsState()
    team = world.team
    stack_program.cluster_inventory = lambda cluster, region: (  # pyright: ignore[reportAttributeAccessIssue]
        team_inventory(team) if team else "no such cluster"
    )
    # ... and capacity reservations through the AWS CLI: here, the mocked account's, at its fixed time.
    stack_program.capacity_reservations = lambda reference, region, profile=None: (  # pyright: ignore[reportAttributeAccessIssue]
        describe_reservations(world.reservations, world.resource_groups, reference)
    )
    stack_program.now = lambda: MOCKED_NOW  # pyright: ignore[reportAttributeAccessIssue]
    run = LAST_RUN = StackRun(
        registrations=monitor.registrations,
        calls=mocks.calls,
        warnings=capture.warnings,
        infos=capture.infos,
        transforms=mocks.transforms,
    )

    @pulumi.runtime.test
    def program():
        stack_program.main()
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

    program()
    _RUNS[key] = run
    # What a run leaves (kept in _RUNS for the session) is never garbage; without this, every later
    # collection walks all of it again, and the runs get slower as the session goes on.
    gc.freeze()
    return run
