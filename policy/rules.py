"""The invariants this project promises, as Pulumi policies: they hold for every resource of the stack,
ours, pulumi-eks's children, and anything added later.

Each rule is a plain function over a resource's type and inputs (or over the whole stack), wrapped in a
pulumi-policy object at the end; tests/test_policy.py runs each against a violating and a good resource.
Policies see the engine's resource inputs after the provider's check (camelCase names), secrets in
plaintext, and, during a preview, unknown values: a value not known yet is skipped here, never
guessed, and the rule runs again at `up`, where everything is known.

Self-contained: the pack runs from its own virtualenv (policy/requirements.txt), not the program's.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pulumi_policy import (
    EnforcementLevel,
    Policy,
    PolicyConfigSchema,
    PolicyResource,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)
from pulumi_policy.proxy import UnknownValueError

NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
MANAGED_NODE_GROUP = "eks:index:ManagedNodeGroup"
"""pulumi-eks's component: its inputs say GPU, EFA and IMDSv2 before its children exist."""
LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
INSTANCE = "aws:ec2/instance:Instance"
SUBNET = "aws:ec2/subnet:Subnet"
ROUTE_TABLE = "aws:ec2/routeTable:RouteTable"
ROUTE_TABLE_ASSOCIATION = "aws:ec2/routeTableAssociation:RouteTableAssociation"
INTERNET_GATEWAY = "aws:ec2/internetGateway:InternetGateway"
BUCKETS = ("aws:s3/bucket:Bucket", "aws:s3/bucketV2:BucketV2")
PUBLIC_ACCESS_BLOCK = "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock"
ENCRYPTION = (
    "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration",
    "aws:s3/bucketServerSideEncryptionConfigurationV2:BucketServerSideEncryptionConfigurationV2",
)
LOAD_BALANCER = "aws:lb/loadBalancer:LoadBalancer"
LISTENER = "aws:lb/listener:Listener"
SERVICE = "kubernetes:core/v1:Service"
SECRET = "kubernetes:core/v1:Secret"
CONFIG_MAP = "kubernetes:core/v1:ConfigMap"
RAYSERVICE = "kubernetes:ray.io/v1:RayService"
RAYCLUSTER = "kubernetes:ray.io/v1:RayCluster"
NAMESPACE = "kubernetes:core/v1:Namespace"
NETWORK_POLICY = "kubernetes:networking.k8s.io/v1:NetworkPolicy"
ENFORCE_LABEL = "pod-security.kubernetes.io/enforce"

ACCELERATED_AMI = re.compile(r"NVIDIA|GPU|NEURON")
"""EKS AMI types of GPU (and Neuron) nodes: AL2023_x86_64_NVIDIA, AL2_x86_64_GPU, BOTTLEROCKET_*_NVIDIA."""
SCHEME_ANNOTATION = "service.beta.kubernetes.io/aws-load-balancer-scheme"
CERT_ANNOTATION = "service.beta.kubernetes.io/aws-load-balancer-ssl-cert"
TLS_PORTS_ANNOTATION = "service.beta.kubernetes.io/aws-load-balancer-ssl-ports"
TLS_PROTOCOLS = {"TLS", "HTTPS"}
DEFAULT_SERVING_NAMESPACE = "inference"

Report = Callable[[str], None]
"""How a resource rule reports a violation (of the resource it is looking at)."""

SECRET_NAME = re.compile(r"(PASSWORD|PASSWD|SECRET|TOKEN|API_?KEY|PRIVATE_?KEY|ACCESS_?KEY)", re.IGNORECASE)
"""Names that say a value is a credential (an env var, a ConfigMap key)."""
NOT_A_SECRET = re.compile(r"(_FILE|_PATH|_DIR|_URL|_URI|_ARN|_NAME|_ID)$", re.IGNORECASE)
"""...unless they name where a credential is, not the credential."""
SECRET_VALUE = re.compile(
    r"(hf_[A-Za-z0-9]{30,}"  # Hugging Face user access token
    r"|(AKIA|ASIA)[0-9A-Z]{16}"  # AWS access key id
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----"  # a PEM private key
    r"|gh[pousr]_[A-Za-z0-9]{36,}"  # GitHub token
    r"|sk-[A-Za-z0-9_-]{32,})"  # OpenAI-style API key
)
"""Values that are credentials whatever their key is called."""

