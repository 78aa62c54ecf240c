"""Every read of AWS and of a team's cluster sits behind one interface (world/reads.py), asked as the AWS
provider's identity. What would go unnoticed otherwise:
- the real reads (world/aws.py: pulumi-aws invokes) and the offline world the tests and `ops plan` run
  against (world/offline.py) drifting apart: both are asked about the same account here and must agree;
- a read through the AWS CLI asking as someone other than the provider: the reservation reader, the
  token the program lists a team's cluster with, and the team cluster's kubeconfig all get the stack's
  `aws:profile` and `aws:assumeRoles`;
- a provider setting that cannot be honoured the same way passing silently: it is refused at preview,
  naming the key.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pulumi
import pytest

from config import ConfigError
from planning.zones import TAG_STACK
from tests.fakes.capacity import BLOCK_ID, GROUP_ARN, NOW, ODCR_ID, block, reservation
from tests.fakes.existing import DEFAULT_SUBNETS, TEAM_WITH_GATEWAY, TeamCluster, wire
from tests.fakes.pulumi import DEFAULT_OFFERINGS, AwsState, StackMocks, run_stack, stack_file_config
from world.aws import AwsWorld
from world.identity import AssumedRole, Identity, provider_identity
from world.offline import OfflineWorld
from world.reads import reservations

ARN_PREFIX = "arn:aws:ec2:us-east-1:123456789012"
ADMIN = "arn:aws:iam::123456789012:role/platform-admins"
VIEWER = "arn:aws:iam::123456789012:role/viewers"
ACCOUNT = AwsState(
    vpc_tags={TAG_STACK: "ray-llm-eks/dev", "ray-llm-eks/zones": "us-east-1a us-east-1b"},
    clusters=["ray-llm-eks-dev"],
    team=replace(TeamCluster(), access_entries={ADMIN: {}, VIEWER: {TAG_STACK: "ray-llm-eks/dev"}}),
    efa_group_tags={TAG_STACK: "ray-llm-eks/byo", "ray-llm-eks/zones": "us-east-1b"},
)


@pytest.fixture
def under_mocks():
    """The account's invoke answers (tests/fakes/pulumi.py), for the real reads' invokes."""
    asyncio.set_event_loop(asyncio.new_event_loop())
    pulumi.runtime.settings.ROOT.set(None)
    mocks = StackMocks(DEFAULT_OFFERINGS, ACCOUNT, "us-east-1", any_region=True)
    pulumi.runtime.set_mocks(mocks, project="ray-llm-eks", stack="dev", preview=False)
    yield mocks
    pulumi.runtime.settings.ROOT.set(None)


class TestTheRealReadsAndTheOfflineWorldAgree:
    """world/aws.py against the account's invoke answers, world/offline.py against its values."""

    def worlds(self) -> tuple[AwsWorld, OfflineWorld]:
        return AwsWorld(Identity(region="us-east-1"), Path(".")), ACCOUNT.world("us-east-1")

    def test_every_read_answers_alike(self, under_mocks):
        real, offline = self.worlds()
        assert real.caller() == offline.caller()
        for instance_type in ("g6.8xlarge", "p5.48xlarge", "m7i.2xlarge"):
            assert real.zones_offering(instance_type) == offline.zones_offering(instance_type)
            assert real.instance_type(instance_type) == offline.instance_type(instance_type)
        assert real.stack_record("ray-llm-eks/dev") == offline.stack_record("ray-llm-eks/dev")
        assert real.stack_record("ray-llm-eks/prod") is offline.stack_record("ray-llm-eks/prod") is None
        assert real.cluster_names() == offline.cluster_names() == ["ray-llm-eks-dev"]
        caller = offline.caller().arn
        assert real.session_issuer(caller) == offline.session_issuer(caller)
        assert real.session_issuer(caller).endswith(":role/deployer")
        assert real.existing_cluster("platform-prod") == offline.existing_cluster("platform-prod")
        assert real.existing_record("ray-llm-eks/byo") == offline.existing_record("ray-llm-eks/byo")
        entries = (real.access_entries("platform-prod", [ADMIN, VIEWER], "ray-llm-eks/dev"),)
        assert entries == (offline.access_entries("platform-prod", [ADMIN, VIEWER], "ray-llm-eks/dev"),)
        assert entries == ([ADMIN],), "an entry the stack made is its own, not the team's"

    def test_the_gpu_zone_is_asked_of_ec2_in_the_stacks_region(self, under_mocks):
        AwsWorld(Identity(region="sa-east-1"), Path(".")).zones_offering("g6.8xlarge")
        ((token, args),) = under_mocks.calls
        assert token == "aws:ec2/getInstanceTypeOfferings:getInstanceTypeOfferings"
        assert args["locationType"] == "availability-zone"
        assert args["filters"] == [{"name": "instance-type", "values": ["g6.8xlarge"]}]
        assert args["region"] == "sa-east-1"

    def test_what_neither_has_is_unreadable_in_both(self, under_mocks):
        from world.reads import UnreadableError

        for world in self.worlds():
            with pytest.raises(UnreadableError, match="InvalidInstanceType"):
                world.instance_type("g9.mega")
            with pytest.raises(UnreadableError, match="ResourceNotFoundException"):
                world.existing_cluster("nope")


