"""The VPC: public subnets that hold only the NAT gateway(s), private subnets for every node, and the
routes between them, laid out by planning/zones.py. Subnets carry the tags EKS and the AWS Load
Balancer Controller look for.
"""

from __future__ import annotations

import pulumi
import pulumi_aws as aws

from config.network import NetworkConfig
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
        opts: pulumi.ResourceOptions | None = None,
    ):
        """`zones`: zones of the subnets, in order (the GPU zone among them); `cluster_name`: for the
        `kubernetes.io/cluster/<name>` subnet tags."""
        super().__init__("ray-llm-eks:network:Network", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        cluster_tag = {f"kubernetes.io/cluster/{cluster_name}": "shared"}

        vpc = aws.ec2.Vpc(
            f"{name}-vpc",
            cidr_block=str(config.vpc_cidr),
            enable_dns_hostnames=True,  # EKS nodes register by their private DNS names
            enable_dns_support=True,
            tags={"Name": f"{name}-vpc", **cluster_tag},
            opts=child,
        )
        gateway = aws.ec2.InternetGateway(
            f"{name}-igw", vpc_id=vpc.id, tags={"Name": f"{name}-igw"}, opts=child
        )
        public_routes = aws.ec2.RouteTable(
            f"{name}-public",
            vpc_id=vpc.id,
            routes=[aws.ec2.RouteTableRouteArgs(cidr_block="0.0.0.0/0", gateway_id=gateway.id)],
            tags={"Name": f"{name}-public"},
            opts=child,
        )

        public_ids: list[pulumi.Output[str]] = []
        private_ids: list[pulumi.Output[str]] = []
        self.private_subnet_by_zone = {}
        nat_ids: list[pulumi.Output[str]] = []
        for plan in plan_subnets(config.vpc_cidr, zones):
            public = aws.ec2.Subnet(
                f"{name}-public-{plan.zone}",
                vpc_id=vpc.id,
                cidr_block=plan.public_cidr,
                availability_zone=plan.zone,
                map_public_ip_on_launch=False,  # nothing here needs a public IP but the NAT's EIP
                tags={"Name": f"{name}-public-{plan.zone}", "kubernetes.io/role/elb": "1", **cluster_tag},
                opts=child,
            )
            aws.ec2.RouteTableAssociation(
                f"{name}-public-{plan.zone}",
                subnet_id=public.id,
                route_table_id=public_routes.id,
                opts=child,
            )
            private = aws.ec2.Subnet(
                f"{name}-private-{plan.zone}",
                vpc_id=vpc.id,
                cidr_block=plan.private_cidr,
                availability_zone=plan.zone,
                map_public_ip_on_launch=False,
                tags={
                    "Name": f"{name}-private-{plan.zone}",
                    "kubernetes.io/role/internal-elb": "1",
                    **cluster_tag,
                },
                opts=child,
            )
            if config.nat_gateways == "perAz" or not nat_ids:
                nat_ids.append(self._nat_gateway(name, plan.zone, public, gateway, child))
            private_routes = aws.ec2.RouteTable(
                f"{name}-private-{plan.zone}",
                vpc_id=vpc.id,
                routes=[aws.ec2.RouteTableRouteArgs(cidr_block="0.0.0.0/0", nat_gateway_id=nat_ids[-1])],
                tags={"Name": f"{name}-private-{plan.zone}"},
                opts=child,
            )
            aws.ec2.RouteTableAssociation(
                f"{name}-private-{plan.zone}",
                subnet_id=private.id,
                route_table_id=private_routes.id,
                opts=child,
            )
            public_ids.append(public.id)
            private_ids.append(private.id)
            self.private_subnet_by_zone[plan.zone] = private.id

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

    @staticmethod
    def _nat_gateway(
        name: str,
        zone: str,
        public: aws.ec2.Subnet,
        gateway: aws.ec2.InternetGateway,
        child: pulumi.ResourceOptions,
    ) -> pulumi.Output[str]:
        eip = aws.ec2.Eip(
            f"{name}-nat-{zone}",
            domain="vpc",
            tags={"Name": f"{name}-nat-{zone}"},
            # The EIP can only be associated once the VPC has an internet gateway.
            opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=[gateway])),
        )
        nat = aws.ec2.NatGateway(
            f"{name}-nat-{zone}",
            allocation_id=eip.id,
            subnet_id=public.id,
            tags={"Name": f"{name}-nat-{zone}"},
            opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=[gateway])),
        )
        return nat.id
