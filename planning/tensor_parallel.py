"""Which prefill and decode tensor-parallel sizes vLLM 0.26's NIXL connector can pair, read in its source
(the PyPI wheel vllm-0.26.0, the version Ray 2.58's `llm` extra pins; docs/design.md, "Per-side engine
settings"):

- the sizes must divide one another, in either direction: the handshake's `tp_ratio` asserts it
  (distributed/kv_transfer/kv_connector/utils.py:521-538). Decode larger than prefill: several decode
  ranks read their heads' slices of one prefill rank; prefill larger: one decode rank reads from several
  prefill ranks (nixl/tp_mapping.py:66-140, Mamba state included);
- an attention-only model (not MLA) cannot have prefill larger than decode once prefill's ranks hold
  replicated KV heads (prefill TP above the model's KV heads): `_validate_remote_agent_handshake`
  asserts against it (nixl/base_worker.py:1690-1697);
- a hybrid model (Mamba / Gated DeltaNet state layers) runs vLLM's hybrid KV cache manager, whose NIXL
  path asserts equal block sizes on both ends (base_worker.py:1715-1718). vLLM sizes a hybrid model's
  attention block so its page covers the state layers' page (platforms/interface.py:765-880): per rank,
  attention holds max(1, KV heads / TP) heads (config/model.py:1328-1339) and the state 1/TP of the
  whole, so the block size is the same on both sides only while neither side's TP exceeds the KV heads.

What cannot be read offline (an unknown model's KV heads, whether it is MLA) is said at preview, not
refused: the handshake fails at the first request, in the logs of both sides.
"""

from __future__ import annotations

from config import PROJECT
from config.serving import SIDES, ModelConfig
from planning.capacity import KNOWN_MODELS
from planning.kv_path import hybrid_layers


def pair_problem(prefill: int, decode: int, kv_heads: int | None, hybrid: bool) -> str | None:
    """Why vLLM 0.26's NIXL connector cannot move the KV cache between a prefill engine of `prefill`
    GPUs and a decode engine of `decode` GPUs; None when it can, or when only the KV heads would tell
    (`kv_heads` None)."""
    if prefill == decode:
        return None
    if max(prefill, decode) % min(prefill, decode):
        return (
            f"prefill {prefill} and decode {decode} GPUs per replica do not divide one another, which "
            "vLLM 0.26's NIXL connector requires to split the KV heads between the ranks"
        )
    if kv_heads is None:
        return None
    if hybrid and max(prefill, decode) > kv_heads:
        return (
            f"the model is hybrid (state layers beside attention) with {kv_heads} KV heads: at "
            f"{max(prefill, decode)} GPUs a rank holds a replicated head, so its KV block size differs from "
            f"the other side's, and vLLM 0.26's NIXL connector refuses different block sizes for hybrid "
            f"models; keep both sides at {kv_heads} GPUs or fewer, or give them the same size"
        )
    if not hybrid and prefill > decode and prefill > kv_heads:
        return (
            f"prefill at {prefill} GPUs holds replicated KV heads (the model has {kv_heads}), which vLLM "
            "0.26's NIXL connector cannot read into a decode engine with fewer GPUs; give prefill "
            f"{kv_heads} GPUs or fewer, or decode at least prefill's"
        )
    return None


def _kv_heads(model: ModelConfig) -> int | None:
    known = KNOWN_MODELS.get(model.source)
    return known.kv_heads if known else None


def _key(model: ModelConfig) -> str:
    """The key(s) that set the sides' sizes: the per-side ones the stack file has."""
    own = [
        f"{PROJECT}:model.{side}.tensorParallelSize"
        for side in SIDES
        if (getattr(model, side) and getattr(model, side).tensor_parallel_size is not None)
    ]
    if len(own) == 1:
        own.append(f"{PROJECT}:model.tensorParallelSize")
    return " and ".join(own)


def tensor_parallel_problems(model: ModelConfig) -> list[str]:
    """The sides' sizes refused, naming the keys (prefill and decode disaggregated only)."""
    sizes = model.tensor_parallel_sizes()
    problem = pair_problem(sizes["prefill"], sizes["decode"], _kv_heads(model), hybrid_layers(model))
    return [f"{_key(model)}: {problem}"] if problem else []


def tensor_parallel_warnings(model: ModelConfig) -> list[str]:
    """What preview says where the sides differ on a model whose KV heads it does not know."""
    sizes = model.tensor_parallel_sizes()
    prefill, decode = sizes["prefill"], sizes["decode"]
    hybrid = hybrid_layers(model)
    if prefill == decode or _kv_heads(model) or tensor_parallel_problems(model):
        return []
    if not hybrid and decode > prefill:
        return []  # decode ranks read their heads' slices, replicated heads or not
    which = "a hybrid model" if hybrid else "an attention-only model (not MLA) with prefill the larger"
    return [
        f"{_key(model)}: prefill {prefill} and decode {decode} GPUs per replica: vLLM 0.26's NIXL "
        f"connector refuses the pair at the first transfer for {which} if {model.source} has fewer KV "
        f"heads than {max(prefill, decode)}, and preview does not know its KV heads "
        '(docs/design.md, "Per-side engine settings")'
    ]