def test_a_stack_run_reads_only_through_the_world():
    """The program makes no read invoke of its own: a run against the offline world asks the mocks
    only what components ask (policy documents, add-on versions, prices)."""
    run = run_stack(stack="dev")
    asked = {token for token, _ in run.calls}
    assert asked <= {
        "aws:iam/getPolicyDocument:getPolicyDocument",
        "aws:eks/getAddonVersion:getAddonVersion",
        "aws:pricing/getProduct:getProduct",
    }


class CommandLine:
    """The AWS CLI as subprocess.run meets it: canned answers by verb, every call kept with its
    environment."""

    def __init__(self):
        self.asked: list[tuple[list[str], dict[str, str] | None]] = []
        self.answers: dict[str, subprocess.CompletedProcess[str]] = {
            "assume-role": self.ok(
                {"Credentials": {"AccessKeyId": "ASIA1", "SecretAccessKey": "s3cr3t", "SessionToken": "t0k"}}
            ),
            "get-token": self.ok({"status": {"token": "k8s-aws-v1.t0k"}}),
            "describe-capacity-reservations": self.ok({"CapacityReservations": [block()]}),
        }

    @staticmethod
    def ok(answer: dict[str, Any]) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess([], 0, json.dumps(answer), "")

    def __call__(self, command: list[str], **options: Any) -> subprocess.CompletedProcess[str]:
        self.asked.append((command, options.get("env")))
        for verb, answer in self.answers.items():
            if verb in command:
                return answer
        raise AssertionError(command)

    def env_of(self, verb: str) -> dict[str, str]:
        return next(env or {} for command, env in self.asked if verb in command)

    def command(self, verb: str) -> list[str]:
        return next(command for command, _ in self.asked if verb in command)


