"""Run the real Pulumi program (__main__.py) offline (ops/mocked_run.py) against the tests' world, and
record what it registers.

`AwsState` is what exists in the account before a run; a run reads it as the offline world
(world/offline.py) does. `StackMocks` also answers the invokes world/aws.py makes, from the same
state, so tests/test_world.py can hold the real reads to the offline world's answers; any other
invoke fails the test, so a new data source cannot quietly return nothing.

Runs are cached on their inputs: in this process (`_RUNS`), and on disk between the xdist workers of
one session (`RUN_CACHE`), so a stack file's run is made once per session, not once per worker.
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
import pickle
import subprocess
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml
from pulumi.runtime import mocks as pulumi_mocks

from config.base import load_yaml
from ops.mocked_run import (
    FAKE_PRICES,
    NLB_HOSTNAME,
    OfflineMocks,
    Registration,
    Secret,
    StackRun,
    mock_id,
    run_offline,
)
from tests.fakes.existing import TeamCluster
from world.offline import (
    ACCOUNT_ID,
    CALLER_ARN,
    DEFAULT_OFFERINGS,
    INSTANCE_TYPES,
    NOW,
    OfflineWorld,
    catalog_answer,
)

__all__ = ["FAKE_PRICES", "NLB_HOSTNAME", "NOW", "Registration", "Secret", "StackRun", "mock_id"]

ROOT = Path(__file__).resolve().parents[2]
STACK_ROOT_ENV = "STACK_CHECKS_ROOT"
"""A directory whose stack files the suite checks instead of the project's (tests/stack_checks.py runs
the stack checks on one); unset, the project's."""
STACK_ROOT = Path(os.environ.get(STACK_ROOT_ENV) or ROOT)
"""Where the stack files the suite runs are."""


def _stack_files() -> list[str]:
    """Every stack file in the directory, committed or not: a stack file made with `pulumi stack init`
    and `pulumi config set` is tested before it is committed, each against the world `ops plan` mocks
    for it (`AwsState.for_config`), so nothing of it needs an account. A fresh clone holds only the
    committed ones."""
    return sorted(
        p.name.removeprefix("Pulumi.").removesuffix(".yaml") for p in STACK_ROOT.glob("Pulumi.*.yaml")
    )


STACK_FILES = _stack_files()
"""Every stack file's stack name: tests parametrize over these, never a hand-kept list."""


def committed_stack_files() -> list[str]:
    """The stack files of the commit, git's list (every file where there is no checkout): what the
    repository's own CI deploys and its docs name (tests/test_workflows.py), as against STACK_FILES,
    which holds a stack file you have not committed too."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "--", "Pulumi.*.yaml"],
            cwd=STACK_ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        return list(STACK_FILES)
    tracked = {name.removeprefix("Pulumi.").removesuffix(".yaml") for name in listed}
    return [stack for stack in STACK_FILES if stack in tracked]


def _config_problem(stack: str) -> str | None:
    """Why a stack file's config is refused (the loader's own message), or None."""
    from config import ConfigError, load_settings

    try:
        load_settings(yaml.safe_load((STACK_ROOT / f"Pulumi.{stack}.yaml").read_text())["config"])
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
EC2_INSTANCE_TYPES = INSTANCE_TYPES
"""DescribeInstanceTypes' real answers for the types the tests use (world/instance-types.md)."""


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

    @classmethod
    def for_config(cls, config: dict[str, Any]) -> AwsState:
        """The account a stack file's config runs against, as `ops plan` mocks it
        (`OfflineWorld.for_stack`): the team's cluster it names, in its region; the reservation it
        names. A config the loader refuses gets the default account (the program refuses it anyway)."""
        from config import ConfigError, load_settings

        try:
            settings = load_settings(config)
        except (ConfigError, ValueError, TypeError, KeyError):
            return cls()
        return cls.for_settings(settings)

    @classmethod
    def for_settings(cls, settings: Any) -> AwsState:
        world = OfflineWorld.for_stack(settings, {}, team_type=TeamCluster)
        assert isinstance(world.team, TeamCluster)  # made of `team_type`
        return cls(
            team=world.team, reservations=world.reservations_held, resource_groups=dict(world.resource_groups)
        )

    @classmethod
    def for_stack(cls, stack: str) -> AwsState:
        """The account a stack file runs against (`for_config`)."""
        return cls.for_config(stack_file_config(stack))

    def without_team_addons(self) -> AwsState:
        """This account with a team's cluster that runs none of the add-ons (no Load Balancer
        Controller, Prometheus or Cluster Autoscaler, none of their CRDs): the stack installs its own."""
        team = self.team and replace(self.team, deployments=(), prometheuses=(), crds=())
        return replace(self, team=team)

    def world(
        self,
        region: str,
        offerings: dict[str, dict[str, list[str]]] | None = None,
        other_stacks: dict[str, dict[str, Any]] | None = None,
    ) -> OfflineWorld:
        """This account as the program reads it. `offerings`: zones per region and type (None: the
        default ones, and any other region offers every type in its zones a, b and c)."""
        return OfflineWorld(
            region=region,
            offerings=offerings if offerings is not None else DEFAULT_OFFERINGS,
            any_region=offerings is None,
            vpc_tags=self.vpc_tags,
            clusters=list(self.clusters),
            caller_arn=self.caller_arn,
            instance_types=self.instance_types,
            team=self.team,
            efa_group_tags=self.efa_group_tags,
            reservations_held=self.reservations,
            resource_groups=self.resource_groups,
            clock=NOW,
            other_stacks=other_stacks or {},
        )


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


