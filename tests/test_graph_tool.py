"""The graph comparison a refactor is checked with (tests/graph.py) sees every kind of change."""

from __future__ import annotations

import copy

from tests.graph import differences, graph


def test_an_unchanged_graph_has_no_differences_and_every_change_is_named():
    before = {"dev": graph("dev")}
    assert differences(before, copy.deepcopy(before)) == []
    after = copy.deepcopy(before)
    urn, resource = next(iter(after["dev"]["resources"].items()))
    resource["inputs"]["extra"] = 1
    resource["dependencies"].append("urn:new")
    assert differences(before, after) == [f"dev: {urn} differs in dependencies, inputs"]
    del after["dev"]["resources"][urn]
    assert differences(before, after) == [f"dev: {urn} removed"]
    assert differences(before, {}) == ["dev: stack file removed"]
