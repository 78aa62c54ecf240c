"""Wait until the Ray Serve applications running are the ones this stack deployed, and RUNNING.

Runs inside the cluster as a Kubernetes Job that `pulumi up` awaits (components/rayservice.py), named
by the hash of serveConfigV2, so every new serve config gets a check of its own. KubeRay's own status
cannot tell: its first reconcile after a change stamps observedGeneration and keeps the old
application's RUNNING before it submits the new config. Ray's dashboard can: when its PUT returns, the
application's `deployed_app_config` is already the new one and its status DEPLOYING (Ray 2.58,
serve/_private/controller.py apply_config), so "our config, RUNNING" is never a stale reading.

Exit 0 when every expected application runs our config; exit 1, printing Ray's message, when one of
them ends DEPLOY_FAILED or UNHEALTHY on our config, or when the deadline passes. Standard library only:
it runs in a plain Python image.

Environment: DASHBOARD_URL (`http://<rayservice>-head-svc.<ns>.svc:8265`, which follows the active
Ray cluster), EXPECTED (path of the expected serveConfigV2 `applications` as JSON),
RAY_AUTH_TOKEN_FILE (Ray's token in the mounted Secret, sent as `Authorization: Bearer`, which Ray
2.58's dashboard checks), DEADLINE_SECONDS, POLL_SECONDS.
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

APPLICATIONS_PATH = "/api/serve/applications/?api_type=declarative"
COMPARED = ("import_path", "route_prefix", "args", "runtime_env", "deployments")
"""What identifies an application's config; Ray adds a global logging_config to what it stores."""
FAILED = {"DEPLOY_FAILED", "UNHEALTHY"}


def same_config(deployed: dict[str, Any] | None, expected: dict[str, Any]) -> bool:
    return deployed is not None and all(deployed.get(k) == expected.get(k) for k in COMPARED)


def verdict(expected: list[dict[str, Any]], details: dict[str, Any]) -> tuple[str, str]:
    """("ok" | "failed" | "waiting", what to say) for one answer of the dashboard."""
    applications = details.get("applications") or {}
    waiting = []
    for app in expected:
        name = app["name"]
        found = applications.get(name)
        if found is None:
            waiting.append(f"{name}: not deployed yet")
            continue
        status = found.get("status", "?")
        if not same_config(found.get("deployed_app_config"), app):
            waiting.append(f"{name}: still running the previous config ({status})")
        elif status in FAILED:
            messages = [found.get("message") or ""] + [
                f"{d}: {info.get('message')}"
                for d, info in (found.get("deployments") or {}).items()
                if info.get("message")
            ]
            return "failed", f"{name} {status}: " + " | ".join(m for m in messages if m)
        elif status != "RUNNING":
            waiting.append(f"{name}: {status}")
    return ("waiting", "; ".join(waiting)) if waiting else ("ok", "every application runs the new config")


def request(url: str, token: str | None) -> urllib.request.Request:
    """Serve's REST API on the dashboard, with Ray's token when the cluster has one."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return urllib.request.Request(url + APPLICATIONS_PATH, headers=headers)


def read_token(path: str | None) -> str | None:
    """Ray's token from the mounted Secret, None when the Job is given none."""
    if not path:
        return None
    with open(path) as handle:
        return handle.read().strip()


def fetch(url: str, token: str | None = None) -> dict[str, Any]:
    with urllib.request.urlopen(request(url, token), timeout=30) as response:
        return json.load(response)


def wait(
    expected: list[dict[str, Any]],
    ask: Callable[[], dict[str, Any]],
    deadline_s: float,
    poll_s: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    say: Callable[[str], None] = print,
) -> tuple[bool, str]:
    start, last = clock(), "no answer from the Ray dashboard yet"
    while clock() - start < deadline_s:
        try:
            state, last = verdict(expected, ask())
        except urllib.error.HTTPError as error:
            if error.code in (401, 403):  # waiting cannot mend a token: say so now
                return False, (
                    f"the Ray dashboard refused the token ({error.code}): RAY_AUTH_TOKEN_FILE must hold key "
                    "auth_token of the Secret the RayService's authOptions.secretName names"
                )
            state, last = "waiting", f"Ray dashboard answered {error.code}"
        except (urllib.error.URLError, OSError, ValueError) as error:
            state, last = "waiting", f"Ray dashboard not answering: {error}"
        if state != "waiting":
            return state == "ok", last
        say(last)
        sleep(poll_s)
    return False, f"not serving the new config after {deadline_s:.0f} s; last seen: {last}"


def main() -> int:
    with open(os.environ["EXPECTED"]) as handle:
        expected = json.load(handle)
    url = os.environ["DASHBOARD_URL"].rstrip("/")
    token = read_token(os.environ.get("RAY_AUTH_TOKEN_FILE"))
    ok, message = wait(
        expected,
        lambda: fetch(url, token),
        float(os.environ.get("DEADLINE_SECONDS", "2400")),
        float(os.environ.get("POLL_SECONDS", "10")),
    )
    print(message, flush=True)
    try:  # the pod's termination message: what `kubectl describe` and the Job's events show
        with open("/dev/termination-log", "w") as log:
            log.write(message[:4000])
    except OSError:
        pass
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
