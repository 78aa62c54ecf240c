# Thin wrappers around the Pulumi CLI. State goes to a local file backend unless you set
# PULUMI_BACKEND_URL (s3://..., or https://api.pulumi.com for Pulumi Cloud); see docs/operations.md "State".
STACK ?= dev
export PULUMI_BACKEND_URL ?= file://~

.PHONY: up preview destroy test docs render status verify

up:            ## create or update the stack (default: dev), waiting until the model serves
	pulumi stack select --create $(STACK)
	pulumi up --stack $(STACK)

preview:       ## show what `up` would change
	pulumi preview --stack $(STACK) --diff

destroy:       ## tear everything down, RayService first
	pulumi destroy --stack $(STACK)

test:          ## lint, type check and tests, in a fresh .venv (what CI runs)
	bash .ci/run

docs:          ## regenerate docs/configuration.md from the config models
	.venv/bin/python -m config.reference > docs/configuration.md

render:        ## print the serving layer's manifests, offline
	.venv/bin/python -m ops render --stack $(STACK)

status:        ## RayService and app status, pods per node, GPU/EFA capacity
	.venv/bin/python -m ops status --stack $(STACK)

verify:        ## smoke test: endpoint, completion, NIXL over LIBFABRIC, GPU/EFA capacity
	.venv/bin/python -m ops verify --stack $(STACK)
