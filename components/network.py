"""The VPC: public subnets that hold only the NAT gateway(s), private subnets for every node, and the
routes between them, laid out by planning/zones.py. Subnets carry the tags EKS and the AWS Load
Balancer Controller look for.
"""

from __future__ import annotations

import pulumi
import pulumi_aws as aws

from config.network import NetworkConfig
from manifests.flow_logs import delivery_policy, delivery_trust, flow_log_group_name
from planning.access import partition_of
from planning.zones import plan_subnets


class Network(pulumi.ComponentResource):
    vpc_id: pulumi.Output[str]
    """The VPC's id."""
    private_subnet_ids: pulumi.Output[list[str]]
    """Private subnets in zone order; every node lives here."""
    public_subnet_ids: pulumi.Output[list[str]]
    """Public subnets in zone order; only NAT gateways (and internet-facing load balancers) live here."""
    private_subnet_by_zone: dict[str, pulumi.Output[str]]
    """Private subnet id of each zone, for the single-zone GPU node group."""

    def __init__(
        self,
        name: str,
        *,
        config: NetworkConfig,
        zones: tuple[str, ...],
        cluster_name: str,
        record: dict[str, str],
        region: str,
        account_id: str,
        opts: pulumi.ResourceOptions | None = None,
    ):
        """`zones`: zones of the subnets (the GPU zone among them); `cluster_name`: for the
        `kubernetes.io/cluster/<name>` subnet tags and the Name tags; `record`: the stack's record
        (planning/zones.py StackRecord), tagged on the VPC so later runs read it back."""
        super().__init__("ray-llm-eks:network:Network", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        cluster_tag = {f"kubernetes.io/cluster/{cluster_name}": "shared"}

        def named(what: str) -> dict[str, str]:
            return {"Name": f"{cluster_name}-{what}"}

        vpc = aws.ec2.Vpc(
            f"{name}-vpc",
            cidr_block=str(config.vpc_cidr),
            enable_dns_hostnames=True,  # EKS nodes register by their private DNS names
            enable_dns_support=True,
            tags={**named("vpc"), **cluster_tag, **record},
            opts=child,
        )
        gateway = aws.ec2.InternetGateway(f"{name}-igw", vpc_id=vpc.id, tags=named("igw"), opts=child)
        public_routes = aws.ec2.RouteTable(
            f"{name}-public",
            vpc_id=vpc.id,
            routes=[aws.ec2.RouteTableRouteArgs(cidr_block="0.0.0.0/0", gateway_id=gateway.id)],
            tags=named("public"),
            opts=child,
        )

        def subnet(kind: str, zone: str, cidr: str, role_tag: str) -> aws.ec2.Subnet:
            return aws.ec2.Subnet(
                f"{name}-{kind}-{zone}",
                vpc_id=vpc.id,
                cidr_block=cidr,
                availability_zone=zone,
                map_public_ip_on_launch=False,  # nothing here needs a public IP but the NAT's EIP
                tags={**named(f"{kind}-{zone}"), role_tag: "1", **cluster_tag},
                opts=child,
            )

        def associate(kind: str, zone: str, subnet: aws.ec2.Subnet, table: aws.ec2.RouteTable) -> None:
            aws.ec2.RouteTableAssociation(
                f"{name}-{kind}-{zone}", subnet_id=subnet.id, route_table_id=table.id, opts=child
            )

        def nat_gateway(zone: str, public: aws.ec2.Subnet) -> pulumi.Output[str]:
            # The EIP can only be associated once the VPC has an internet gateway.
            after_gateway = pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=[gateway]))
            eip = aws.ec2.Eip(
                f"{name}-nat-{zone}", domain="vpc", tags=named(f"nat-{zone}"), opts=after_gateway
            )
            return aws.ec2.NatGateway(
                f"{name}-nat-{zone}",
                allocation_id=eip.id,
                subnet_id=public.id,
                tags=named(f"nat-{zone}"),
                opts=after_gateway,
            ).id

        public_ids: list[pulumi.Output[str]] = []
        private_ids: list[pulumi.Output[str]] = []
        self.private_subnet_by_zone = {}
        nat_ids: list[pulumi.Output[str]] = []
        private_tables: list[pulumi.Output[str]] = []
        for plan in plan_subnets(config.vpc_cidr, zones):
            public = subnet("public", plan.zone, plan.public_cidr, "kubernetes.io/role/elb")
            associate("public", plan.zone, public, public_routes)
            private = subnet("private", plan.zone, plan.private_cidr, "kubernetes.io/role/internal-elb")
            if config.nat_gateways == "perAz" or not nat_ids:
                nat_ids.append(nat_gateway(plan.zone, public))
            private_routes = aws.ec2.RouteTable(
                f"{name}-private-{plan.zone}",
                vpc_id=vpc.id,
                # perAz: the zone's own NAT gateway; single: the one NAT gateway.
                routes=[aws.ec2.RouteTableRouteArgs(cidr_block="0.0.0.0/0", nat_gateway_id=nat_ids[-1])],
                tags=named(f"private-{plan.zone}"),
                opts=child,
            )
            associate("private", plan.zone, private, private_routes)
            private_tables.append(private_routes.id)
            public_ids.append(public.id)
            private_ids.append(private.id)
            self.private_subnet_by_zone[plan.zone] = private.id

        # Model weights from the S3 cache and ECR's image layers (served from S3) stay off the NAT
        # gateway: a gateway endpoint is free, and faster than NAT.
        aws.ec2.VpcEndpoint(
            f"{name}-s3",
            vpc_id=vpc.id,
            service_name=f"com.amazonaws.{region}.s3",
            vpc_endpoint_type="Gateway",
            route_table_ids=private_tables,
            tags=named("s3"),
            opts=child,
        )

        if config.flow_logs.enabled:
            self._flow_logs(name, vpc, cluster_name, config.flow_logs.retention_days, region, account_id)

        self.vpc_id = vpc.id
        self.private_subnet_ids = pulumi.Output.all(*private_ids).apply(list)
        self.public_subnet_ids = pulumi.Output.all(*public_ids).apply(list)
        self.register_outputs(
            {
                "vpcId": self.vpc_id,
                "privateSubnetIds": self.private_subnet_ids,
                "publicSubnetIds": self.public_subnet_ids,
            }
        )

    def _flow_logs(
        self,
        name: str,
        vpc: aws.ec2.Vpc,
        cluster_name: str,
        retention_days: int,
        region: str,
        account_id: str,
    ) -> None:
        """Every ENI's traffic, accepted and rejected, to a log group with retention, through a role only
        the VPC Flow Logs service of this account may assume (manifests/flow_logs.py)."""
        child = pulumi.ResourceOptions(parent=self)
        partition = partition_of(region)
        group = aws.cloudwatch.LogGroup(
            f"{name}-flow-logs",
            name=flow_log_group_name(cluster_name),
            retention_in_days=retention_days,
            opts=child,
        )
        role = aws.iam.Role(
            f"{name}-flow-logs",
            assume_role_policy=delivery_trust(partition, region, account_id),
            description=f"VPC flow logs of {cluster_name} to CloudWatch Logs",
            opts=child,
        )
        policy = aws.iam.RolePolicy(
            f"{name}-flow-logs", role=role.name, policy=group.arn.apply(delivery_policy), opts=child
        )
        aws.ec2.FlowLog(
            f"{name}-flow-logs",
            vpc_id=vpc.id,
            traffic_type="ALL",
            log_destination_type="cloud-watch-logs",
            log_destination=group.arn,
            iam_role_arn=role.arn,
            max_aggregation_interval=600,
            opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=[policy])),
        )
