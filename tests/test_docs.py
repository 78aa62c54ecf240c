"""The docs stay true: the configuration reference is what the models generate, the versions the design
notes name are the pinned ones, every relative link and anchor resolves, and the README's test command
is what CI runs."""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from config import versions
from config.reference import reference
from tests import doc_toc
from tests.fakes.pulumi import ROOT, StackRun

DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchors(page: Path) -> set[str]:
    """GitHub's heading slugs: lower case, punctuation dropped, spaces to hyphens."""
    headings = re.findall(r"^#+ (.+)$", page.read_text(), flags=re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in headings}


def test_configuration_reference_is_generated_from_the_models():
    regenerate = ".venv/bin/python -m config.reference > docs/configuration.md"
    assert (ROOT / "docs" / "configuration.md").read_text() == reference(), f"out of date: run `{regenerate}`"


def test_design_notes_name_the_pinned_versions():
    design = (ROOT / "docs" / "design.md").read_text()
    for version in (
        versions.KUBERNETES_VERSION,
        versions.KUBERAY_CHART_VERSION,
        versions.NVIDIA_DEVICE_PLUGIN_CHART_VERSION,
        versions.EFA_DEVICE_PLUGIN_CHART_VERSION,
        versions.RAY_VERSION,
        versions.RAY_LLM_IMAGE_TAG,
    ):
        assert version in design, version


@pytest.mark.parametrize("page", DOCS, ids=lambda p: p.name)
def test_relative_links_and_anchors_resolve(page: Path):
    for target in LINK.findall(page.read_text()):
        if target.startswith(("http://", "https://")):
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        assert linked.is_file(), f"{page.name}: link to missing {target}"
        if anchor:
            assert anchor in anchors(linked), f"{page.name}: no heading for #{anchor} in {linked.name}"


def test_readme_is_an_entry_page_and_its_test_command_is_what_ci_runs():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 120, "the README is one or two screens; details go to docs/"
    assert "bash .ci/run" in readme
    assert "python -m pytest" in (ROOT / ".ci" / "run").read_text()


LIVE_TIER = ".venv/bin/python -m pytest tests/live -n 0"


def test_ci_runs_the_live_tier_after_the_suite_which_leaves_it_out():
    """docs/design.md, "What the live tier proves": its own step after pytest, so pytest's stated time
    holds; the server binary it needs is what .ci/run unpacks."""
    run = (ROOT / ".ci" / "run").read_text()
    assert run.index(".venv/bin/python -m pytest\n") < run.index(LIVE_TIER)
    assert "[ ! -x .cache/promtool/usr/bin/prometheus ]" in run
    options = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert "tests/live" in options["norecursedirs"]
    assert LIVE_TIER in (ROOT / "docs" / "design.md").read_text()


def commands(pattern: str) -> set[str]:
    """Every match of `pattern` (one group) in the README and docs/."""
    return {m for page in DOCS for m in re.findall(pattern, page.read_text())}


def test_every_stack_output_the_docs_name_exists(dev_stack: StackRun):
    named = commands(r"pulumi stack output (\w+)")
    assert named and named <= set(dev_stack.exports), named - set(dev_stack.exports)


def test_every_make_target_the_docs_name_exists():
    targets = set(re.findall(r"^([a-z-]+):", (ROOT / "Makefile").read_text(), flags=re.MULTILINE))
    named = commands(r"`make (\w+)")
    assert named and named <= targets, named - targets


def test_ops_runs_from_the_project_venv_with_real_commands():
    from ops.cli import build_parser

    typed = commands(r"([^\s`]*python) -m ops (\w+)")
    assert typed
    subcommands = set(build_parser()._subparsers._group_actions[0].choices)  # type: ignore[union-attr]
    for python, command in typed:
        assert python == ".venv/bin/python", f"`{python} -m ops {command}`: use the project's .venv"
        assert command in subcommands, command


def test_state_backend_is_declared_where_every_pulumi_command_reads_it():
    project = yaml.safe_load((ROOT / "Pulumi.yaml").read_text())
    assert project["backend"] == {"url": "file://~"}  # the project file's schema allows only `url`
    assert "PULUMI_BACKEND_URL" not in (ROOT / "Makefile").read_text()
    assert "upsert: true" not in (ROOT / ".github" / "workflows" / "preview.yml").read_text()


