"""The VPC flow logs' delivery role as data: only the VPC Flow Logs service, for this account's flow
logs, may assume it, and it may write only to the stack's flow log group (AWS, "IAM role for publishing
flow logs to CloudWatch Logs", with the confused-deputy conditions AWS recommends)."""

from __future__ import annotations

import json

FLOW_LOGS_PRINCIPAL = "vpc-flow-logs.amazonaws.com"


def flow_log_group_name(cluster_name: str) -> str:
    return f"/aws/vpc/{cluster_name}/flow-logs"


def delivery_trust(partition: str, region: str, account_id: str) -> str:
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Effect": "Allow",
                    "Principal": {"Service": FLOW_LOGS_PRINCIPAL},
                    "Action": "sts:AssumeRole",
                    "Condition": {
                        "StringEquals": {"aws:SourceAccount": account_id},
                        "ArnLike": {
                            "aws:SourceArn": f"arn:{partition}:ec2:{region}:{account_id}:vpc-flow-log/*"
                        },
                    },
                }
            ],
        }
    )


def delivery_policy(log_group_arn: str) -> str:
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Effect": "Allow",
                    "Action": ["logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams"],
                    "Resource": [log_group_arn, f"{log_group_arn}:*"],
                }
            ],
        }
    )
