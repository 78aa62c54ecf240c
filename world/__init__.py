"""Every read of AWS and of a team's cluster, in one place, behind one interface.

`World` (world/reads.py) is what the program asks before it registers a resource: zones, EC2's
instance types, the stack's record, the cluster's creator, a team's cluster, its VPC, add-ons, access
entries and what runs in it, capacity reservations, and the clock. Two implementations:
- `AwsWorld` (world/aws.py): AWS and the team's cluster, asked as the AWS provider's identity
  (world/identity.py);
- `OfflineWorld` (world/offline.py): values, for `ops plan` and the tests.
Both answer in planning's dataclasses; planning decides, `__main__.py` composes.
"""

from world.identity import Identity, provider_identity
from world.reads import Caller, UnreadableError, World

__all__ = ["Caller", "Identity", "UnreadableError", "World", "provider_identity"]