def test_the_outputs_table_lists_every_output_the_stack_exports(dev_stack: StackRun):
    section = (ROOT / "docs" / "operations.md").read_text().split("## Outputs", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"^\| `(\w+)` \|", section, re.M))
    assert listed == set(dev_stack.exports), (
        set(dev_stack.exports) - listed,
        listed - set(dev_stack.exports),
    )


def test_the_kv_path_the_docs_state_is_the_one_the_stacks_render():
    """README's picture and design.md's KV path table say what planning/kv_path.py decides, for dev (g6
    and the hybrid default model) and for a P-series stack."""
    from planning import plan_stack
    from planning.kv_path import MECHANISM_NAMES
    from tests.fakes.pulumi import stack_settings

    dev = plan_stack(stack_settings("dev"), stack="dev")
    p5 = plan_stack(
        stack_settings("dev", gpuNodes={"instanceType": "p5.48xlarge"}, model={"tensorParallelSize": 8}),
        stack="dev",
    )
    (picture,) = [line for line in (ROOT / "README.md").read_text().splitlines() if "KV cache: NIXL" in line]
    assert f"NIXL {'+'.join(dev.kv_path.backends)} over EFA" in picture
    assert "emulated reads on g6" in picture and dev.kv_path.mechanism == "emulated"
    assert "GPUDirect RDMA on p5" in picture and p5.kv_path.mechanism == "gpudirect"
    design = (ROOT / "docs" / "design.md").read_text()
    (row,) = [line for line in design.splitlines() if line.startswith("| none (g5, g6, g6e) | hybrid")]
    assert f"LIBFABRIC, GPU | {MECHANISM_NAMES[dev.kv_path.mechanism]} |" in row
    assert dev.kv_floor.gbytes_s is not None and row.endswith(f"{dev.kv_floor.gbytes_s:.2f} |")
    assert dev.kv_crossing.summary().endswith(
        design.split("prompt's KV (32 KiB a token")[1].split("crosses in ")[1].split(",")[0]
    )
    # design.md's sentences on dev: its backends and buffers, and the wire and mechanism they give
    flat = " ".join(design.split())
    backends = f"[{', '.join(dev.kv_path.backends)}]"
    buffers = {"cuda": "GPU", "cpu": "host"}[dev.kv_path.buffer_device]
    assert (
        f"So the dev stack runs the seed's configuration, `backends: {backends}` with {buffers} buffers"
        in flat
    )
    assert "the KV cache crosses EFA on g6, by emulated reads" in flat and dev.kv_path.over_efa
    assert f"kv_connector_extra_config: {{backends: {backends}}}" in flat
    description = yaml.safe_load((ROOT / "Pulumi.yaml").read_text())["description"]
    assert f"NIXL ({'+'.join(dev.kv_path.backends)} over EFA by default)" in description


def make_help(target: str) -> str:
    """The help line of a Makefile target (what `make` alone prints for it)."""
    (line,) = re.findall(rf"^{target}:.*?## (.+)$", (ROOT / "Makefile").read_text(), flags=re.M)
    return line


def test_make_destroy_help_says_what_destroy_keeps_by_default(dev_stack: StackRun):
    """Each store the help line names as kept is kept by the dev stack's defaults, and the one it does not
    name (the log group) is deleted. The load balancer Service goes first: it depends on the controller,
    its IAM and the nodes it runs on, so destroy deletes it before them (tests/test_teardown.py)."""
    help_line = make_help("destroy")
    bucket = dev_stack.one("aws:s3/bucket:Bucket")
    storage = dev_stack.one("kubernetes:storage.k8s.io/v1:StorageClass")
    logs = dev_stack.one("aws:cloudwatch/logGroup:LogGroup")
    kept = {
        "stops at a non-empty model bucket": not bucket.inputs.get("forceDestroy"),
        "Prometheus's volume": storage.inputs["reclaimPolicy"] == "Retain",
        "KMS keys": all(k.retain_on_delete for k in dev_stack.of_type("aws:kms/key:Key")),
        "log group": bool(logs.retain_on_delete),
    }
    assert {phrase for phrase in kept if phrase in help_line} == {p for p, k in kept.items() if k}, help_line
    assert "the NLB's Service first" in help_line


