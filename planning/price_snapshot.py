"""On-demand prices shipped with the project, for a plan made without AWS credentials (`ops plan`).

A preview asks the Price List API itself (planning/cost.py); this snapshot is what an offline plan
shows instead, labelled as such, with its date. The figures are AWS's, never estimated here:

- EC2 instance hours (Linux, shared tenancy, on demand) for every type planning/catalog.py knows, as
  Karpenter generates them from the Price List API: aws/karpenter-provider-aws
  pkg/providers/pricing/zz_generated.pricing_aws.go, "generated at 2026-07-20T13:44:30Z for
  us-east-1" (commit 6fc13b5). p5e.48xlarge is not in it (it is sold as Capacity Blocks).
- The EKS control plane (standard support), a NAT gateway and a Network Load Balancer per hour, as
  AWS's pricing pages give them for us-east-1 (restated in rulestamp-cloud-cost-landmine-lint 0.1.8,
  PyPI, 2026-10-07).

Only us-east-1 is in it: no registry this project installs from carries other regions' prices (Karpenter
generates its table for us-east-1 alone), and none is estimated here. A plan for another region (dev's
sa-east-1 among them) shows the us-east-1 figures and says so: prices there may differ, either way;
a preview there, or `ops plan` after one, uses that region's own (planning/cost.py).
"""

from __future__ import annotations

SNAPSHOT_DATE = "2026-07-20"
SNAPSHOT_REGION = "us-east-1"

PRICES: dict[str, float] = {
    "eks": 0.10,
    "nat": 0.045,
    "nlb": 0.0225,
    "ec2:g5.xlarge": 1.006,
    "ec2:g5.8xlarge": 2.448,
    "ec2:g5.12xlarge": 5.672,
    "ec2:g5.16xlarge": 4.096,
    "ec2:g5.24xlarge": 8.144,
    "ec2:g5.48xlarge": 16.288,
    "ec2:g6.xlarge": 0.8048,
    "ec2:g6.2xlarge": 0.9776,
    "ec2:g6.4xlarge": 1.3232,
    "ec2:g6.8xlarge": 2.0144,
    "ec2:g6.12xlarge": 4.6016,
    "ec2:g6.16xlarge": 3.3968,
    "ec2:g6.24xlarge": 6.6752,
    "ec2:g6.48xlarge": 13.3504,
    "ec2:g6e.8xlarge": 4.52856,
    "ec2:g6e.12xlarge": 10.49264,
    "ec2:g6e.16xlarge": 7.57719,
    "ec2:g6e.24xlarge": 15.06559,
    "ec2:g6e.48xlarge": 30.13118,
    "ec2:m7i.large": 0.1008,
    "ec2:m7i.xlarge": 0.2016,
    "ec2:m7i.2xlarge": 0.4032,
    "ec2:m7i.4xlarge": 0.8064,
    "ec2:p4d.24xlarge": 21.957642,
    "ec2:p5.48xlarge": 55.04,
    "ec2:p5en.48xlarge": 63.296,
}
"""USD per hour in us-east-1, by the keys planning/cost.py's queries use."""


def snapshot_prices(region: str, keys: list[str]) -> tuple[dict[str, float | None], str]:
    """The snapshot's figures for `keys`, and the label a report shows with them."""
    label = f"price snapshot of {SNAPSHOT_DATE}, {SNAPSHOT_REGION}"
    if region != SNAPSHOT_REGION:
        label += f" figures standing in for {region}, whose on-demand prices may differ (a preview asks AWS)"
    return {key: PRICES.get(key) for key in keys}, label
