"""Decisions that follow from the stack's settings and from facts about hardware and AWS (the instance
catalog, the zones that offer the GPU type, who runs Pulumi): pure functions, no resources.

`config` says what the user asked for; `planning` says what that means on this hardware, and refuses
what cannot work; `manifests` and `components` build from both.
"""

from planning.plan import Plan, plan_stack

__all__ = ["Plan", "plan_stack"]
