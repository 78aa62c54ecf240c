"""`ops preflight`: everything `pulumi up` needs from this machine and the AWS account, checked at once
before anything is built (`make up` runs it first).

Checked: the Pulumi CLI; the AWS CLI, version 2 (the kubeconfig's `aws eks get-token` and
EKS Pod Identity need it); credentials, and the account and identity they belong to; the stack's
region; on an existing cluster (`cluster.existingClusterName`), that the cluster is there and
ACTIVE; and the EC2 On-Demand vCPU quotas there against what the stack may run at most (maxSize of
each node group). Every problem is reported, each on one line with what to do; exit 2 when any is
found, 0 when none. What cannot be checked (no AWS CLI, no credentials, the region not answering) is
printed as skipped, each quota with the vCPUs the stack needs of it, rather than left out.

The quotas are Service Quotas' "Running On-Demand ..." vCPU limits per instance family class
(L-DB2E81BA G and VT, L-417A185B P, L-1216C47A Standard), which EC2 enforces when the node groups
launch; a quota Service Quotas does not answer is a warning, not a failure, and so is the GPU type's
where the GPU nodes run on a capacity reservation (`gpuNodes.capacityReservation`), which already holds
their instances.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass

from config import Settings
from config.sides import all_side_nodes, split
from ops.stack import PULUMI_INSTALL_URL, Runner
from planning.catalog import CATALOG

QUOTAS = {
    "G": ("L-DB2E81BA", "Running On-Demand G and VT instances"),
    "VT": ("L-DB2E81BA", "Running On-Demand G and VT instances"),
    "P": ("L-417A185B", "Running On-Demand P instances"),
}
STANDARD_QUOTA = ("L-1216C47A", "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances")


def quota_of(instance_type: str) -> tuple[str, str]:
    """The vCPU quota a type counts against, by its family's letters (g6e -> G, p5 -> P, vt1 -> VT)."""
    family = instance_type.upper()
    return QUOTAS.get("VT" if family.startswith("VT") else family[:1], STANDARD_QUOTA)


@dataclass(frozen=True)
class Finding:
    ok: bool
    what: str
    detail: str
    fatal: bool = True
    skipped: bool = False
    """Not checked (what it needs is missing): said, with what it would check, so nothing passes unseen."""


def _skipped(settings: Settings, why: str, region_checked: bool = False) -> list[Finding]:
    """The checks that cannot run (`why`), each with what it would check: the region, the team's
    cluster, and each vCPU quota with what the stack needs of it."""
    region = settings.region
    found = []
    if not region_checked:
        found.append(Finding(False, f"region {region}", f"skipped ({why})", fatal=False, skipped=True))
    if settings.cluster.existing_cluster_name:
        name = settings.cluster.existing_cluster_name
        found.append(
            Finding(
                False, f"cluster {name}", f"skipped ({why}): that it is ACTIVE", fatal=False, skipped=True
            )
        )
    for (code, name), needed in sorted(vcpus_needed(settings).items()):
        found.append(
            Finding(
                False,
                name,
                f"skipped ({why}): the stack needs up to {needed} vCPUs of quota {code} in {region}; "
                "raising it takes up to a day: Service Quotas console, EC2",
                fatal=False,
                skipped=True,
            )
        )
    return found