POD_WORKLOADS = {
    "kubernetes:core/v1:Pod": ("spec",),
    "kubernetes:apps/v1:Deployment": ("spec", "template", "spec"),
    "kubernetes:apps/v1:StatefulSet": ("spec", "template", "spec"),
    "kubernetes:apps/v1:DaemonSet": ("spec", "template", "spec"),
    "kubernetes:apps/v1:ReplicaSet": ("spec", "template", "spec"),
    "kubernetes:batch/v1:Job": ("spec", "template", "spec"),
    "kubernetes:batch/v1:CronJob": ("spec", "jobTemplate", "spec", "template", "spec"),
}


def _known(value: Callable[[], Any], default: Any = None) -> Any:
    """The value, or `default` while it is unknown (a preview of a resource not created yet)."""
    try:
        return value()
    except UnknownValueError:
        return default


def _get(props: Any, *path: str | int) -> Any:
    for key in path:
        try:
            props = props[key]
        except (KeyError, IndexError, TypeError):
            return None
    return props


# --- GPU node groups with EFA in exactly one zone -------------------------------------------------


def _efa_templates(resources: list[PolicyResource]) -> set[str]:
    """URNs of launch templates with an EFA interface (pulumi-eks: `efa` on card 0, `efa-only` beyond)."""
    found = set()
    for r in resources:
        if r.resource_type != LAUNCH_TEMPLATE:
            continue
        interfaces = _known(lambda r=r: r.props.get("networkInterfaces"), []) or []
        if any(_known(lambda i=i: i.get("interfaceType"), "") in ("efa", "efa-only") for i in interfaces):
            found.add(r.urn)
    return found


def gpu_node_groups_in_one_zone(resources: list[PolicyResource], report: ReportViolation) -> None:
    efa = _efa_templates(resources)
    for r in resources:
        if r.resource_type == NODE_GROUP:
            ami = _known(lambda r=r: r.props.get("amiType"), "") or ""
            template_deps = {d.urn for d in r.property_dependencies.get("launchTemplate", [])}
            uses_efa = bool(template_deps & efa)
            accelerated = bool(ACCELERATED_AMI.search(ami))
        elif r.resource_type == MANAGED_NODE_GROUP:
            uses_efa = _known(lambda r=r: r.props.get("enableEfaSupport"), False) is True
            accelerated = _known(lambda r=r: r.props.get("gpu"), False) is True
        else:
            continue
        if not (accelerated or uses_efa):
            continue
        subnets = _known(lambda r=r: list(r.props.get("subnetIds") or []))
        if subnets is not None and len(subnets) != 1:
            report(
                f"{r.name}: a GPU{' EFA' if uses_efa else ''} node group must be in exactly one availability "
                f"zone (one subnet); it has {len(subnets)}. EFA traffic does not cross zones.",
                r.urn,
            )


# --- IMDSv2 on every launch template, instance and node group -------------------------------------


def imdsv2_required(resource_type: str, props: Mapping[str, Any], name: str, report: Report) -> None:
    if resource_type in (LAUNCH_TEMPLATE, INSTANCE):
        tokens = _known(lambda: _get(props, "metadataOptions", "httpTokens"), "required")
        if tokens != "required":
            report(
                f"{name}: IMDSv2 is not required (metadataOptions.httpTokens is {tokens!r}, not 'required')"
            )
        # One hop: the node reaches the metadata service, a pod (one hop further) does not. Unset is the
        # AMI's default, 2 on AMIs marked for IMDSv2, and pulumi-eks's own templates say 2.
        hops = _known(lambda: _get(props, "metadataOptions", "httpPutResponseHopLimit"), 1)
        if hops != 1:
            report(
                f"{name}: metadataOptions.httpPutResponseHopLimit is {hops!r}, not 1: pods could borrow the "
                "node's role from the metadata service"
            )
    elif resource_type == NODE_GROUP and _known(lambda: props.get("launchTemplate"), True) is None:
        report(
            f"{name}: a managed node group without a launch template gets EKS's default one, where IMDSv1 "
            "stays on; give it a launch template that requires IMDSv2 (pulumi-eks: enable_imd_sv2=True)"
        )
    elif resource_type == MANAGED_NODE_GROUP and _known(lambda: props.get("enableIMDSv2"), True) is not True:
        report(
            f"{name}: pulumi-eks builds this node group's launch template without IMDSv2: enable_imd_sv2=True"
        )


