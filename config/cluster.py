"""The `cluster`, `systemNodes` and `gpuNodes` sections: the EKS control plane and its two node groups."""

from __future__ import annotations

import re
from ipaddress import IPv4Network
from typing import Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from config import versions
from config.base import IamPrincipalArn, InstanceSpec, KmsKeyArn, StrictModel, never_public
from config.network import AvailabilityZone

LogType = Literal["api", "audit", "authenticator", "controllerManager", "scheduler"]


EKS_NAME = r"^[a-zA-Z][a-zA-Z0-9-]{0,99}$"
"""An EKS cluster name: letters, digits, hyphens, at most 100, a letter first."""

OWN_CLUSTER_KEYS = {
    "name": "name",
    "kubernetes_version": "kubernetesVersion",
    "endpoint_public_access": "endpointPublicAccess",
    "public_access_cidrs": "publicAccessCidrs",
    "log_types": "logTypes",
    "log_retention_days": "logRetentionDays",
    "keep_logs_on_destroy": "keepLogsOnDestroy",
    "secrets_kms_key_arn": "secretsKmsKeyArn",
}
"""What only describes a cluster the stack creates: with `existingClusterName` they are the team's."""


class ClusterConfig(StrictModel):
    """The EKS control plane: version, API endpoint access, admins, logs, secrets encryption; or the
    existing cluster the stack serves on."""

    existing_cluster_name: str | None = Field(
        None,
        pattern=EKS_NAME,
        description="Serve on this EKS cluster, in the stack's region and account, instead of creating a VPC "
        "and a cluster: the stack reads it (version, VPC, subnets, security group, access configuration), "
        "joins its own GPU and system node groups to it, installs only the add-ons it lacks (`addons`) and "
        'never changes or deletes anything of the team\'s (docs/operations.md, "An existing cluster"). '
        "With it, the keys that describe a cluster the stack creates (`name`, `kubernetesVersion`, the "
        "endpoint, logs and secrets encryption) are refused: they are the team's.",
    )
    install_pod_identity_agent: bool = Field(
        False,
        description="With `existingClusterName`: install the EKS Pod Identity agent add-on when the cluster "
        "lacks it (the stack's controllers and the Ray pods get their AWS access through it). It is created "
        "with `preserve`, so a `destroy` leaves the agent running. Without it, preview refuses a cluster "
        "that lacks the agent and says how to add it.",
    )
    accept_unenforced_network_policies: bool = Field(
        False,
        description="With `existingClusterName`: serve on a cluster that does not enforce NetworkPolicies "
        "(no VPC CNI network policy agent, Calico or Cilium). Without enforcement every pod of the cluster "
        "reaches Ray Serve on :8000 without an API key, and Prometheus, so preview refuses such a cluster "
        "and says how to turn enforcement on, unless this says you accept it.",
    )
    name: str | None = Field(
        None,
        pattern=EKS_NAME,
        description="EKS cluster name (letters, digits, hyphens; at most 100). Default: `<project>-<stack>`, "
        "so stacks in one account and region never collide. The control-plane log group and the stack's "
        "Name tags derive from it.",
    )
    kubernetes_version: str = Field(
        versions.KUBERNETES_VERSION,
        pattern=r"^1\.\d{2}$",
        description="EKS Kubernetes minor version, e.g. `1.35`: one EKS still creates clusters of "
        "(standard or extended support, per EKS's release calendar in config/versions.py).",
    )
    endpoint_public_access: bool = Field(
        True,
        description="Expose the API endpoint publicly (restricted by `publicAccessCidrs`). The private "
        "endpoint is always on, so nodes talk to the API inside the VPC.",
    )
    public_access_cidrs: list[IPv4Network] | None = Field(
        None,
        min_length=1,
        description="Who may reach the public API endpoint: required with `endpointPublicAccess: true`, so "
        "exposing the API is a choice the stack file writes out. Your own egress range (`curl -s "
        "https://checkip.amazonaws.com` gives your address; add `/32`), your CI's, or `0.0.0.0/0` for "
        "everyone, which preview warns about (CIS EKS 5.4). Requests are still authenticated by IAM; "
        "whoever runs `pulumi up` must be inside it.",
    )
    admin_principal_arns: list[IamPrincipalArn] = Field(
        [],
        description="IAM roles or users given cluster-admin through EKS access entries. Whoever creates the "
        "cluster is admin already (EKS's own entry); listing it too is fine, the stack skips that entry.",
    )
    viewer_principal_arns: list[IamPrincipalArn] = Field(
        [],
        description="IAM roles or users that run `pulumi preview`: EKS access policy `AmazonEKSViewPolicy` "
        "(read most objects, no Secrets, nothing writable; a preview reads no Secret), e.g. the role a pull "
        "request previews dev with. List a pull-request role in dev's stack file only.",
    )
    refresh_principal_arns: list[IamPrincipalArn] = Field(
        [],
        description="IAM roles or users that run `pulumi preview --refresh` (the drift check): EKS access "
        "policy `AmazonEKSAdminViewPolicy`, every object, Secrets included (a refresh reads the stack's API "
        "keys and tokens back), nothing writable. Only for a role that runs from `main`.",
    )
    log_types: list[LogType] = Field(
        ["api", "audit", "authenticator"],
        description="Control-plane log types sent to CloudWatch Logs.",
    )
    log_retention_days: Literal[1, 3, 5, 7, 14, 30, 60, 90, 180, 365, 731, 1827, 3653] = Field(
        30,
        description="Retention of the control-plane log group `/aws/eks/<name>/cluster`, which the stack "
        "creates (EKS would otherwise create it without retention, outliving the stack).",
    )
    keep_logs_on_destroy: bool = Field(
        False,
        description="What `pulumi destroy` does with the control-plane log group: false deletes it with "
        "the cluster; true keeps it (and its audit log) for its retention, e.g. where audit logs must "
        "outlive the systems they record. Kept, a new cluster of the same name cannot be created until "
        "the group is deleted or imported.",
    )
    secrets_kms_key_arn: KmsKeyArn | None = Field(
        None,
        description="KMS key that encrypts Kubernetes secrets. Default: the stack creates one (with "
        "rotation) for the cluster.",
    )

    volume_kms_key_arn: KmsKeyArn | None = Field(
        None,
        description="KMS key that encrypts every EBS volume the stack creates (the nodes' root volumes, "
        "Prometheus's volume). Its key policy must let EC2 use it for this account (`kms:ViaService` "
        "`ec2.<region>.amazonaws.com`), or nodes fail to launch. Default: the stack creates one (with "
        "rotation) whose policy says exactly that.",
    )

    @field_validator("kubernetes_version")
    @classmethod
    def _eks_creates_it(cls, version: str) -> str:
        problem = versions.eks_version_problem(version) or versions.stack_version_problem(version)
        if problem:
            raise ValueError(problem)
        return version

    @field_validator("public_access_cidrs")
    @classmethod
    def _public_ranges(
        cls, value: list[IPv4Network] | None, info: ValidationInfo
    ) -> list[IPv4Network] | None:
        if info.data.get("existing_cluster_name"):
            return value  # the team's endpoint; refused below when given
        if value is None and info.data.get("endpoint_public_access", True):
            raise ValueError(
                "required with endpointPublicAccess: true: name who may reach the API endpoint, e.g. your "
                "address (`curl -s https://checkip.amazonaws.com`, plus /32) and your CI's, or write "
                "['0.0.0.0/0'] to mean everyone; or set endpointPublicAccess: false and run `pulumi up` "
                "from inside the VPC"
            )
        private = never_public(value or [])
        if private:
            raise ValueError(
                f"{private} are private ranges; the public endpoint sees the public address a request comes "
                "from, never a private one (EKS refuses them too). List your public egress ranges (`curl "
                "https://checkip.amazonaws.com` shows yours), or turn the public endpoint off and run "
                "`pulumi up` from inside the VPC"
            )
        return value

    @model_validator(mode="after")
    def _own_or_existing(self) -> ClusterConfig:
        if self.existing_cluster_name:
            given = [key for name, key in OWN_CLUSTER_KEYS.items() if name in self.model_fields_set]
            if given:
                raise ValueError(
                    f"{', '.join(given)}: describe a cluster the stack creates; with existingClusterName "
                    f"{self.existing_cluster_name} they are the team's to set (the stack reads the version "
                    "and the rest from the cluster): remove them"
                )
        elif self.install_pod_identity_agent:
            raise ValueError(
                "installPodIdentityAgent: only with existingClusterName; the cluster the stack creates "
                "always gets the agent"
            )
        elif self.accept_unenforced_network_policies:
            raise ValueError(
                "acceptUnenforcedNetworkPolicies: only with existingClusterName; the cluster the stack "
                "creates always enforces them"
            )
        return self

    @model_validator(mode="after")
    def _public_endpoint_is_a_choice(self) -> ClusterConfig:
        if self.existing_cluster_name:
            return self
        if not self.endpoint_public_access and self.public_access_cidrs is not None:
            raise ValueError(
                "publicAccessCidrs only applies with endpointPublicAccess: true; remove it or enable "
                "the public endpoint"
            )
        return self