class TestMakeDestroy:
    """`make destroy` against a fake `pulumi` on PATH: the kept keys, and how to finish when it stops; the
    bucket's advice only where the stack still holds its bucket, and no advice at all for a stack that
    does not exist."""

    KEYS = ["arn:aws:kms:sa-east-1:123456789012:key/a", "arn:aws:kms:sa-east-1:123456789012:key/b"]
    BUCKET = {"type": "aws:s3/bucket:Bucket", "inputs": {"bucket": "b", "forceDestroy": False}}

    def destroy(
        self,
        tmp_path: Path,
        destroy_rc: int | None,
        stacks: tuple[str, ...] = ("dev",),
        resources: tuple[dict[str, Any], ...] = (BUCKET,),
    ) -> subprocess.CompletedProcess[str]:
        """`make destroy` with a fake Pulumi CLI whose destroy exits `destroy_rc` (None: no CLI at all),
        whose backend holds `stacks`, and whose state holds `resources` after the destroy."""
        fakes = tmp_path / "bin"
        fakes.mkdir()
        path = str(fakes)
        if destroy_rc is not None:
            listed = json.dumps([{"name": f"organization/ray-llm-eks/{s}"} for s in stacks])
            state = json.dumps({"version": 3, "deployment": {"resources": list(resources)}})
            fake = fakes / "pulumi"
            fake.write_text(
                "#!/bin/sh\n"
                'case "$1 $2 $3" in\n'
                f"  'stack ls --json') echo '{listed}' ;;\n"
                f"  'stack output keptKeyArns') echo '{json.dumps(self.KEYS)}' ;;\n"
                f"  'stack export --stack') echo '{state}' ;;\n"
                f"  destroy*) touch {tmp_path}/destroyed; exit {destroy_rc} ;;\n"
                "  *) exit 3 ;;\n"
                "esac\n"
            )
            fake.chmod(0o755)
            path = f"{fakes}:{Path(sys.executable).parent}:/usr/bin:/bin"
        make = shutil.which("make")
        assert make, "make is not installed"
        return subprocess.run(
            [make, "--no-print-directory", "-C", str(ROOT), "destroy", "STACK=dev"],
            env={"PATH": path, "HOME": str(tmp_path)},
            capture_output=True,
            text=True,
            check=False,
        )

    def test_after_destroy_it_prints_each_kept_key_with_the_command_that_deletes_it(self, tmp_path: Path):
        done = self.destroy(tmp_path, 0)
        assert done.returncode == 0, done.stderr
        for key in self.KEYS:
            assert f"aws kms schedule-key-deletion --key-id {key} --pending-window-in-days 7" in done.stdout
        assert "keepVolumeOnDestroy" in done.stdout

    def test_when_destroy_stops_at_the_bucket_it_says_how_to_finish(self, tmp_path: Path):
        done = self.destroy(tmp_path, 255)
        assert done.returncode == 2  # make's own status for a failed recipe
        assert "BucketNotEmpty" in done.stderr
        assert "modelCache.forceDestroy" in done.stderr and "--continue-on-error" in done.stderr
        (stalls,) = re.findall(r'"(If a destroy stalls)"', done.stderr)
        assert f"\n{stalls}:\n" in (ROOT / "docs" / "operations.md").read_text().split("## Teardown")[1]
        assert all(key in done.stderr for key in self.KEYS)

    def test_when_the_bucket_is_gone_or_empties_itself_no_bucket_advice(self, tmp_path: Path):
        forced = {**self.BUCKET, "inputs": {"bucket": "b", "forceDestroy": True}}
        for i, resources in enumerate(((), (forced,))):
            (tmp_path / str(i)).mkdir()
            done = self.destroy(tmp_path / str(i), 255, resources=resources)
            assert done.returncode == 2
            assert "BucketNotEmpty" not in done.stderr and "If a destroy stalls" in done.stderr

    def test_a_stack_that_does_not_exist_is_said_so_and_nothing_runs(self, tmp_path: Path):
        done = self.destroy(tmp_path, 255, stacks=("prod",))
        assert done.returncode == 2
        assert "lists no stack dev of this project" in done.stderr
        assert "BucketNotEmpty" not in done.stderr and not (tmp_path / "destroyed").exists()

    def test_without_the_pulumi_cli_it_says_where_to_get_it(self, tmp_path: Path):
        done = self.destroy(tmp_path, None)
        assert done.returncode == 2
        assert f"not on PATH; install it: {PULUMI_INSTALL_URL}" in done.stderr


