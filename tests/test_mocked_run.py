"""The mocked engine (ops/mocked_run.py) answers a registration as pulumi's own MockMonitor does: the
state the mocks give back becomes the Struct the SDK's serializer would make of it, only sooner."""

from __future__ import annotations

import asyncio

import pulumi
import pytest
from pulumi.runtime import rpc

from ops import mocked_run
from ops.mocked_run import SECRET_SIG, SIG_KEY


def test_plain_state_is_the_struct_the_sdk_makes_of_it():
    state = {
        "name": "node-group",
        "gone": None,
        "sizes": [1, 2.5, None, True, "x"],
        "nested": {"kept": None, "pair": (1, "a"), "deeper": [{"k": [False]}]},
        "token": {SIG_KEY: SECRET_SIG, "value": "s3cr3t"},
    }

    assert mocked_run.plain_state(state) == asyncio.run(rpc.serialize_properties(state, {}))


@pytest.mark.parametrize("value", [pulumi.Output.from_input("later"), b"bytes", pulumi.StringAsset("text")])
def test_anything_else_is_left_to_the_sdk(value):
    with pytest.raises(mocked_run._NotPlainError):
        mocked_run.plain_state({"property": {"inside": [value]}})
