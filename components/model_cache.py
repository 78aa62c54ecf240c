"""The regional model cache's AWS side: the S3 bucket (when the stack owns it: private, encrypted,
public access blocked, TLS only), and the EKS Pod Identity roles that give the Ray pods read access
and the copy Job write access to the model's prefix, and nothing else. No static keys anywhere: the
pods' service accounts are associated with the roles, and EKS's Pod Identity agent hands them
short-lived credentials.
"""

from __future__ import annotations

import json

import pulumi
import pulumi_aws as aws

from components.pod_identity import PodIdentity, PodRoles
from planning.model_cache import ModelCachePlan

READ = ["s3:GetObject"]
WRITE = ["s3:GetObject", "s3:PutObject", "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts"]


def prefix_policy(partition: str, bucket: str, prefix: str, actions: list[str]) -> str:
    """Objects under the prefix, and listing the bucket only there."""
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Effect": "Allow",
                    "Action": actions,
                    "Resource": f"arn:{partition}:s3:::{bucket}/{prefix}/*",
                },
                {
                    "Effect": "Allow",
                    "Action": "s3:ListBucket",
                    "Resource": f"arn:{partition}:s3:::{bucket}",
                    "Condition": {"StringLike": {"s3:prefix": [f"{prefix}/*"]}},
                },
            ],
        }
    )


class ModelCache(pulumi.ComponentResource):
    access: list[pulumi.Resource]
    """What pods must wait for before they can reach S3 (and outlive at destroy): both roles, their
    policies and associations."""

    def __init__(
        self,
        name: str,
        *,
        plan: ModelCachePlan,
        force_destroy: bool,
        roles: PodRoles,
        namespace: str,
        readers: str,
        writers: str,
        opts: pulumi.ResourceOptions | None = None,
    ):
        """`readers`, `writers`: the service accounts (in `namespace`) of the Ray pods and the copy Job."""
        super().__init__("ray-llm-eks:model_cache:ModelCache", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        if plan.owned:
            bucket = aws.s3.Bucket(
                f"{name}-bucket", bucket=plan.bucket, force_destroy=force_destroy, opts=child
            )
            aws.s3.BucketPublicAccessBlock(
                f"{name}-public-access",
                bucket=bucket.id,
                block_public_acls=True,
                block_public_policy=True,
                ignore_public_acls=True,
                restrict_public_buckets=True,
                opts=child,
            )
            aws.s3.BucketOwnershipControls(
                f"{name}-ownership",
                bucket=bucket.id,
                rule=aws.s3.BucketOwnershipControlsRuleArgs(object_ownership="BucketOwnerEnforced"),
                opts=child,
            )
            aws.s3.BucketServerSideEncryptionConfiguration(
                f"{name}-encryption",
                bucket=bucket.id,
                rules=[
                    aws.s3.BucketServerSideEncryptionConfigurationRuleArgs(
                        apply_server_side_encryption_by_default=aws.s3.BucketServerSideEncryptionConfigurationRuleApplyServerSideEncryptionByDefaultArgs(
                            sse_algorithm="AES256"
                        ),
                        bucket_key_enabled=True,
                    )
                ],
                opts=child,
            )
            aws.s3.BucketPolicy(
                f"{name}-tls-only",
                bucket=bucket.id,
                policy=bucket.arn.apply(
                    lambda arn: json.dumps(
                        {
                            "Version": "2012-10-17",
                            "Statement": [
                                {
                                    "Sid": "DenyInsecureTransport",
                                    "Effect": "Deny",
                                    "Principal": "*",
                                    "Action": "s3:*",
                                    "Resource": [arn, f"{arn}/*"],
                                    "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                                }
                            ],
                        }
                    )
                ),
                opts=child,
            )

        grants = [("reader", readers, READ)] + ([("writer", writers, WRITE)] if plan.copy_from else [])
        self.access = []
        for role_name, service_account, actions in grants:
            self.access.append(
                PodIdentity(
                    f"{name}-{role_name}",
                    cluster_name=roles.cluster_name,
                    trust=roles.trust,
                    namespace=namespace,
                    service_account=service_account,
                    policy=prefix_policy(roles.partition, plan.bucket, plan.prefix, actions),
                    description=f"{service_account} in {namespace}: {role_name} of {plan.uri}",
                    opts=child,
                )
            )
        self.register_outputs({"uri": plan.uri})