PULUMI_INSTALL_URL = "https://www.pulumi.com/docs/iac/download-install/"


def test_one_pulumi_install_url_everywhere():
    """README, docs/, the Makefile, `ops preflight` and the workflows send people to one page."""
    places = [*DOCS, ROOT / "Makefile", *(ROOT / "ops").glob("*.py"), *(ROOT / ".github").rglob("*.yml")]
    urls = {
        u
        for p in places
        for u in re.findall(r"https://www\.pulumi\.com/docs/[\w/.-]*install[\w/-]*", p.read_text())
    }
    assert urls == {PULUMI_INSTALL_URL}


def test_make_and_ci_share_the_venvs_stamps():
    """What .ci/run installed, make does not install again (and the other way round): both stamp .venv
    with a copy of the requirement file installed."""
    makefile = (ROOT / "Makefile").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    for variable, installed in (("VENV", "requirements.lock"), ("DEV_VENV", "requirements-dev.txt")):
        (stamp,) = re.findall(rf"^{variable} := (\S+)$", makefile, flags=re.M)
        assert f"cp {installed} {stamp}\n" in ci, (variable, stamp)
        assert f"cmp -s {installed} {stamp}" in ci, (variable, stamp)
        assert re.search(rf"^\$\({variable}\): .*\n(\t.*\n)*\t@cp {installed} \$@$", makefile, flags=re.M), (
            variable
        )


def test_make_schemas_keeps_the_npm_stamp_ci_reads():
    """`npm ci` empties node_modules and its stamp with it: `make schemas` writes the stamp .ci/run's
    npm_ci compares, so the next `.ci/run` does not install the schemas again."""
    ci = (ROOT / ".ci" / "run").read_text()
    (stamp,) = re.findall(r'stamp="\$1/(node_modules/[^"]+)"', ci)
    assert 'cmp -s "$lock" "$stamp"' in ci and 'cp "$lock" "$stamp"' in ci
    makefile = (ROOT / "Makefile").read_text()
    (npm,) = re.findall(r"^NPM_SCHEMAS := (\S+)$", makefile, flags=re.M)
    assert "npm_ci " + npm in ci
    recipe = makefile.split("\nschemas:", 1)[1].split("\n\n", 1)[0].replace("$(NPM_SCHEMAS)", npm)
    assert f"cmp -s {npm}/package-lock.json {npm}/{stamp}" in recipe
    assert f"&& cp {npm}/package-lock.json {npm}/{stamp};" in recipe


def test_the_readmes_port_forward_reaches_devs_gateway_where_the_keys_are_checked(dev_stack: StackRun):
    """A laptop cannot reach the internal NLB: the README forwards the load balancer Service's port (Envoy,
    which checks the API keys), as dev renders it."""
    readme = (ROOT / "README.md").read_text()
    (namespace, service, port) = re.findall(
        r"^kubectl port-forward -n (\S+) svc/(\S+) \d+:(\d+) ", readme, re.M
    )[0]
    assert f"{namespace}/{service}" == dev_stack.exports["loadBalancerService"]
    (lb,) = [
        r
        for r in dev_stack.of_type("kubernetes:core/v1:Service")
        if r.inputs["metadata"]["name"] == service and r.inputs["metadata"]["namespace"] == namespace
    ]
    assert [p["port"] for p in lb.inputs["spec"]["ports"]] == [int(port)]
    assert lb.inputs["spec"]["type"] == "LoadBalancer"