# --- No node in a public subnet -------------------------------------------------------------------


def _public_subnets(resources: list[PolicyResource]) -> set[str]:
    """URNs of subnets that hand out public IPs, are tagged for internet-facing load balancers, or route
    to an internet gateway."""
    igw_tables = {
        r.urn
        for r in resources
        if r.resource_type == ROUTE_TABLE and any(d.resource_type == INTERNET_GATEWAY for d in r.dependencies)
    }
    public = set()
    for r in resources:
        if r.resource_type == SUBNET:
            maps_ip = _known(lambda r=r: r.props.get("mapPublicIpOnLaunch"), False)
            tags = _known(lambda r=r: dict(r.props.get("tags") or {}), {}) or {}
            if maps_ip or tags.get("kubernetes.io/role/elb") == "1":
                public.add(r.urn)
    for r in resources:
        if r.resource_type == ROUTE_TABLE_ASSOCIATION and {d.urn for d in r.dependencies} & igw_tables:
            public |= {d.urn for d in r.property_dependencies.get("subnetId", [])}
    return public


def no_nodes_in_public_subnets(resources: list[PolicyResource], report: ReportViolation) -> None:
    """By the subnets a node group's `subnetIds` (an instance's `subnetId`) depends on: a subnet's id is
    not among the inputs a policy sees, and not known at all before the subnet exists."""
    public = _public_subnets(resources)
    for r in resources:
        key = {NODE_GROUP: "subnetIds", MANAGED_NODE_GROUP: "subnetIds", INSTANCE: "subnetId"}.get(
            r.resource_type
        )
        if key is None:
            continue
        if {d.urn for d in r.property_dependencies.get(key, [])} & public:
            report(f"{r.name}: nodes in a public subnet; put them in the private subnets", r.urn)


# --- S3 buckets private and encrypted -------------------------------------------------------------


def _targets(
    resources: list[PolicyResource], resource_type: str | tuple[str, ...]
) -> dict[str, PolicyResource]:
    """Bucket URN -> the resource of `resource_type` that configures it (through its `bucket` input)."""
    types = (resource_type,) if isinstance(resource_type, str) else resource_type
    found = {}
    for r in resources:
        if r.resource_type in types:
            for d in r.property_dependencies.get("bucket", []):
                found[d.urn] = r
    return found


def s3_buckets_private_and_encrypted(resources: list[PolicyResource], report: ReportViolation) -> None:
    blocks = _targets(resources, PUBLIC_ACCESS_BLOCK)
    encryption = _targets(resources, ENCRYPTION)
    flags = ("blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls", "restrictPublicBuckets")
    for r in resources:
        if r.resource_type not in BUCKETS:
            continue
        acl = _known(lambda r=r: r.props.get("acl"), None)
        if acl in ("public-read", "public-read-write"):
            report(f"{r.name}: bucket ACL {acl!r} makes it public", r.urn)
        block = blocks.get(r.urn)
        if block is None:
            report(
                f"{r.name}: no BucketPublicAccessBlock: a bucket must block every kind of public access",
                r.urn,
            )
        else:
            off = [f for f in flags if _known(lambda f=f, b=block: b.props.get(f), True) is not True]
            if off:
                report(f"{r.name}: its public access block leaves {', '.join(off)} off", r.urn)
        inline = _known(lambda r=r: r.props.get("serverSideEncryptionConfiguration"), None)
        if r.urn not in encryption and not inline:
            report(
                f"{r.name}: no server-side encryption configuration: say how the bucket is encrypted "
                "(SSE-S3 or SSE-KMS) rather than rely on the account default",
                r.urn,
            )


