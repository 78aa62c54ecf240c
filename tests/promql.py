"""PromQL as the tests read it: a dashboard query as Grafana sends it, and the metric names a query reads
(promql-parser, the Prometheus parser's Rust port)."""

from __future__ import annotations

import re
from typing import Any

import promql_parser


def grafana_free(expr: str) -> str:
    """A dashboard query with Grafana's variables replaced, as Grafana sends it to Prometheus."""
    for variable, value in (
        ("$__rate_interval", "5m"),
        ("$__range", "1h"),
        ("$__interval", "1m"),
        ("$interval", "1m"),
    ):
        expr = expr.replace(variable, value)
    expr = re.sub(r"\$\{?(\w+)(?::\w+)?\}?", ".*", expr)
    return expr


def metric_names(expr: str) -> set[str]:
    names: set[str] = set()

    def visit(node: Any) -> None:
        selector = node.vector_selector if isinstance(node, promql_parser.MatrixSelector) else node
        if isinstance(selector, promql_parser.VectorSelector):
            if selector.name:
                names.add(selector.name)
            for matcher in selector.matchers.matchers:
                if matcher.name == "__name__" and matcher.op == promql_parser.MatchOp.Equal:
                    names.add(matcher.value)

    promql_parser.walk(promql_parser.parse(expr), visit)
    return names