@pytest.mark.parametrize("page", doc_toc.PAGES, ids=lambda p: p.name)
def test_the_long_pages_open_with_their_contents_as_generated(page: Path):
    text = page.read_text()
    assert text.count(doc_toc.BEGIN) == 1 and text.count(doc_toc.END) == 1, page.name
    assert doc_toc.with_contents(text) == text, f"{page.name}: contents out of date: run `make docs`"


def test_the_traffic_table_is_generated_from_the_flows():
    text = doc_toc.DESIGN.read_text()
    assert text.count(doc_toc.TRAFFIC_BEGIN) == 1 and text.count(doc_toc.TRAFFIC_END) == 1
    assert doc_toc.with_traffic(text) == text, "design.md: the traffic table is out of date: run `make docs`"


def test_the_docs_name_the_model_cache_bucket_as_the_stack_does(dev_stack: StackRun):
    from planning.model_cache import KEY_LENGTH, bucket_key, default_bucket, legacy_bucket

    pattern = "<cluster>-models-<key>-<account>-<region>"
    for page in ("operations.md", "configuration.md"):
        assert f"`{pattern}`" in (ROOT / "docs" / page).read_text(), page
    operations = " ".join((ROOT / "docs" / "operations.md").read_text().split())
    key = f"where `<key>` is {KEY_LENGTH} hex characters of a hash of the stack, cluster"
    assert f"`{pattern}`, {key}" in operations
    assert "`<cluster cut to 24>-models-<account>-<region>`" in operations
    assert legacy_bucket("c" * 30, "1", "r") == "c" * 24 + "-models-1-r"
    bucket = dev_stack.one("aws:s3/bucket:Bucket").inputs["bucket"]
    cluster, namespace = dev_stack.exports["clusterName"], dev_stack.exports["namespace"]
    assert bucket == default_bucket("dev", cluster, namespace, "123456789012", "sa-east-1")
    assert bucket == f"{cluster}-models-{bucket_key('dev', cluster, namespace)}-123456789012-sa-east-1"


@pytest.mark.parametrize(
    ("workflow", "phrases"),
    [
        ("preview", ["`pulumi preview` of {stacks} with the policy pack", "a preview of {stacks}"]),
        (
            "drift",
            ["`pulumi preview --refresh --expect-no-changes` of {stacks}", "a refresh preview of {stacks}"],
        ),
    ],
)
def test_the_docs_name_the_stacks_each_workflow_runs_for(workflow: str, phrases: list[str]):
    """operations.md's Delivery table and the README say which stacks a workflow's matrix holds: "each
    stack" only where it holds every stack file CI deploys (the examples are deployed nowhere)."""
    from tests.fakes.pulumi import committed_stack_files

    document = yaml.safe_load((ROOT / ".github" / "workflows" / f"{workflow}.yml").read_text())
    (job,) = document["jobs"].values()
    matrix = job["strategy"]["matrix"]["stack"]
    delivered = [s for s in committed_stack_files() if not s.endswith(".example")]
    stacks = "each stack" if sorted(matrix) == sorted(delivered) else " and ".join(matrix)
    (row,) = [
        line
        for line in (ROOT / "docs" / "operations.md").read_text().splitlines()
        if line.startswith(f"| `{workflow}.yml` |")
    ]
    readme = " ".join((ROOT / "README.md").read_text().split())
    for phrase, text in zip(phrases, (row, readme), strict=True):
        assert phrase.format(stacks=stacks) in text, (workflow, phrase.format(stacks=stacks))


def test_the_policy_packs_rules_are_counted_and_listed_as_the_pack_holds_them():
    from policy.rules import POLICIES

    words = [
        "zero",
        "one",
        "two",
        "three",
        "four",
        "five",
        "six",
        "seven",
        "eight",
        "nine",
        "ten",
        "eleven",
        "twelve",
    ]
    operations = " ".join((ROOT / "docs" / "operations.md").read_text().split())
    (count, listed) = re.findall(
        r"\(`policy/`, (\w+) mandatory rules: (.+?)\) runs in every preview", operations
    )[0]
    assert count == words[len(POLICIES)], f"the pack holds {len(POLICIES)} rules, operations.md says {count}"
    assert len(listed.split(", ")) == len(POLICIES), listed
    assert all(str(p.enforcement_level) == "EnforcementLevel.MANDATORY" for p in POLICIES)