class TestReservationsThroughTheCli:
    """pulumi-aws has no data source for On-Demand Capacity Reservations: the AWS CLI reads them, with
    the provider's profile and region, and an error of AWS's is a refusal naming the key."""

    def test_a_reservation_by_id_as_the_profile_asks(self):
        cli = CommandLine()
        world = AwsWorld(Identity(region="us-east-1", profile="platform"), Path("."), run=cli)
        (found,) = world.reservations(BLOCK_ID)
        assert found.block and found.total == 2 and found.end == NOW + timedelta(days=6)
        assert [command for command, _ in cli.asked] == [
            [
                "aws",
                "--profile",
                "platform",
                "--region",
                "us-east-1",
                "ec2",
                "describe-capacity-reservations",
                "--capacity-reservation-ids",
                BLOCK_ID,
                "--output",
                "json",
            ]
        ]

    def test_a_group_lists_its_members_first(self):
        cli = CommandLine()
        member = {
            "Identifier": {
                "ResourceArn": f"{ARN_PREFIX}:capacity-reservation/{ODCR_ID}",
                "ResourceType": "AWS::EC2::CapacityReservation",
            }
        }
        cli.answers["list-group-resources"] = cli.ok({"Resources": [member]})
        cli.answers["describe-capacity-reservations"] = cli.ok({"CapacityReservations": [reservation()]})
        (found,) = AwsWorld(Identity(region="us-east-1"), Path("."), run=cli).reservations(GROUP_ARN)
        assert found.id == ODCR_ID and not found.block
        assert cli.asked[0][0][3:6] == ["resource-groups", "list-group-resources", "--group"]
        assert cli.asked[1][0][-3:] == [ODCR_ID, "--output", "json"]

    def test_aws_refusing_is_a_refusal_naming_the_key(self):
        cli = CommandLine()
        cli.answers["describe-capacity-reservations"] = subprocess.CompletedProcess(
            [],
            254,
            "",
            "\nAn error occurred (UnauthorizedOperation) when calling the DescribeCapacityReservations",
        )
        world = AwsWorld(Identity(region="us-east-1"), Path("."), run=cli)
        with pytest.raises(
            ConfigError, match=r"gpuNodes\.capacityReservation: EC2 in us-east-1 does not describe"
        ):
            reservations(world, ODCR_ID)

    def test_no_aws_cli(self):
        def missing(*_: Any, **__: Any) -> subprocess.CompletedProcess[str]:
            raise FileNotFoundError("aws")

        world = AwsWorld(Identity(region="us-east-1"), Path("."), run=missing)
        with pytest.raises(ConfigError, match="cannot run the AWS CLI"):
            reservations(world, ODCR_ID)