CAPACITY_RESERVATION_PATTERN = (
    r"cr-[0-9a-f]{17}"
    r"|arn:aws(-[a-z]+)*:resource-groups:(?P<region>[a-z]{2}(-[a-z]+)+-[0-9]):[0-9]{12}:group/"
    r"(?P<group>[A-Za-z0-9_.-]{1,300}|[A-Za-z0-9_.-]{1,150}/[a-z0-9]{26})"
)
"""A capacity reservation's ID (EC2's `cr-` and 17 hex digits), or a resource group's ARN in either form
Resource Groups documents (botocore's resource-groups model, `GroupArnV2`): `group/<name>` with a name
of up to 300 letters, digits, `_`, `.` and `-`, or `group/<name>/<26-character id>`."""


class NodeGroupConfig(StrictModel):
    """What both node groups share: an instance type and sizes in order."""

    instance_type: str
    min_size: int
    desired_size: int
    max_size: int
    instance_spec: InstanceSpec | None = Field(
        None,
        description="Describe `instanceType` here when planning/catalog.py does not know it (vCPU, memory, "
        "GPUs, GPU memory, EFA interfaces, GPUDirect RDMA); it wins over the catalog.",
    )

    @model_validator(mode="after")
    def _ordered_sizes(self) -> NodeGroupConfig:
        if not self.min_size <= self.desired_size <= self.max_size:
            raise ValueError(
                "sizes must satisfy minSize <= desiredSize <= maxSize "
                f"(got {self.min_size} / {self.desired_size} / {self.max_size})"
            )
        return self


