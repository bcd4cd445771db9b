"""Device mesh and FSDP2 wrapping of a ``LlamaForCausalLM``.

FSDP1 strategy names map onto FSDP2 (``torch.distributed.fsdp.fully_shard``):

==============  ===========================================  ======================
strategy        mesh                                         reshard after forward
==============  ===========================================  ======================
FULL_SHARD      1-D ``(world,)``                             yes
SHARD_GRAD_OP   1-D ``(world,)``                             no
HYBRID_SHARD    2-D ``(replicate, shard)``, shard = ranks    yes
                per node (``LOCAL_WORLD_SIZE``)
NO_SHARD        2-D ``(world, 1)``: replicate everywhere     no
==============  ===========================================  ======================

Wrapping order: each ``LlamaDecoderLayer``, then untied input embeddings, then the root (which
keeps the final norm, ``lm_head`` and, when tied, the shared embedding: torch >= 2.13 rejects
putting a tied ``embed_tokens`` in another FSDP group than ``lm_head``).
"""

from __future__ import annotations

import torch
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

from trainer.config import ParallelConfig
from trainer.errors import ConfigError


def build_mesh(parallel: ParallelConfig, device_type: str, world_size: int, local_world_size: int) -> DeviceMesh:
    """The device mesh for ``parallel.sharding_strategy``; always explicit (never implied).

    Raises:
        ConfigError: HYBRID_SHARD when the world is not a whole number of nodes.
    """
    strategy = parallel.sharding_strategy
    if strategy in ("FULL_SHARD", "SHARD_GRAD_OP"):
        return init_device_mesh(device_type, (world_size,), mesh_dim_names=("dp_shard",))
    if strategy == "NO_SHARD":
        shape = (world_size, 1)
    else:  # HYBRID_SHARD: shard within a node, replicate across nodes
        if world_size % local_world_size:
            raise ConfigError("--sharding-strategy", f"HYBRID_SHARD needs the world size ({world_size}) "
                              f"to be a multiple of ranks per node ({local_world_size})",
                              "use the same number of ranks on every node")
        shape = (world_size // local_world_size, local_world_size)
    return init_device_mesh(device_type, shape, mesh_dim_names=("dp_replicate", "dp_shard"))


def mixed_precision_policy(name: str) -> MixedPrecisionPolicy:
    """``fp32`` (none), ``bf16`` (bf16 compute, fp32 reduction) or ``pure-bf16`` (bf16 both)."""
    if name == "bf16":
        return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    if name == "pure-bf16":
        return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16)
    return MixedPrecisionPolicy()


def apply_fsdp(model: torch.nn.Module, mesh: DeviceMesh, parallel: ParallelConfig) -> torch.nn.Module:
    """Shard ``model`` in place with FSDP2 as the module docstring describes; returns it."""
    if parallel.mixed_precision == "pure-bf16":
        model.to(torch.bfloat16)
    policy = mixed_precision_policy(parallel.mixed_precision)
    reshard = parallel.sharding_strategy in ("FULL_SHARD", "HYBRID_SHARD")
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh, reshard_after_forward=reshard, mp_policy=policy)
    tied = model.get_input_embeddings().weight is model.get_output_embeddings().weight
    if not tied:
        fully_shard(model.model.embed_tokens, mesh=mesh, reshard_after_forward=reshard, mp_policy=policy)
    fully_shard(model, mesh=mesh, reshard_after_forward=reshard, mp_policy=policy)
    return model