class TestOneIdentity:
    """The stack's `aws:profile` and `aws:assumeRoles` reach every read the provider does not make."""

    ROLE = "arn:aws:iam::123456789012:role/deployer"

    def identity(self, team_cluster: bool = False, **aws: Any) -> Identity:
        config = {f"aws:{key}": value for key, value in aws.items()}
        return provider_identity(config, "us-east-1", team_cluster=team_cluster)

    def test_a_profile_reaches_the_reservations_and_the_token_alike(self):
        cli = CommandLine()
        world = AwsWorld(self.identity(profile="platform"), Path("."), run=cli)
        world.reservations(BLOCK_ID)
        world.token("platform-prod")
        for verb in ("describe-capacity-reservations", "get-token"):
            command = cli.command(verb)
            assert command[command.index("--profile") + 1] == "platform", verb
            assert command[command.index("--region") + 1] == "us-east-1", verb
            assert "AWS_ACCESS_KEY_ID" not in cli.env_of(verb)

    def test_an_assumed_role_reaches_the_reservations_and_the_token_alike(self):
        cli = CommandLine()
        roles = [{"roleArn": self.ROLE, "sessionName": "ci", "externalId": "x-42", "duration": "1h"}]
        world = AwsWorld(self.identity(profile="base", assumeRoles=json.dumps(roles)), Path("."), run=cli)
        world.reservations(BLOCK_ID)
        world.token("platform-prod")
        assume = cli.command("assume-role")
        assert assume[assume.index("--role-arn") + 1] == self.ROLE
        assert assume[assume.index("--role-session-name") + 1] == "ci"
        assert assume[assume.index("--external-id") + 1] == "x-42"
        assert assume[assume.index("--duration-seconds") + 1] == "3600"
        assert assume[assume.index("--profile") + 1] == "base", "the role is assumed from the profile"
        described = cli.command("describe-capacity-reservations")
        assert "--profile" not in described, "the profile would win over the role's credentials"
        assert cli.env_of("describe-capacity-reservations")["AWS_SESSION_TOKEN"] == "t0k"
        token = cli.command("get-token")
        assert token[token.index("--role-arn") + 1] == self.ROLE
        assert token[token.index("--profile") + 1] == "base"
        assert len([c for c, _ in cli.asked if "assume-role" in c]) == 1, "one role session per run"

    def test_the_team_clusters_kubeconfig_asks_as_the_provider(self):
        config = stack_file_config("byo.example")
        config["aws:profile"] = "platform"
        config["aws:assumeRoles"] = [{"roleArn": self.ROLE}]
        run = run_stack(config, stack="byo.example")
        (provider,) = [r for r in run.of_type("pulumi:providers:kubernetes") if r.name == "cluster-k8s"]
        kubeconfig = json.loads(provider.inputs["kubeconfig"].value)
        args = kubeconfig["users"][0]["user"]["exec"]["args"]
        assert args == Identity("us-east-1", "platform", AssumedRole(self.ROLE)).get_token("platform-prod")
        assert args[args.index("--profile") + 1] == "platform"
        assert args[args.index("--role-arn") + 1] == self.ROLE

    def test_without_settings_the_kubeconfig_is_as_before(self):
        assert Identity(region="us-east-1").get_token("c") == [
            "--region",
            "us-east-1",
            "eks",
            "get-token",
            "--cluster-name",
            "c",
        ]

    @pytest.mark.parametrize(
        ("aws", "key"),
        [
            ({"accessKey": "AKIA", "secretKey": "x"}, "aws:accessKey"),
            ({"sharedCredentialsFiles": ["/creds"]}, "aws:sharedCredentialsFiles"),
            ({"assumeRoleWithWebIdentity": {"roleArn": "r"}}, "aws:assumeRoleWithWebIdentity"),
            ({"endpoints": [{"ec2": "http://localhost"}]}, "aws:endpoints"),
            ({"assumeRoles": [{"roleArn": "a"}, {"roleArn": "b"}]}, "aws:assumeRoles: a chain of 2 roles"),
            ({"assumeRoles": [{"roleArn": "a", "policy": "{}"}]}, r"aws:assumeRoles\[0\]\.policy"),
            ({"assumeRoles": [{"roleArn": "a", "duration": "5m"}]}, r"aws:assumeRoles\[0\]\.duration"),
        ],
    )
    def test_a_setting_that_cannot_be_honoured_is_refused_naming_the_key(self, aws, key):
        with pytest.raises(ConfigError, match=key):
            self.identity(**aws)

    def test_an_external_id_a_kubeconfig_cannot_send_is_refused_on_a_team_cluster(self):
        roles = [{"roleArn": self.ROLE, "externalId": "x-42"}]
        assert self.identity(assumeRoles=roles).role == AssumedRole(self.ROLE, external_id="x-42")
        with pytest.raises(ConfigError, match=r"aws:assumeRoles\[0\]\.externalId: .*get-token"):
            self.identity(True, assumeRoles=roles)

    def test_the_program_refuses_before_any_resource(self):
        from tests.fakes import pulumi as fakes

        config = {**stack_file_config("dev"), "aws:accessKey": "AKIA"}
        with pytest.raises(ConfigError, match="aws:accessKey"):
            run_stack(config, stack="dev")
        assert fakes.LAST_RUN is not None and fakes.LAST_RUN.registrations == []


