"""What the stack's KMS keys may do on a deployed stack.

EKS encrypts a cluster's Kubernetes secrets with one key for the cluster's life: it cannot change the key
in place, and the AWS provider makes no API call when `encryptionConfig`'s key changes on a cluster that
already has one (terraform-provider-aws `resourceClusterUpdate`). A changed `cluster.secretsKmsKeyArn` would
therefore change nothing in EKS, while the stack's own key left the program. So the choice is recorded on
the stack's VPC (`StackRecord.secrets_key`) and a different one is refused before any resource.

The EBS key can change: the node groups roll onto volumes encrypted with the new key, and Prometheus's
StorageClass is replaced (its existing volume keeps the old key). The stack's own keys are created with
`retain_on_delete`, so neither such a change nor `destroy` ever schedules the deletion of a key that
something may still use (docs/operations.md "Teardown" says how to delete them when nothing does).
"""

from __future__ import annotations

from config import PROJECT, ConfigError, Settings
from planning.zones import StackRecord

STACK_KEY = "stack"
"""What the record says when the stack created the key itself."""


def key_choices(settings: Settings) -> tuple[str, str]:
    """(secrets, volumes): `stack` or the given key's ARN."""
    cluster = settings.cluster
    return cluster.secrets_kms_key_arn or STACK_KEY, cluster.volume_kms_key_arn or STACK_KEY


def _describe(choice: str) -> str:
    return "the stack's own key" if choice == STACK_KEY else choice


def plan_key_changes(settings: Settings, record: StackRecord | None) -> list[str]:
    """Warnings for an allowed key change; raises ConfigError for the secrets key, which EKS cannot change."""
    secrets, volumes = key_choices(settings)
    if record is None:
        return []
    if record.secrets_key and record.secrets_key != secrets:
        back = "unset it" if record.secrets_key == STACK_KEY else f"set it back to {record.secrets_key}"
        raise ConfigError(
            [
                f"{PROJECT}:cluster.secretsKmsKeyArn: the cluster's Kubernetes secrets are encrypted with "
                f"{_describe(record.secrets_key)}, and EKS cannot change a cluster's secrets key, so this "
                f"change to {_describe(secrets)} would do nothing in EKS while dropping the key in use from "
                f"the stack. {back[0].upper()}{back[1:]}; to move to another key, create a new cluster "
                f"(another cluster.name, or a new stack) and delete this one."
            ]
        )
    if record.volume_key and record.volume_key != volumes:
        return [
            f"{PROJECT}:cluster.volumeKmsKeyArn changes from {_describe(record.volume_key)} to "
            f"{_describe(volumes)}: every node group rolls onto root volumes encrypted with the new key "
            "(the GPU nodes one at a time: serving stops while a worker's node is replaced), and "
            "Prometheus's StorageClass is replaced; its existing volume keeps the old key, which the stack "
            "keeps (retained, not deleted)."
        ]
    return []