class StackMocks(OfflineMocks):
    """The offline engine's mocks, answering also the invokes of the real reads (world/aws.py) from
    `aws`, the account before the run."""

    def __init__(
        self,
        offerings: dict[str, dict[str, list[str]]],
        aws: AwsState,
        region: str = "sa-east-1",
        any_region: bool = False,
    ):
        """`any_region`: a region `offerings` does not model offers every type in its zones a, b and c
        (how a stack file for any region runs in the mocked world)."""
        super().__init__(region, aws.outputs)
        self.offerings = offerings
        self.any_region = any_region
        self.aws = aws

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

    def answer(self, token: str, given: dict[str, Any]) -> tuple[dict[str, Any], list[Any]] | None:
        """The reads' invokes (what world/aws.py asks), then the components' (ops/mocked_run.py)."""
        args = pulumi_mocks.MockCallArgs(token, given, "")
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
        found = self._team_call(args.token, dict(args.args))
        if found is not None:
            return found
        if args.token == "aws:ec2/getInstanceType:getInstanceType":
            name = args.args["instanceType"]
            described = self.aws.instance_types.get(name) or catalog_answer(name)
            if described is None:  # as EC2 refuses it; the SDK raises it in the program
                return {}, [("instanceType", f"InvalidInstanceType: {name} does not exist")]
            return described, []
        if args.token == "aws:eks/getClusters:getClusters":
            return {"id": args.args["region"], "names": self.aws.clusters}, []
        return super().answer(token, given)


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
    return load_yaml((STACK_ROOT / f"Pulumi.{stack}.yaml").read_text())["config"]


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
    """A stack file's plan as the program makes it at preview, in the mocked account (ACCOUNT_ID, which
    names the model cache's bucket): on a team's cluster, with the context the program reads from it
    (the mocked team's by default)."""
    from planning import plan_stack
    from planning.addons import plan_addons
    from planning.context import existing_cluster
    from planning.existing_cluster import plan_existing

    settings = stack_settings(stack, **sections)
    plan = plan_stack(settings, stack=stack, account_id=ACCOUNT_ID)
    if not settings.cluster.existing_cluster_name:
        return plan
    team = team or AwsState.for_settings(settings).team or TeamCluster()
    offered = DEFAULT_OFFERINGS.get(settings.region, {}).get(settings.gpu_nodes.instance_type) or [
        f"{settings.region}{z}" for z in "abc"
    ]
    existing = plan_existing(settings, team.description(), offered, None)
    addons = plan_addons(settings, team.inventory())
    return replace(plan, context=existing_cluster(settings, existing, addons))


def where_of(settings: Any, world: Any, stack: str = "dev") -> Any:
    """What the program's read step decides for `settings` in `world`, with no stack run: world/reads.py
    `where_it_serves` as __main__.read calls it (on the plan with EC2's answers, in the caller's
    account): where the stack serves, the record it keeps on its VPC, the access entries, the add-ons
    it installs on a team's cluster, and what preview says of them. A test that asks it a question
    has a run elsewhere that holds the program to the same answer."""
    from manifests.addons import own_namespaces
    from planning import plan_stack
    from world.reads import instance_types, where_it_serves

    caller = world.caller()
    plan = plan_stack(
        settings, stack=stack, ec2=instance_types(settings, world), account_id=caller.account_id
    )
    namespaces = own_namespaces(settings, plan.cluster_name)
    return where_it_serves(settings, plan, f"{PROJECT}/{stack}", world, caller, namespaces)