# --- No internet-facing load balancer without TLS -------------------------------------------------


def _service_violations(name: str, props: Mapping[str, Any]) -> Iterable[str]:
    spec = props.get("spec") or {}
    if _known(lambda: spec.get("type")) != "LoadBalancer":
        return
    annotations = _known(lambda: dict(_get(props, "metadata", "annotations") or {}), {}) or {}
    if annotations.get(SCHEME_ANNOTATION) != "internet-facing":
        return
    if not annotations.get(CERT_ANNOTATION):
        yield f"{name}: an internet-facing load balancer Service without TLS ({CERT_ANNOTATION} unset)"
        return
    tls_ports = {p.strip() for p in str(annotations.get(TLS_PORTS_ANNOTATION, "")).split(",") if p.strip()}
    plain = [
        str(p.get("port"))
        for p in _known(lambda: list(spec.get("ports") or []), []) or []
        if tls_ports and str(p.get("port")) not in tls_ports and p.get("name") not in tls_ports
    ]
    if plain:
        yield f"{name}: internet-facing ports {', '.join(plain)} are not in {TLS_PORTS_ANNOTATION}"


def internet_facing_load_balancers_use_tls(resources: list[PolicyResource], report: ReportViolation) -> None:
    public_lbs = {
        r.urn: r
        for r in resources
        if r.resource_type == LOAD_BALANCER and _known(lambda r=r: r.props.get("internal"), True) is False
    }
    for r in resources:
        if r.resource_type == SERVICE:
            for message in _service_violations(r.name, r.props):
                report(message, r.urn)
        elif r.resource_type == LISTENER and {
            d.urn for d in r.property_dependencies.get("loadBalancerArn", [])
        } & set(public_lbs):
            protocol = _known(lambda r=r: r.props.get("protocol"), "TLS")
            redirect = _known(lambda r=r: _get(r.props, "defaultActions", 0, "type"), None) == "redirect"
            if protocol not in TLS_PROTOCOLS and not redirect:
                report(f"{r.name}: an internet-facing load balancer listener on {protocol}, not TLS", r.urn)


# --- Secrets never in plain resource inputs we control --------------------------------------------


def _strings(value: Any, path: str = "") -> Iterable[tuple[str, str]]:
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, Mapping):
        for k, v in value.items():
            yield from _strings(v, f"{path}.{k}" if path else str(k))
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            yield from _strings(v, f"{path}[{i}]")


def _env_vars(value: Any) -> Iterable[Mapping[str, Any]]:
    """Every container env entry anywhere in a Kubernetes object's inputs (pods, templates, CRs)."""
    if isinstance(value, Mapping):
        for k, v in value.items():
            if k == "env" and isinstance(v, list):
                yield from (e for e in v if isinstance(e, Mapping))
            else:
                yield from _env_vars(v)
    elif isinstance(value, list):
        for v in value:
            yield from _env_vars(v)


def _named_secret(name: str) -> bool:
    return bool(SECRET_NAME.search(name)) and not NOT_A_SECRET.search(name)


def no_plaintext_secrets(resource_type: str, props: Mapping[str, Any], name: str, report: Report) -> None:
    if resource_type == SECRET or resource_type.startswith("random:"):
        return  # where credentials belong (the engine keeps them Pulumi secrets)
    plain = _known(lambda: _plain(props), {}) or {}
    for path, text in _strings(plain):
        if SECRET_VALUE.search(text):
            report(
                f"{name}: {path} holds a credential in plain text; put it in a Kubernetes Secret or a "
                "Pulumi secret"
            )
    if resource_type.startswith("kubernetes:"):
        for env in _env_vars(plain):
            if _named_secret(str(env.get("name", ""))) and env.get("value"):
                report(
                    f"{name}: env {env['name']} is given as a plain value; take it from a Secret "
                    "(valueFrom.secretKeyRef)"
                )
    if resource_type == CONFIG_MAP:
        for key in plain.get("data") or {}:
            if _named_secret(key):
                report(
                    f"{name}: ConfigMap key {key!r} names a credential; ConfigMaps are not encrypted, use "
                    "a Secret"
                )