class TestTheTeamsApi:
    """world/kubernetes.py: the paths it lists with the token, and what it makes of the answers,
    against a fake API client."""

    def serve(self, monkeypatch, answers):
        from types import SimpleNamespace

        from kubernetes import client

        calls: list[tuple[str, Any, dict[str, str]]] = []

        def call_api(_self, path, method, query_params=None, header_params=None, **_):
            calls.append((path, query_params, header_params or {}))
            answer = answers(path)
            if isinstance(answer, Exception):
                raise answer
            return SimpleNamespace(data=json.dumps(answer).encode())

        monkeypatch.setattr(client.ApiClient, "call_api", call_api)
        return calls

    def test_what_it_lists_and_makes_of_it(self, monkeypatch):
        config = {
            "metadata": {"namespace": "gateways", "name": "envoy-gateway-config"},
            "data": {
                "envoy-gateway.yaml": "provider:\n  kubernetes:\n    deploy:\n      type: GatewayNamespace\n"
            },
        }
        team = replace(TEAM_WITH_GATEWAY, gateway_configs=(config,))
        lists = team.api_lists()
        by_path = {
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions": lists["crds"],
            "/apis/apps/v1/deployments": lists["deployments"],
            "/apis/apps/v1/daemonsets": lists["daemonsets"],
            "/apis/monitoring.coreos.com/v1/prometheuses": lists["prometheuses"],
            "/apis/gateway.networking.k8s.io/v1/gatewayclasses": lists["gateway_classes"],
            "/api/v1/configmaps": lists["gateway_configs"],
            "/api/v1/namespaces": lists["namespaces"],
        }
        calls = self.serve(monkeypatch, by_path.__getitem__)
        cli = CommandLine()

        read = AwsWorld(Identity(region="us-east-1"), Path("."), run=cli).inventory(team.description())

        assert read == team.inventory()
        assert not isinstance(read, str)
        assert read.gateway_deploy_modes == {"gateways": "GatewayNamespace"}
        assert [command for command, _ in cli.asked] == [
            [
                "aws",
                "--region",
                "us-east-1",
                "eks",
                "get-token",
                "--cluster-name",
                "platform-prod",
                "--output",
                "json",
            ]
        ]
        assert {path for path, _, _ in calls} == set(by_path)
        assert all(headers["Authorization"] == "Bearer k8s-aws-v1.t0k" for _, _, headers in calls)
        for names_only in ("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", "/api/v1/namespaces"):
            listed = next(c for c in calls if c[0] == names_only)
            assert "PartialObjectMetadataList" in listed[2]["Accept"]  # metadata only, not every schema
        assert read.namespace_labels["monitoring"] == {"kubernetes.io/metadata.name": "monitoring"}
        configmaps = next(c for c in calls if c[0] == "/api/v1/configmaps")
        assert configmaps[1] == [("fieldSelector", "metadata.name=envoy-gateway-config")]

    def test_without_the_optional_crds_it_does_not_ask_for_them(self, monkeypatch):
        from world.kubernetes import inventory

        team = replace(TeamCluster(), crds=(), prometheuses=())
        lists = team.api_lists()
        answers = {
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions": lists["crds"],
            "/apis/apps/v1/deployments": lists["deployments"],
            "/apis/apps/v1/daemonsets": lists["daemonsets"],
            "/api/v1/configmaps": {"items": []},
            "/api/v1/namespaces": lists["namespaces"],
        }
        calls = self.serve(monkeypatch, answers.__getitem__)
        read = inventory(team.description(), "t0k")
        assert not isinstance(read, str)
        assert not read.prometheuses and not read.gateway_classes
        assert {path for path, _, _ in calls} == set(answers)

    def test_a_refusal_is_said_not_raised(self, monkeypatch):
        from kubernetes.client.exceptions import ApiException

        from world.kubernetes import inventory

        self.serve(monkeypatch, lambda path: ApiException(status=403))
        assert inventory(TeamCluster().description(), "t0k") == "the API server answered 403"

    def test_no_token_is_said_not_raised(self):
        cli = CommandLine()
        cli.answers["get-token"] = subprocess.CompletedProcess([], 255, "", "Unable to locate credentials")
        read = AwsWorld(Identity(region="us-east-1"), Path("."), run=cli).inventory(
            TeamCluster().description()
        )
        assert read == "`aws eks get-token` failed: Unable to locate credentials"