def as_engine_config(config: dict[str, Any]) -> dict[str, str]:
    """Stack-file values as the engine hands them to the program: objects as JSON strings."""
    return {k: v if isinstance(v, str) else json.dumps(v) for k, v in config.items()}


_RUNS: dict[str, StackRun] = {}
LAST_RUN: StackRun | None = None
"""The most recent run, also when the program raised (to show that nothing was registered)."""
RUN_CACHE_ENV = "RAY_LLM_EKS_TEST_RUNS"
"""A directory the session's runs are kept in, shared by its xdist workers (tests/conftest.py)."""
_SOURCES = (
    "__main__.py",
    "components",
    "config",
    "manifests",
    "planning",
    "program",
    "world",
    "ops",
    "tests/fakes",
)


def _source_digest() -> str:
    """What a run depends on besides its arguments: the program's and the fakes' source."""
    digest = hashlib.sha256()
    for name in _SOURCES:
        path = ROOT / name
        for file in sorted(path.rglob("*.py")) if path.is_dir() else [path]:
            digest.update(str(file.relative_to(ROOT)).encode())
            digest.update(file.read_bytes())
    return digest.hexdigest()


_DIGEST: str | None = None


def _stored(key: str) -> Path | None:
    directory = os.environ.get(RUN_CACHE_ENV)
    if not directory:
        return None
    global _DIGEST
    _DIGEST = _DIGEST or _source_digest()
    return Path(directory) / f"{hashlib.sha256((_DIGEST + key).encode()).hexdigest()}.pickle"


def _stacks_beside() -> dict[str, dict[str, Any]]:
    """Every stack file's config, as the program reads the files beside its own (world.stack_files)."""
    return {stack: stack_file_config(stack) for stack in STACK_FILES}


def run_stack(
    config: dict[str, Any] | None = None,
    *,
    stack: str = "dev",
    overrides: dict[str, dict[str, Any]] | None = None,
    offerings: dict[str, dict[str, list[str]]] | None = None,
    secrets: dict[str, str] | None = None,
    aws: AwsState | None = None,
    price_cache: Path | None = None,
    with_transforms: bool = False,
    fresh: bool = False,
) -> StackRun:
    """Run __main__.main() for a stack file's config, with per-section overrides merged in, against
    the offline world `aws` describes. A run is deterministic, so one with the same arguments is
    answered from the last time (tests only read it). A run another worker made comes without the
    transforms its resources declared (functions, which do not travel): `with_transforms` makes it
    in this process. `fresh` makes the run again, neither answered from the caches nor kept in them
    (a determinism check)."""
    global LAST_RUN
    values = dict(config if config is not None else stack_file_config(stack))
    for section, changes in (overrides or {}).items():
        name = f"{PROJECT}:{section}"
        values[name] = {**values.get(name, {}), **changes}
    values.update(secrets or {})
    state = aws or AwsState.for_config(values)
    # Keyed on what the run reads, not on how a test spelled it: the stack file's config given as
    # `config` or by name, an override that changes nothing, the account a stack file runs against
    # given or not, are one run.
    key = json.dumps(
        [values, stack, offerings, secrets, vars(state), price_cache, with_transforms],
        sort_keys=True,
        default=str,
    )
    if key in _RUNS and not fresh:
        return _RUNS[key]
    stored = _stored(key) if price_cache is None and not with_transforms and not fresh else None
    if stored and stored.exists():
        run = _RUNS[key] = pickle.loads(stored.read_bytes())
        return run

    region = str(values.get("aws:region"))
    mocks = StackMocks(
        offerings if offerings is not None else DEFAULT_OFFERINGS,
        state,
        region,
        any_region=offerings is None,
    )
    world = state.world(region, offerings, _stacks_beside())
    try:
        # Each run asks the (mocked) Price List API afresh, unless a test hands it a cache.
        run = LAST_RUN = run_offline(
            values, stack=stack, world=world, secrets=secrets, mocks=mocks, price_cache=price_cache
        )
    except Exception:
        LAST_RUN = mocks.run
        raise
    if fresh:
        return run
    _RUNS[key] = run
    if stored:
        temporary = stored.with_suffix(f".{os.getpid()}")
        temporary.write_bytes(pickle.dumps(replace(run, transforms={})))
        temporary.replace(stored)
    # What a run leaves (kept in _RUNS for the session) is never garbage; without this, every later
    # collection walks all of it again, and the runs get slower as the session goes on.
    gc.freeze()
    return run