def _plain(value: Any) -> Any:
    """A deep copy of the inputs with unknown values left out."""
    if isinstance(value, Mapping):
        out = {}
        for k in list(value.keys()):
            v = _known(lambda k=k: value[k], None)
            if v is not None:
                out[k] = _plain(v)
        return out
    if isinstance(value, list | tuple):
        return [_plain(_known(lambda i=i: value[i], None)) for i in range(len(value))]
    return value


# --- Pods in the serving namespace never privileged, but the GPU workers -------------------------


def _containers(pod_spec: Any) -> list[Mapping[str, Any]]:
    return [c for key in ("initContainers", "containers") for c in (_get(pod_spec, key) or [])]


def _privileged(containers: Iterable[Mapping[str, Any]]) -> list[str]:
    return [str(c.get("name")) for c in containers if _get(c, "securityContext", "privileged") is True]


def serving_pods_not_privileged(
    resource_type: str, props: Mapping[str, Any], name: str, namespace: str, report: Report
) -> None:
    plain = _known(lambda: _plain(props), {}) or {}
    if (_get(plain, "metadata", "namespace") or "default") != namespace:
        return
    if resource_type in POD_WORKLOADS:
        privileged = _privileged(_containers(_get(plain, *POD_WORKLOADS[resource_type])))
        if privileged:
            report(
                f"{name}: privileged container(s) {', '.join(privileged)} in {namespace}; only GPU "
                "workers may be"
            )
    elif resource_type in (RAYSERVICE, RAYCLUSTER):
        cluster = (
            _get(plain, "spec", "rayClusterConfig") if resource_type == RAYSERVICE else _get(plain, "spec")
        )
        head = _privileged(_containers(_get(cluster, "headGroupSpec", "template", "spec")))
        if head:
            report(
                f"{name}: the Ray head's container(s) {', '.join(head)} are privileged; only GPU "
                "workers may be"
            )
        for group in _get(cluster, "workerGroupSpecs") or []:
            spec = _get(group, "template", "spec")
            limits = [_get(c, "resources", "limits") or {} for c in _containers(spec)]
            gpu = any(int(str(lim.get("nvidia.com/gpu", "0")) or 0) > 0 for lim in limits)
            privileged = _privileged(_containers(spec))
            if privileged and not gpu:
                report(
                    f"{name}: worker group {group.get('groupName')} runs privileged without GPUs; only GPU "
                    "workers may be privileged"
                )


# --- Encrypted volumes ----------------------------------------------------------------------------


def volumes_encrypted(resource_type: str, props: Mapping[str, Any], name: str, report: Report) -> None:
    if resource_type == LAUNCH_TEMPLATE:
        for i, mapping in enumerate(_known(lambda: list(props.get("blockDeviceMappings") or []), []) or []):
            ebs = _known(lambda m=mapping: m.get("ebs"), None)
            if ebs is not None and str(_known(lambda e=ebs: e.get("encrypted"), "true")).lower() != "true":
                report(f"{name}: blockDeviceMappings[{i}] is not encrypted")
    elif (
        resource_type == "aws:ebs/volume:Volume" and _known(lambda: props.get("encrypted"), True) is not True
    ):
        report(f"{name}: an unencrypted EBS volume")
    elif (
        resource_type == "kubernetes:storage.k8s.io/v1:StorageClass"
        and _known(lambda: props.get("provisioner")) == "ebs.csi.aws.com"
    ):
        encrypted = _known(lambda: _get(props, "parameters", "encrypted"), "true")
        if str(encrypted).lower() != "true":
            report(f"{name}: an EBS StorageClass whose volumes are not encrypted (parameters.encrypted)")


# --- Namespaces guarded ---------------------------------------------------------------------------


def _denies_all_ingress(spec: Any) -> bool:
    return (
        _get(spec, "podSelector") in ({}, None)
        and "Ingress" in (_get(spec, "policyTypes") or [])
        and not _get(spec, "ingress")
    )