@dataclass(frozen=True)
class DefaultVpcTeam(TeamCluster):
    """A team cluster in a default-VPC layout: the VPC's main route table sends 0.0.0.0/0 to an internet
    gateway and no subnet has a table of its own, except `nat_subnets`, explicitly associated with a NAT
    table. The default fixture's layout (a NAT main table, public subnets associated explicitly) gives
    the same answer whether or not the main table is consulted; this one does not."""

    nat_subnets: tuple[str, ...] = ()

    def route_tables(self) -> dict[str, dict[str, Any]]:
        from pulumi_aws.ec2 import outputs

        def route(**given: Any) -> dict[str, Any]:
            return wire(outputs.GetRouteTableRouteResult, cidrBlock="0.0.0.0/0", **given)

        def association(**given: Any) -> dict[str, Any]:
            return wire(outputs.GetRouteTableAssociationResult, **given)

        return {
            "rtb-nat": {
                "id": "rtb-nat",
                "routeTableId": "rtb-nat",
                "routes": [route(natGatewayId="nat-0123456789abcdef0")],
                "associations": [association(subnetId=s, routeTableId="rtb-nat") for s in self.nat_subnets],
            },
            "rtb-main": {
                "id": "rtb-main",
                "routeTableId": "rtb-main",
                "routes": [route(gatewayId="igw-0123456789abcdef0")],
                "associations": [association(main=True, routeTableId="rtb-main")],
            },
        }


class TestASubnetWithoutATableOfItsOwn:
    """Issue 53 (3): a subnet with no explicit route-table association is judged by the VPC's main table
    (DescribeRouteTables' subnet filter matches explicit associations only)."""

    PRIVATE = "subnet-0aa0000000000000a"

    @pytest.fixture
    def read(self):
        def read(team: DefaultVpcTeam) -> dict[str, bool]:
            asyncio.set_event_loop(asyncio.new_event_loop())
            pulumi.runtime.settings.ROOT.set(None)
            mocks = StackMocks(DEFAULT_OFFERINGS, AwsState(team=team), "us-east-1", any_region=True)
            pulumi.runtime.set_mocks(mocks, project="ray-llm-eks", stack="dev", preview=False)
            cluster = AwsWorld(Identity(region="us-east-1"), Path(".")).existing_cluster(team.name)
            assert cluster == AwsState(team=team).world("us-east-1").existing_cluster(team.name)
            return {s.id: s.private for s in cluster.subnets}

        yield read
        pulumi.runtime.settings.ROOT.set(None)

    def test_a_main_table_to_an_internet_gateway_makes_every_unassociated_subnet_public(self, read):
        public = tuple(replace(s, public=True) for s in TeamCluster().subnets)
        assert read(DefaultVpcTeam(subnets=public)) == {s.id: False for s in public}

    def test_an_explicit_nat_table_wins_over_a_public_main_table(self, read):
        layout = tuple(replace(s, public=s.id != self.PRIVATE) for s in TeamCluster().subnets)
        private = read(DefaultVpcTeam(subnets=layout, nat_subnets=(self.PRIVATE,)))
        assert private == {s.id: s.id == self.PRIVATE for s in layout}


@pytest.mark.parametrize(
    ("roles", "said"),
    [
        ([{"sessionName": "ci"}], r"aws:assumeRoles\[0\]\.roleArn: not set"),
        ([{"roleArn": ""}], r"aws:assumeRoles\[0\]\.roleArn: not set"),
        (["arn:aws:iam::123456789012:role/deployer"], "aws:assumeRoles: must be a list of objects"),
        (
            {"roleArn": "arn:aws:iam::123456789012:role/deployer"},
            "aws:assumeRoles: must be a list of objects",
        ),
    ],
)
def test_an_assumed_role_the_cli_could_not_assume_is_refused_in_every_shape(roles, said):
    """Issue 53's sweep: `aws:assumeRoles` without a role, or not as pulumi-aws reads it (a list of
    objects, here also as the JSON string a stack file may hold), is refused naming the key; the reads
    through the AWS CLI would otherwise ask as someone other than the provider."""
    for given in (roles, json.dumps(roles)):
        with pytest.raises(ConfigError, match=said):
            provider_identity({"aws:assumeRoles": given}, "us-east-1", team_cluster=False)


