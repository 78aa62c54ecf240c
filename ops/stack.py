"""A stack as `ops` sees it: the config in `Pulumi.<stack>.yaml` (read offline, no engine) and the
kubeconfig the deployed stack exports.

The kubeconfig goes to a private temporary file rather than through an environment variable: the
`kubernetes` client reads a file, and the file holds the cluster's endpoint and CA, so it is 0600 and
deleted when the command ends.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from config.settings import Settings, load_settings
from ops.kube import OpsError

PROJECT_ROOT = Path(__file__).resolve().parent.parent
"""The directory holding Pulumi.yaml and the stack files: the default of `--root`."""

Runner = Callable[..., subprocess.CompletedProcess[str]]
"""subprocess.run, or a stand-in with the same signature (tests)."""


def stack_file(root: Path, stack: str) -> Path:
    return root / f"Pulumi.{stack}.yaml"


def available_stacks(root: Path) -> list[str]:
    return sorted(p.name.removeprefix("Pulumi.").removesuffix(".yaml") for p in root.glob("Pulumi.*.yaml"))


def load_stack_config(root: Path, stack: str) -> dict[str, Any]:
    """The stack file's top-level `config:` mapping, values as YAML objects (what load_settings takes)."""
    path = stack_file(root, stack)
    if not path.is_file():
        known = ", ".join(available_stacks(root)) or "none"
        raise OpsError(f"no stack file {path} (stack files in {root}: {known})", exit_code=2)
    try:
        document = yaml.safe_load(path.read_text())
    except yaml.YAMLError as error:
        raise OpsError(f"{path} is not valid YAML: {error}", exit_code=2) from None
    config = (document or {}).get("config", {}) if isinstance(document, dict) else None
    if not isinstance(config, dict):
        raise OpsError(f"{path}: the top-level `config:` must be a mapping of keys to values", exit_code=2)
    return config


def load_stack_settings(root: Path, stack: str) -> Settings:
    """Validated Settings of a stack file; raises config.ConfigError naming every bad key."""
    return load_settings(load_stack_config(root, stack))


PULUMI_INSTALL_URL = "https://www.pulumi.com/docs/iac/download-install/"


def pulumi_missing(needed_for: str) -> OpsError:
    """What every command that needs the Pulumi CLI says when it is not there (exit 2)."""
    return OpsError(
        f"the pulumi CLI is not installed (or not on PATH), so {needed_for}; "
        f"install it: {PULUMI_INSTALL_URL}",
        exit_code=2,
    )


def stack_output(stack: str, root: Path, name: str, run: Runner = subprocess.run) -> Any:
    """One output of the deployed stack, secrets shown (`pulumi stack output NAME --show-secrets --json`)."""
    command = ["pulumi", "stack", "output", name, "--show-secrets", "--json", "--stack", stack]
    shown = " ".join(command)
    try:
        result = run(command, cwd=root, capture_output=True, text=True, timeout=120, check=False)
    except FileNotFoundError:
        raise pulumi_missing(
            f"output {name} cannot be read from stack {stack} (or pass what it gives by hand: see --help)"
        ) from None
    except subprocess.TimeoutExpired:
        raise OpsError(f"`{shown}` did not answer within 120 s", exit_code=2) from None
    if result.returncode != 0:
        detail = (result.stderr or result.stdout or "").strip() or "no output"
        raise OpsError(f"`{shown}` failed (exit {result.returncode}): {detail}", exit_code=2)
    try:
        value = json.loads(result.stdout)
        if isinstance(value, str) and value.lstrip().startswith("{"):  # an object kept as a JSON string
            value = json.loads(value)
    except json.JSONDecodeError:
        raise OpsError(f"`{shown}` did not print JSON: {result.stdout[:200]!r}", exit_code=2) from None
    return value


@contextmanager
def kubeconfig_from_stack(stack: str, root: Path, run: Runner = subprocess.run) -> Iterator[Path]:
    """Write the stack's `kubeconfig` output to a 0600 temporary file for the duration of the block."""
    parsed = stack_output(stack, root, "kubeconfig", run)
    if not isinstance(parsed, dict) or "clusters" not in parsed:
        raise OpsError(
            f"the `kubeconfig` output of stack {stack} is not a JSON kubeconfig (has `pulumi up` run?)",
            exit_code=2,
        )
    fd, name = tempfile.mkstemp(prefix=f"ops-{stack}-kubeconfig-", suffix=".json")
    path = Path(name)
    try:
        os.fchmod(fd, 0o600)  # mkstemp's default, made explicit: no other user may read it
        with os.fdopen(fd, "w") as handle:
            json.dump(parsed, handle)
        yield path
    finally:
        path.unlink(missing_ok=True)
