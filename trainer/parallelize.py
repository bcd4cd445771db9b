"""Device mesh and FSDP2 wrapping of a ``LlamaForCausalLM``.

FSDP1 strategy names map onto FSDP2 (``torch.distributed.fsdp.fully_shard``):

==============  ===========================================  ======================
strategy        mesh                                         reshard after forward
==============  ===========================================  ======================
FULL_SHARD      1-D ``(world,)``                             yes
SHARD_GRAD_OP   1-D ``(world,)``                             no
HYBRID_SHARD    2-D ``(replicate, shard)``: ``--replicate-   yes
                degree`` x ``--shard-degree``, by default
                nodes x ranks per node
NO_SHARD        2-D ``(world, 1)``: replicate everywhere     no
==============  ===========================================  ======================

Order (each step needs the one before): activation checkpointing wraps the chosen decoder
layers (``checkpoint_wrapper``; before FSDP, so FSDP's hooks sit outside the recomputed
region); pure bf16 casts the skeleton; ``fully_shard`` each decoder layer, then the untied
input embeddings, then the root (which keeps the final norm, ``lm_head`` and, when tied, the
shared embedding: torch >= 2.13 rejects putting a tied ``embed_tokens`` in another FSDP group
than ``lm_head``). ``checkpoint_wrapper`` adds ``_checkpoint_wrapped_module`` to parameter
names; ``torch.distributed.checkpoint``'s state-dict helpers strip it, so checkpoints and
Hugging Face weights load whatever the checkpointing setting.
"""

from __future__ import annotations

import torch
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from transformers import LlamaForCausalLM

from trainer.runspec.config import ParallelConfig


def build_mesh(parallel: ParallelConfig, device_type: str, world_size: int, local_world_size: int) -> DeviceMesh:
    """The device mesh for ``parallel.sharding_strategy``; always explicit (never implied).

    Raises:
        UserError: degrees that do not fit the world (``ParallelConfig.mesh_shape``).
    """
    shape = parallel.mesh_shape(world_size, local_world_size)
    names = ("dp_shard",) if len(shape) == 1 else ("dp_replicate", "dp_shard")
    return init_device_mesh(device_type, shape, mesh_dim_names=names)


def apply_activation_checkpointing(model: LlamaForCausalLM, every: int) -> list[int]:
    """Wrap every ``every``-th decoder layer (0-based layers ``every-1, 2*every-1, ...``) with
    ``checkpoint_wrapper``, so its activations are recomputed in backward instead of kept.

    Args:
        model: a ``LlamaForCausalLM`` not yet sharded.
        every: 0 none, 1 every layer, N every N-th.

    Returns:
        The indices of the wrapped layers.
    """
    wrapped = []
    layers = model.model.layers
    for i in range(len(layers)):
        if every and (i + 1) % every == 0:
            layers[i] = checkpoint_wrapper(layers[i])
            wrapped.append(i)
    return wrapped


def mixed_precision_policy(name: str) -> MixedPrecisionPolicy:
    """``fp32`` (none), ``bf16`` (bf16 compute, fp32 reduction) or ``pure-bf16`` (bf16 both)."""
    if name == "bf16":
        return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    if name == "pure-bf16":
        return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16)
    return MixedPrecisionPolicy()


def parallelize(model: LlamaForCausalLM, mesh: DeviceMesh, parallel: ParallelConfig) -> LlamaForCausalLM:
    """Activation checkpointing, then FSDP2, in the order the module docstring gives; returns ``model``."""
    apply_activation_checkpointing(model, parallel.checkpoint_every())
    return apply_fsdp(model, mesh, parallel)


def apply_fsdp(model: LlamaForCausalLM, mesh: DeviceMesh, parallel: ParallelConfig) -> LlamaForCausalLM:
    """Shard ``model`` in place with FSDP2 as the module docstring describes; returns it."""
    if parallel.mixed_precision == "pure-bf16":
        torch.nn.Module.to(model, torch.bfloat16)  # transformers wraps .to in a decorator mypy misreads
    policy = mixed_precision_policy(parallel.mixed_precision)
    reshard = parallel.sharding_strategy in ("FULL_SHARD", "HYBRID_SHARD")
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh, reshard_after_forward=reshard, mp_policy=policy)
    tied = model.get_input_embeddings().weight is model.get_output_embeddings().weight
    if not tied:
        fully_shard(model.model.embed_tokens, mesh=mesh, reshard_after_forward=reshard, mp_policy=policy)
    fully_shard(model, mesh=mesh, reshard_after_forward=reshard, mp_policy=policy)
    return model