def code_strings(*folders: str) -> list[str]:
    """Every string literal of the Python in `folders`, an f-string's literal runs each on its own (the
    words between its placeholders, implicit concatenation already joined)."""
    found: list[str] = []
    for folder in folders:
        for path in sorted((ROOT / folder).glob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    found.append(node.value)
    return found


def refusal_tables() -> list[list[str]]:
    """The rows of operations.md's tables of refusals (condition | message | fix), as cells."""
    rows: list[list[str]] = []
    for table in (ROOT / "docs" / "operations.md").read_text().split("| condition | message | fix |\n")[1:]:
        for line in table.split("\n\n", 1)[0].splitlines()[1:]:
            rows.append([cell.strip() for cell in line.strip("|").split(" | ")])
    return rows


def test_the_refusals_the_docs_quote_are_the_codes_messages():
    """Both refusal tables (an existing cluster, a reservation): every quoted part of a message is words
    the code writes (config/, planning/, world/), so a reworded message fails here until the table follows."""
    rows = refusal_tables()
    assert len(rows) >= 20, len(rows)
    strings = code_strings("config", "planning", "world")
    for condition, message, fix in rows:
        quoted = re.findall(r'"([^"]+)"', message)
        assert quoted and condition and fix, (condition, message)
        for words in quoted:
            assert any(words in s for s in strings), f"no message of the code says {words!r}"


def test_the_alerts_table_lists_every_alert_the_stack_renders():
    from manifests.observability.kv_path import KvPathFigures
    from manifests.observability.rules import alert_rules
    from tests.fakes.pulumi import plan_of, stack_settings

    section = (
        (ROOT / "docs" / "operations.md").read_text().split("## Observability", 1)[1].split("\n## ", 1)[0]
    )
    table = section.split("| alert | fires when | severity |", 1)[1].split("\n\n", 1)[0]
    listed = dict(re.findall(r"^\| `(\w+)` \| .* \| (\w+) \|$", table, re.M))
    rendered = {
        r["alert"]: r["labels"]["severity"]
        for g in alert_rules(stack_settings("dev"), kv=KvPathFigures.of(plan_of("dev"), 1))
        for r in g["rules"]
        if "alert" in r
    }
    assert listed == rendered


def test_design_md_counts_the_tests_as_the_suite_holds_them(request: pytest.FixtureRequest):
    """design.md gives the suite's size rounded down to a hundred: it holds while the suite grows. Only
    a session that collected every test module can count them."""
    design = " ".join((ROOT / "docs" / "design.md").read_text().split())
    (floor,) = re.findall(r"\(more than ([0-9,]+) tests\b", design)
    modules = {Path(str(item.fspath)).name for item in request.session.items}
    if modules != {p.name for p in (ROOT / "tests").glob("test_*.py")}:
        pytest.skip("a part of the suite was collected: nothing to count")
    assert len(request.session.items) > int(floor.replace(",", ""))


def _flat(path: Path) -> str:
    return " ".join(path.read_text().split())


STACK_COMMANDS = re.compile(r"pulumi (?:stack output|config set)[^`\n|)]*")


def test_every_documented_stack_output_and_config_call_names_its_stack():
    """A bare `pulumi stack output` reads whichever stack `make up` last selected."""
    for page in DOCS:
        text = page.read_text()
        for command in STACK_COMMANDS.findall(text):
            assert "--stack" in command.split("&&")[0], (page.name, command)
    readme = (ROOT / "README.md").read_text()
    (call,) = re.findall(r"\[\"pulumi\", \"stack\", \"output\"[^\]]*\]", readme)
    assert '"--stack", "dev"' in call


def test_the_readme_names_what_its_commands_and_client_need():
    readme = (ROOT / "README.md").read_text()
    needs = " ".join(readme.split("## Clone to a running stack", 1)[1].split("\n\n", 2)[1].split())
    (commands,) = re.findall(r"```bash\n(.*?)```", readme.split("## Clone to green tests")[0], re.S)
    named = {"pulumi": "[Pulumi CLI]", "kubectl": "kubectl", "aws": "AWS CLI v2"}
    for tool, name in named.items():
        if re.search(rf"(^|[(; ]){tool} ", commands, re.M):
            assert name in needs, tool
    (snippet,) = re.findall(r"```python\n(.*?)```", readme, re.S)
    imported = {m.split(".")[0] for m in re.findall(r"^(?:from|import) (\w[\w.]*)", snippet, re.M)}
    locked = (ROOT / "requirements.lock").read_text()
    for module in sorted(imported - set(sys.stdlib_module_names)):
        assert f"\n{module}==" not in locked  # else `make` installs it and the README need not say so
        assert f"(`pip install {module}`)" in readme, module


def test_the_quotas_the_docs_name_are_those_preflight_checks_for_dev():
    from ops.preflight import vcpus_needed
    from tests.fakes.pulumi import stack_settings

    needed = vcpus_needed(stack_settings("dev"))
    assert len(needed) == 2  # the GPU nodes' and the system nodes' (Standard)
    readme, operations = _flat(ROOT / "README.md"), _flat(ROOT / "docs" / "operations.md")
    for (code, name), vcpus in needed.items():
        for page, text in (("README.md", readme), ("operations.md", operations)):
            assert f'{vcpus} of "{name}" ({code}' in text, (page, code)
        assert f"{vcpus} of {code}" in operations


def test_the_kubeconfig_the_readme_writes_is_private_and_never_committed():
    readme = (ROOT / "README.md").read_text()
    (line,) = [line for line in readme.splitlines() if "> kubeconfig.json" in line]
    assert line.startswith("(umask 077; pulumi stack output kubeconfig --stack dev")
    ignored = subprocess.run(["git", "check-ignore", "-q", "kubeconfig.json"], cwd=ROOT, check=False)
    assert ignored.returncode == 0, ".gitignore must list kubeconfig.json"


def test_the_docs_say_which_install_a_bare_pulumi_makes_and_the_policy_pack_uses_the_lock():
    project = yaml.safe_load((ROOT / "Pulumi.yaml").read_text())
    assert project["runtime"]["options"] == {"toolchain": "pip", "virtualenv": ".venv"}
    makefile = (ROOT / "Makefile").read_text()
    assert "--require-hashes -r requirements.lock" in makefile
    assert "--require-hashes -r policy/requirements.lock" in makefile
    operations = _flat(ROOT / "docs" / "operations.md")
    assert "`make venv`" in operations and "installs `requirements.lock`, every package pinned" in operations
    assert "Pulumi installs `requirements.txt` there" in operations
    assert "pip install -r policy/requirements.txt" not in operations and "make policy " in operations


def test_the_exit_code_table_says_what_preflight_exits_with():
    from ops.preflight import Finding, format_findings

    operations = _flat(ROOT / "docs" / "operations.md")
    _, failed = format_findings([Finding(False, "GPU quota", "0 vCPUs")])
    _, passed = format_findings([Finding(True, "GPU quota", "64 vCPUs")])
    assert (passed, failed) == (0, 2)
    assert f"`preflight` exits {failed} for any problem it finds, not 1" in operations


def test_the_readmes_picture_is_devs_cluster():
    """The picture's Kubernetes version, system node type and GPU nodes are dev's, as its stack file and
    the defaults give them."""
    from tests.fakes.pulumi import stack_settings

    dev = stack_settings("dev")
    readme = (ROOT / "README.md").read_text()
    assert f'subgraph EKS["EKS {dev.cluster.kubernetes_version} (' in readme
    assert f'subgraph sys["system node group: {dev.system_nodes.instance_type}, role=system"]' in readme
    gpu = f'subgraph gpu["GPU node group: {dev.gpu_nodes.desired_size} x {dev.gpu_nodes.instance_type}, '
    assert gpu in readme
    nodes = f"{dev.gpu_nodes.desired_size} x {dev.gpu_nodes.instance_type}"
    assert f"{nodes} and an {dev.system_nodes.instance_type}" in _flat(ROOT / "README.md")
