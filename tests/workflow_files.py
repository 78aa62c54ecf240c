"""Reading GitHub's workflow files as data (tests/test_workflows.py, tests/test_ci_roles.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


def load(path: Path) -> dict[str, Any]:
    # YAML 1.1 reads the key `on` as True.
    data = yaml.safe_load(path.read_text())
    if True in data:
        data["on"] = data.pop(True)
    return data
