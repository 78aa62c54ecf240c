"""`ops summary`: a deployed stack's outputs as Markdown, for a CI job summary.

It reads `pulumi stack output --json` without `--show-secrets`, so Pulumi itself masks every secret
output (`[secret]`): those rows say only that the output exists and how to read it. Nothing secret
can reach the summary, whatever the stack exports later.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from ops.stack import Runner, pulumi_missing

MASKED = "[secret]"
ORDER = ("endpointUrl", "loadBalancerHostname", "clusterName", "namespace", "serviceName", "modelId")
"""What a reader of a deploy wants first; every other output follows by name."""


def stack_outputs(stack: str, root: Path, run: Runner = subprocess.run) -> dict[str, Any]:
    try:
        result = run(
            ["pulumi", "stack", "output", "--json", "--stack", stack],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    except FileNotFoundError:
        raise pulumi_missing(f"stack {stack}'s outputs cannot be read") from None
    if result.returncode != 0:
        raise RuntimeError(f"pulumi stack output failed: {result.stderr.strip()}")
    return json.loads(result.stdout or "{}")


def _cell(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return text.replace("|", "\\|").replace("\n", " ")


def outputs_markdown(stack: str, outputs: dict[str, Any]) -> str:
    names = [n for n in ORDER if n in outputs] + sorted(n for n in outputs if n not in ORDER)
    lines = [f"### Stack `{stack}`", "", "| output | value |", "| --- | --- |"]
    for name in names:
        value = outputs[name]
        if value == MASKED or (isinstance(value, str) and value.startswith(MASKED)):
            shown = f"secret: `pulumi stack output {name} --show-secrets --stack {stack}`"
        else:
            shown = f"`{_cell(value)}`"
        lines.append(f"| {name} | {shown} |")
    return "\n".join(lines) + "\n"