class SystemNodesConfig(NodeGroupConfig):
    """The managed CPU node group labelled `role=system` (on a team's cluster also labelled and tainted
    `ray-llm-eks/<serving namespace>=system`): system pods, the KubeRay operator and the Ray head."""

    instance_type: str = Field(
        "m7i.2xlarge",
        pattern=r"^[a-z][a-z0-9-]*\.[a-z0-9]+$",
        description="Instance type of the CPU node group that runs system pods, the KubeRay operator, "
        "the gateway, the metrics stack and the Ray head. Preview refuses one whose nodes cannot hold "
        "them all (the seed's m7i.xlarge holds the head and the gateway, not the metrics stack too).",
    )
    min_size: int = Field(1, ge=1, description="Minimum number of system nodes.")
    desired_size: int = Field(1, ge=1, description="Number of system nodes at creation.")
    max_size: int = Field(2, ge=1, description="Maximum number of system nodes.")
    disk_size_gib: int = Field(
        100,
        ge=50,
        le=16384,
        description="Root volume of each system node. The Ray head runs the ~15 GiB (compressed) Ray LLM "
        "image here too; unpacked it needs about twice that beside the system images.",
    )


class GpuNodesConfig(NodeGroupConfig):
    """The managed EFA GPU node group labelled `role=gpu-worker`, in one availability zone (EFA
    does not cross zones)."""

    instance_type: str = Field(
        "g6.8xlarge",
        description="EFA-capable GPU instance type of the worker node group (one of the catalogued "
        "types in planning/catalog.py, which the pod sizing and the fit check read).",
    )
    min_size: int = Field(
        0,
        ge=0,
        description="Fewest GPU nodes. Below maxSize, Cluster Autoscaler sizes the group between the two to "
        "the GPU worker pods (0: it may remove them all, which parking needs).",
    )
    desired_size: int = Field(
        2,
        ge=0,
        description="GPU nodes at creation; with Cluster Autoscaler running, its business afterwards "
        "(Pulumi leaves it alone).",
    )
    max_size: int = Field(
        2,
        ge=1,
        description="Most GPU nodes; the fit check, the workers' limits and the upgrade path reason on it.",
    )
    availability_zone: AvailabilityZone | None = Field(
        None,
        description="The one zone the GPU nodes live in (EFA does not cross zones). Default: on the first "
        "`up`, the first cluster zone that offers the instance type; after that, the zone the stack "
        "recorded on its VPC.",
    )
    disk_size_gib: int = Field(
        200, ge=50, le=16384, description="Root volume of each GPU node (image ~15 GiB, model cache)."
    )
    subnet_id: str | None = Field(
        None,
        pattern=r"^subnet-([0-9a-f]{8}|[0-9a-f]{17})$",
        description="With `cluster.existingClusterName`: the subnet of the cluster's VPC the GPU nodes go "
        "to, private (no route to an internet gateway) and in a zone that offers the GPU type. Default: "
        "the first such subnet of the cluster's own, by zone (`availabilityZone`, if set) and ID; after "
        "the first `up`, the one the stack recorded. The stack's own VPC has one private subnet per zone, "
        "so without an existing cluster this key is refused.",
    )
    capacity_reservation: str | None = Field(
        None,
        description="Run the GPU nodes on reserved capacity: the ID of an EC2 Capacity Block for ML or of an "
        "On-Demand Capacity Reservation (`cr-...`), or the ARN of a resource group of On-Demand Capacity "
        "Reservations. Preview reads it and plans from it: the GPU zone is its zone, `instanceType` and the "
        "sizes must fit it (`maxSize` at most the reserved count: the launch template says "
        "`capacity-reservations-only`, so a launch beyond the free capacity fails rather than run "
        "On-Demand), a block must have started unless the stack is parked with desiredSize 0, "
        "and it logs how many nodes run on the reservation, what it costs and when it ends "
        "(docs/operations.md, "
        '"Reserved GPU capacity"). Adding or removing it replaces the GPU node group.',
    )

    @field_validator("capacity_reservation")
    @classmethod
    def _reservation_reference(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(CAPACITY_RESERVATION_PATTERN, value):
            raise ValueError(
                f"{value!r} is neither a capacity reservation ID (`cr-` and 17 hex digits, as EC2 shows it) "
                "nor a resource group ARN (arn:aws:resource-groups:<region>:<account>:group/<name>, or "
                "group/<name>/<id>)"
            )
        return value

    accept_idle_gpus: bool = Field(
        False,
        description="Each worker needs its own EFA interface, so a type with more GPUs than EFA interfaces "
        "x tensorParallelSize leaves GPUs idle (g6.12xlarge: 4 GPUs, 1 EFA). Preview refuses that, with "
        "the numbers, unless this is true.",
    )
    taint: bool = Field(
        True,
        description="Taint GPU nodes `nvidia.com/gpu=true:NoSchedule` so only pods that tolerate it "
        "(Ray workers, device plugins) land there; on a team's cluster (`cluster.existingClusterName`) "
        "the taint is the stack's own, `ray-llm-eks/<serving.namespace>=gpu:NoSchedule`, which no team "
        "GPU job tolerates.",
    )
