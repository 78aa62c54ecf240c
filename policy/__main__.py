"""The project's policy pack (policy/rules.py). Previews and deploys run it: `pulumi preview
--policy-pack policy` (docs/operations.md, "Delivery"). It needs its own virtualenv, which the Pulumi
CLI does not make for a local pack:

    python3 -m venv policy/venv && policy/venv/bin/pip install -r policy/requirements.txt
"""

from pulumi_policy import EnforcementLevel, PolicyPack
from rules import POLICIES  # the pack runs from this directory

PolicyPack(name="ray-llm-eks", enforcement_level=EnforcementLevel.MANDATORY, policies=POLICIES)