@dataclass(frozen=True)
class ConnectedVpcTeam(TeamCluster):
    """The default team cluster in a VPC connected to the rest of the company, as most are: its private
    subnets' table also routes 10.0.0.0/8 to a virtual private gateway (VPN, Direct Connect) and
    172.16.0.0/12 to a transit gateway; and a range once associated with the VPC, now disassociated."""

    def route_tables(self) -> dict[str, dict[str, Any]]:
        from pulumi_aws.ec2 import outputs

        tables = super().route_tables()
        tables["rtb-main"]["routes"] += [
            wire(outputs.GetRouteTableRouteResult, cidrBlock="10.0.0.0/8", gatewayId="vgw-0123456789abcdef0"),
            wire(
                outputs.GetRouteTableRouteResult,
                cidrBlock="172.16.0.0/12",
                transitGatewayId="tgw-0123456789abcdef0",
            ),
        ]
        return tables

    def vpc(self) -> dict[str, Any]:
        from pulumi_aws.ec2 import outputs

        answer = super().vpc()
        answer["cidrBlockAssociations"].append(
            wire(
                outputs.GetVpcCidrBlockAssociationResult,
                associationId="vpc-cidr-assoc-old",
                cidrBlock="10.99.0.0/16",
                state="disassociated",
            )
        )
        return answer


class TestATeamsVpcAsEc2DescribesIt:
    """Issue 53's sweep: what world/aws.py reads of a team's VPC and add-ons, on answers the default
    fixture does not give (and the offline world agreeing)."""

    @pytest.fixture
    def described(self):
        def described(team: TeamCluster) -> Any:
            asyncio.set_event_loop(asyncio.new_event_loop())
            pulumi.runtime.settings.ROOT.set(None)
            mocks = StackMocks(DEFAULT_OFFERINGS, AwsState(team=team), "us-east-1", any_region=True)
            pulumi.runtime.set_mocks(mocks, project="ray-llm-eks", stack="dev", preview=False)
            cluster = AwsWorld(Identity(region="us-east-1"), Path(".")).existing_cluster(team.name)
            assert cluster == AwsState(team=team).world("us-east-1").existing_cluster(team.name)
            return cluster

        yield described
        pulumi.runtime.settings.ROOT.set(None)

    def test_a_vpn_or_transit_gateway_route_leaves_a_subnet_private(self, described):
        """Only an internet gateway (igw-) makes a subnet public; a VPC with VPN and transit routes on
        its private subnets' table would otherwise have none private, and be refused."""
        cluster = described(ConnectedVpcTeam())
        assert {s.id: s.private for s in cluster.subnets} == {s.id: not s.public for s in DEFAULT_SUBNETS}

    def test_a_disassociated_range_is_not_the_vpcs(self, described):
        """The VPC's ranges are what the NLB and the NetworkPolicies admit: not one it gave up."""
        assert described(ConnectedVpcTeam()).vpc_cidrs == ("10.20.0.0/16", "100.64.0.0/16")

    def test_a_vpc_cni_with_a_pod_identity_association_has_a_role_of_its_own(self, described):
        """Then the stack's node role needs no AmazonEKS_CNI_Policy (least privilege)."""
        from pulumi_aws.eks import outputs

        association = wire(
            outputs.GetAddonPodIdentityAssociationResult,
            roleArn="arn:aws:iam::123456789012:role/cni",
            serviceAccount="aws-node",
        )
        cni = {
            "configurationValues": '{"enableNetworkPolicy": "true"}',
            "podIdentityAssociations": [association],
        }
        team = replace(TeamCluster(), addons={**TeamCluster().addons, "vpc-cni": cni})
        cluster = described(team)
        assert "vpc-cni" in cluster.addon_roles and not cluster.cni_uses_node_role