def namespaces_deny_ingress_and_enforce_pod_security(
    resources: list[PolicyResource], report: ReportViolation
) -> None:
    """Every Namespace the stack creates states a Pod Security level it enforces and has a policy that
    denies all ingress (so what is allowed is only what its other policies list), namespaces added
    later included. A Namespace whose name is not known yet (computed) is skipped."""
    denied = {
        _get(r.props, "metadata", "namespace")
        for r in resources
        if r.resource_type == NETWORK_POLICY and _denies_all_ingress(_get(r.props, "spec"))
    }
    for r in resources:
        if r.resource_type != NAMESPACE:
            continue
        name = _get(r.props, "metadata", "name")
        if not isinstance(name, str):
            continue
        if not _get(r.props, "metadata", "labels", ENFORCE_LABEL):
            report(f"{r.name}: namespace {name} has no {ENFORCE_LABEL} label; state its level", r.urn)
        if name not in denied:
            report(
                f"{r.name}: namespace {name} has no NetworkPolicy denying all ingress; add one "
                "(manifests/traffic.py `policies`) and declare the flows its pods need there",
                r.urn,
            )


# --- The pack -------------------------------------------------------------------------------------


def _resource(name: str, description: str, check: Callable[[str, Mapping[str, Any], str, Report], None]):
    """A mandatory rule over each resource, as `check(type, props, name, report)`."""

    def validate(args: ResourceValidationArgs, report: ReportViolation) -> None:
        check(args.resource_type, args.props, args.name, lambda message: report(message, None))

    return ResourceValidationPolicy(
        name=name, description=description, validate=validate, enforcement_level=MANDATORY
    )


def _stack(name: str, description: str, check: Callable[[list[PolicyResource], ReportViolation], None]):
    """A mandatory rule over the whole stack, as `check(resources, report)`."""

    def validate(args: StackValidationArgs, report: ReportViolation) -> None:
        check(list(args.resources), report)

    return StackValidationPolicy(
        name=name, description=description, validate=validate, enforcement_level=MANDATORY
    )


def _serving(args: ResourceValidationArgs, report: ReportViolation) -> None:
    namespace = args.get_config().get("servingNamespace", DEFAULT_SERVING_NAMESPACE)
    serving_pods_not_privileged(
        args.resource_type, args.props, args.name, namespace, lambda message: report(message, None)
    )


MANDATORY = EnforcementLevel.MANDATORY

POLICIES: list[Policy] = [
    _stack(
        "gpu-node-groups-in-one-zone",
        "GPU and EFA node groups have exactly one subnet, so one availability zone.",
        gpu_node_groups_in_one_zone,
    ),
    _resource(
        "imdsv2-required",
        "Every launch template, instance and node group requires IMDSv2, one hop from the node.",
        imdsv2_required,
    ),
    _stack(
        "no-nodes-in-public-subnets",
        "No node group or instance in a subnet that is public.",
        no_nodes_in_public_subnets,
    ),
    _stack(
        "s3-buckets-private-and-encrypted",
        "Every bucket blocks public access and says how it is encrypted.",
        s3_buckets_private_and_encrypted,
    ),
    _stack(
        "internet-facing-load-balancers-use-tls",
        "An internet-facing load balancer (a Service or an aws.lb) serves TLS only.",
        internet_facing_load_balancers_use_tls,
    ),
    _resource(
        "no-plaintext-secrets",
        "No credential in plain resource inputs: only in Secrets and Pulumi secrets.",
        no_plaintext_secrets,
    ),
    ResourceValidationPolicy(
        name="serving-pods-not-privileged",
        description="Pods in the serving namespace are never privileged, unless they are GPU workers.",
        validate=_serving,
        enforcement_level=MANDATORY,
        config_schema=PolicyConfigSchema(
            properties={"servingNamespace": {"type": "string", "default": DEFAULT_SERVING_NAMESPACE}}
        ),
    ),
    _stack(
        "namespaces-deny-ingress-and-enforce-pod-security",
        "Every namespace the stack creates denies ingress by default and enforces a Pod Security level.",
        namespaces_deny_ingress_and_enforce_pod_security,
    ),
    _resource(
        "volumes-encrypted",
        "Every EBS volume is encrypted (launch templates, volumes, EBS StorageClasses).",
        volumes_encrypted,
    ),
]
