"""`ray.serve.llm.request_router` importable without vLLM, as it is in the serving image, for the tests
that resolve a router class path (tests/validators.py) and the live tier's router driver."""

from __future__ import annotations

import functools
import importlib
import importlib.util
import sys
import types
from pathlib import Path


@functools.cache
def public_request_routers() -> None:
    """Make `ray.serve.llm.request_router` importable here as it is in the image. Its package's
    `__init__` imports Ray Serve LLM's protocol models, which need vLLM; the module itself needs only
    Ray. So Ray's own file is loaded under its own name, and a router class path in a serve config
    resolves to the class the cluster would load (or fails as it would there)."""
    try:
        importlib.import_module("ray.serve.llm.request_router")
        return
    except ImportError:
        pass
    import ray.serve

    root = Path(ray.serve.__file__).parent / "llm"
    package = types.ModuleType("ray.serve.llm")
    package.__path__ = [str(root)]
    sys.modules["ray.serve.llm"] = package
    spec = importlib.util.spec_from_file_location("ray.serve.llm.request_router", root / "request_router.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
