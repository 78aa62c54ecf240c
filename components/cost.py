"""The stack's hourly on-demand cost, logged at every preview and up: the Price List API through its
own us-east-1 provider (the API answers only there, in eu-central-1 and ap-south-1), answers cached a
day in a file beside the project. A price the API does not give is shown as unknown and warned about;
it never fails a preview (a stack's very first preview may not reach the API yet: its provider is new).
What is asked and how the report adds up: planning/cost.py."""

from __future__ import annotations

from collections.abc import Callable

import pulumi
import pulumi_aws as aws

from planning.cost import PRICE_REGION, CostReport, PriceCache, PriceQuery, hourly_price

ReportBuilder = Callable[[dict[str, float | None]], CostReport]
"""Prices by query key -> the report (planning.cost.cost_report, bound to the stack's settings)."""


class CostEstimate(pulumi.ComponentResource):
    report: CostReport
    """The cost by part, serving and parked."""

    def __init__(
        self,
        name: str,
        *,
        queries: list[PriceQuery],
        region: str,
        cache: PriceCache,
        build_report: ReportBuilder,
        opts: pulumi.ResourceOptions | None = None,
    ):
        super().__init__("ray-llm-eks:cost:CostEstimate", name, None, opts)
        # Declared at every run, asked or not: a provider that came and went with the cache would show
        # in every other preview's diff.
        provider = aws.Provider(
            f"{name}-pricing", region=PRICE_REGION, opts=pulumi.ResourceOptions(parent=self)
        )
        prices = cache.prices(region, [q.key for q in queries])
        missing = [q for q in queries if prices[q.key] is None]
        for query in missing:
            prices[query.key] = _ask(query, provider)
        if missing:
            cache.put(region, prices)
        self.report = build_report(prices)
        pulumi.log.info(self.report.format())
        unknown = sorted(k for k, v in prices.items() if v is None)
        if unknown:
            pulumi.log.warn(
                f"the Price List API gave no price for {', '.join(unknown)}; the cost shown is partial"
            )
        self.register_outputs({})


def _ask(query: PriceQuery, provider: aws.Provider) -> float | None:
    try:
        answer = aws.pricing.get_product(
            service_code=query.service_code,
            filters=[aws.pricing.GetProductFilterArgs(field=f, value=v) for f, v in query.filters],
            opts=pulumi.InvokeOptions(provider=provider),
        )
        return hourly_price(answer.result)
    except Exception as error:  # an invoke's failure is a bare Exception carrying AWS's message
        pulumi.log.warn(f"price of {query.key} ({query.service_code}): {error}")
        return None