def _run(run: Runner, command: list[str]) -> subprocess.CompletedProcess[str] | None:
    try:
        return run(command, capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        return None
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(command, 124, "", "timed out after 60 s")


def _first_line(text: str) -> str:
    return (text or "").strip().splitlines()[-1][:200] if (text or "").strip() else ""


def vcpus_needed(settings: Settings) -> dict[tuple[str, str], int]:
    """The vCPUs each quota must allow for the node groups at maxSize: the system nodes and the GPU
    nodes, or each side's where the sides have their own (`prefillNodes`, `decodeNodes`)."""
    needed: dict[tuple[str, str], int] = {}
    gpu_groups = [s.config for s in all_side_nodes(settings)] if split(settings) else [settings.gpu_nodes]
    for nodes in (settings.system_nodes, *gpu_groups):
        spec = CATALOG.get(nodes.instance_type)
        vcpus = spec.vcpu if spec else nodes.instance_spec.vcpu if nodes.instance_spec else None
        if vcpus is None:
            continue
        quota = quota_of(nodes.instance_type)
        needed[quota] = needed.get(quota, 0) + vcpus * nodes.max_size
    return needed


def preflight(settings: Settings, run: Runner = subprocess.run) -> list[Finding]:
    findings: list[Finding] = []
    pulumi = _run(run, ["pulumi", "version"])
    if pulumi is None:
        findings.append(Finding(False, "Pulumi CLI", f"not on PATH: {PULUMI_INSTALL_URL}"))
    else:
        findings.append(
            Finding(pulumi.returncode == 0, "Pulumi CLI", _first_line(pulumi.stdout or pulumi.stderr))
        )
    aws = _run(run, ["aws", "--version"])
    if aws is None:
        findings.append(
            Finding(False, "AWS CLI v2", "not on PATH: https://docs.aws.amazon.com/cli/latest/userguide/")
        )
        return findings + _skipped(settings, "no AWS CLI")  # nothing below can be asked without it
    version = _first_line(aws.stdout or aws.stderr)
    if version.startswith("aws-cli/2."):
        findings.append(Finding(True, "AWS CLI v2", version))
    else:
        findings.append(Finding(False, "AWS CLI v2", f"{version or 'unknown version'}: install version 2"))
    region = settings.region
    identity = _run(run, ["aws", "sts", "get-caller-identity", "--output", "json", "--region", region])
    if identity is None or identity.returncode != 0:
        reason = _first_line(identity.stderr if identity else "")
        findings.append(
            Finding(
                False, "AWS credentials", f"{reason or 'none'}: run `aws configure sso` or set AWS_PROFILE"
            )
        )
        return findings + _skipped(settings, "no AWS credentials")
    who = json.loads(identity.stdout)
    findings.append(Finding(True, "AWS credentials", f"account {who['Account']} as {who['Arn']}"))
    zones = _run(run, ["aws", "ec2", "describe-availability-zones", "--region", region, "--output", "json"])
    if zones is None or zones.returncode != 0:
        reason = _first_line(zones.stderr if zones else "")
        findings.append(
            Finding(
                False, f"region {region}", f"{reason}: enable the region for the account, or pick another"
            )
        )
        return findings + _skipped(settings, f"region {region} not answered", region_checked=True)
    names = [z["ZoneName"] for z in json.loads(zones.stdout).get("AvailabilityZones", [])]
    findings.append(Finding(True, f"region {region}", f"{len(names)} zones"))
    if settings.cluster.existing_cluster_name:
        findings.append(_existing_cluster(run, settings.cluster.existing_cluster_name, region))
    gpu_sections = (
        [(s.section, s.config) for s in all_side_nodes(settings)]
        if split(settings)
        else [("gpuNodes", settings.gpu_nodes)]
    )
    for (code, name), needed in sorted(vcpus_needed(settings).items()):
        answer = _run(
            run,
            [
                "aws",
                "service-quotas",
                "get-service-quota",
                "--service-code",
                "ec2",
                "--quota-code",
                code,
                "--region",
                region,
                "--output",
                "json",
            ],
        )
        if answer is None or answer.returncode != 0:
            reason = _first_line(answer.stderr if answer else "")
            findings.append(
                Finding(False, name, f"not answered ({reason}); check it in the console", fatal=False)
            )
            continue
        limit = float(json.loads(answer.stdout)["Quota"]["Value"])
        ok = limit >= needed
        advice = "" if ok else f"; request {needed} vCPUs: Service Quotas console, EC2, quota {code}"
        # A quota every GPU node of which runs on a reservation: their instances are already held.
        counted = [(name, c) for name, c in gpu_sections if quota_of(c.instance_type)[0] == code]
        reserved = bool(counted) and all(c.capacity_reservation for _, c in counted)
        if reserved and not ok:
            # The GPU nodes launch into the reservation the stack names, whose instances are already held.
            keys = " and ".join(dict.fromkeys(f"{name}.capacityReservation" for name, _ in counted))
            advice += f" (the GPU nodes run on {keys}, which holds its instances)"
        findings.append(
            Finding(ok, name, f"{limit:g} vCPUs, the stack needs up to {needed}{advice}", fatal=not reserved)
        )
    return findings


def _existing_cluster(run: Runner, name: str, region: str) -> Finding:
    """The team's cluster (`cluster.existingClusterName`) exists here, this identity may describe it,
    and it is ACTIVE; what else it must be (version, access entries, Pod Identity agent, subnets) the
    preview checks and says."""
    what = f"EKS cluster {name}"
    answer = _run(
        run, ["aws", "eks", "describe-cluster", "--name", name, "--region", region, "--output", "json"]
    )
    if answer is None or answer.returncode != 0:
        reason = _first_line(answer.stderr if answer else "")
        return Finding(
            False,
            what,
            f"{reason or 'not answered'}: check cluster.existingClusterName and the region, and that this "
            "identity may call eks:DescribeCluster",
        )
    cluster = json.loads(answer.stdout).get("cluster") or {}
    status, version = cluster.get("status", "?"), cluster.get("version", "?")
    mode = (cluster.get("accessConfig") or {}).get("authenticationMode", "?")
    detail = f"Kubernetes {version}, {status}, authentication {mode}"
    return Finding(status == "ACTIVE", what, detail if status == "ACTIVE" else f"{detail}: wait until ACTIVE")


def format_findings(findings: list[Finding]) -> tuple[str, int]:
    lines = []
    for f in findings:
        mark = "ok  " if f.ok else "skip" if f.skipped else ("FAIL" if f.fatal else "warn")
        lines.append(f"{mark}  {f.what}: {f.detail}")
    failed = [f for f in findings if not f.ok and f.fatal]
    lines.append(
        "preflight: ready for `pulumi up`"
        if not failed
        else f"preflight: {len(failed)} problem(s) to fix before `pulumi up`"
    )
    return "\n".join(lines) + "\n", 2 if failed else 0
