"""The suite's stack checks on another directory's stack files: every test the suite parametrizes over
the stack files (`stack`, tests/fakes/pulumi.py's STACKS and STACK_FILES), and those marked
`every_stack_file` that walk them all, run on the `Pulumi.*.yaml` of DIR instead of the project's. The
project's program, fakes and mocked world stay the project's; each stack file runs against the world
`ops plan` mocks for it (`OfflineWorld.for_stack`: the cluster and reservation it names).

    python -m tests.stack_checks DIR [pytest arguments]

It names the stack files it checks and their count, and exits with pytest's status: 0 when every
check passed, 1 when one failed; 2 when DIR is no directory or holds no `Pulumi.*.yaml`, so a wrong
path never passes with nothing checked. The suite itself (`make test`, `.ci/run`) already checks every
stack file of the project's directory, committed or not; this is for stack files kept elsewhere.

Left out, with why: NOT_STACK_CHECKS.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakes.pulumi import ROOT, STACK_FILES, STACK_ROOT_ENV

MARK = "every_stack_file"
"""The marker of a test that checks every stack file in one test (rather than one per `stack`)."""
NOT_STACK_CHECKS = {
    "tests/test_your_stack_files.py": "it runs these checks",
    "tests/test_workflows.py": "CI's jobs are the repository's: a committed stack file needs its own deploy "
    "job and drift entry (docs/operations.md, 'Adding an environment'), which the project's tests hold",
}


def is_stack_check(item: pytest.Item, stacks: list[str]) -> bool:
    """Whether a collected test checks the stack files: one per stack (a `stack` parameter, possibly
    with a suffix after `+`), or all of them (marked `every_stack_file`)."""
    if any(item.nodeid.startswith(path) for path in NOT_STACK_CHECKS):
        return False
    if item.get_closest_marker(MARK):
        return True
    callspec = getattr(item, "callspec", None)
    stack = callspec.params.get("stack") if callspec else None
    return isinstance(stack, str) and stack.split("+")[0] in stacks


def select(items: list[pytest.Item], config: pytest.Config, stacks: list[str]) -> None:
    """Keep only the stack checks (a collection hook's work, tests/conftest.py)."""
    kept = [item for item in items if is_stack_check(item, stacks)]
    config.hook.pytest_deselected(items=[item for item in items if item not in kept])
    items[:] = kept


def modules_with_checks(session: pytest.Session) -> list[str]:
    """The test modules that hold stack checks, as a session that collected the whole suite found them;
    none (meaning: collect them all) when the session collected only part of it. Handing these to `run`
    spares its pytest collecting the modules that hold none (a second or two of a two-core suite)."""
    collected = {item.path for item in session.items}
    if collected != set((ROOT / "tests").glob("test_*.py")):
        return []
    found = {item.path for item in session.items if is_stack_check(item, STACK_FILES)}
    return sorted(str(path.relative_to(ROOT)) for path in found)


def run(root: Path, *pytest_args: str) -> subprocess.CompletedProcess[str]:
    """pytest's stack checks on `root`'s stack files, in a process of their own (the stack list is
    read at import)."""
    env = {**os.environ, STACK_ROOT_ENV: str(root)}
    env.pop("PYTEST_XDIST_WORKER", None)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "0", "-q", *pytest_args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


def stack_files(root: Path) -> list[str]:
    """The stack names of `root`'s stack files, as the suite finds them (tests/fakes/pulumi.py)."""
    return sorted(p.name.removeprefix("Pulumi.").removesuffix(".yaml") for p in root.glob("Pulumi.*.yaml"))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args:
        print(__doc__, file=sys.stderr)
        return 2
    root = Path(args[0]).resolve()
    if not root.is_dir():
        print(f"tests.stack_checks: {args[0]} is not a directory; nothing checked", file=sys.stderr)
        return 2
    stacks = stack_files(root)
    if not stacks:
        print(f"tests.stack_checks: {root} holds no Pulumi.*.yaml; nothing checked", file=sys.stderr)
        return 2
    print(f"tests.stack_checks: checking {len(stacks)} stack file(s) in {root}: {', '.join(stacks)}")
    sys.stdout.flush()
    done = run(root, *args[1:])
    sys.stdout.write(done.stdout)
    sys.stderr.write(done.stderr)
    verdict = "passed" if done.returncode == 0 else f"failed (pytest exit {done.returncode})"
    print(f"tests.stack_checks: {len(stacks)} stack file(s) checked, {verdict}: {', '.join(stacks)}")
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
