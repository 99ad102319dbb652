"""nemo plans: megatron-core's TransformerConfig, DistributedDataParallelConfig and OptimizerConfig built from the
settings, with the model's shape and the plan's parallel degrees, running their own validation (__post_init__).

Versions: .ci/launch-requirements.txt (megatron-core 0.16.1).
"""

from __future__ import annotations

import pytest

from tests_real.cases import ids_for, solved

NEMO = ids_for("nemo")


@pytest.mark.parametrize("name", NEMO)
def test_transformer_config_accepts_the_model_settings(name):
    import torch
    from megatron.core.transformer import TransformerConfig
    from megatron.core.transformer.enums import AttnBackend

    case = solved(name)
    nemo = case.settings["nemo"]
    keys = dict(nemo["transformer_config"])
    keys["attention_backend"] = AttnBackend[keys["attention_backend"]]
    arch = case.model
    dtype = nemo["strategy"].get("pipeline_dtype")  # megatron-core raises for pp > 1 without it
    cfg = TransformerConfig(
        num_layers=arch.layers, hidden_size=arch.hidden, ffn_hidden_size=arch.intermediate,
        num_attention_heads=arch.heads, num_query_groups=arch.kv_heads,
        tensor_model_parallel_size=nemo["strategy"]["tensor_model_parallel_size"],
        pipeline_model_parallel_size=nemo["strategy"]["pipeline_model_parallel_size"],
        virtual_pipeline_model_parallel_size=nemo["strategy"].get("virtual_pipeline_model_parallel_size"),
        sequence_parallel=nemo["strategy"].get("sequence_parallel", False),
        pipeline_dtype=getattr(torch, dtype) if dtype else None,
        bf16=nemo["precision"] == "bf16-mixed", fp16=nemo["precision"] == "16-mixed", **keys,
    )  # fmt: skip
    assert cfg.tensor_model_parallel_size == case.plan.tp
    assert cfg.sequence_parallel == (case.plan.tp > 1)  # megatron-core refuses it without tensor parallelism
    assert cfg.virtual_pipeline_model_parallel_size == nemo["strategy"].get("virtual_pipeline_model_parallel_size")


@pytest.mark.parametrize("name", NEMO)
def test_ddp_and_optimizer_configs_accept_the_sharding_and_offload(name, monkeypatch):
    from megatron.core.distributed import DistributedDataParallelConfig
    from megatron.core.optimizer import OptimizerConfig, optimizer_config

    # the precision-aware optimizer asks TransformerEngine's version, which this CPU environment lacks (NeMo's
    # containers ship TE >= 2.1); with CPU offload it then returns before needing TE's FusedAdam
    monkeypatch.setattr(optimizer_config, "is_te_min_version", lambda *args, **kwargs: True)

    case = solved(name)
    nemo = case.settings["nemo"]
    ddp = DistributedDataParallelConfig(**nemo["ddp"])
    opt = OptimizerConfig(lr=1e-5, bf16=nemo["precision"] == "bf16-mixed", fp16=nemo["precision"] == "16-mixed",
                          **nemo["optimizer"])  # fmt: skip
    assert ddp.use_distributed_optimizer == opt.use_distributed_optimizer == (case.plan.zero_stage >= 1)
    if case.plan.offload.value != "none":
        assert opt.optimizer_cpu_offload and opt.optimizer_offload_fraction == 1.0 and opt.use_distributed_optimizer
        # Megatron-LM requires the precision-aware optimizer with CPU offload; with it the distributed optimizer keeps
        # no fp32 main copy of its shard on the GPU (distrib_optimizer.py reads this flag)
        assert opt.use_precision_aware_optimizer == (opt.optimizer == "adam")
        assert opt.use_precision_aware_optimizer_no_fp8_or_ds_fp8 == (opt.optimizer == "adam")
    if case.plan.zero_stage >= 2:
        assert ddp.use_megatron_fsdp
    data = nemo["data"]  # packed: m rows of seq_len per micro-batch become one row of m x seq_len (NeMo's own rule)
    packed = data.get("packed_sequence_specs", {}).get("packed_sequence_size")
    rows = 1 if packed is None else packed // case.scenario.seq_len
    assert packed is None or data["seq_length"] == packed  # the dataset cuts each pack at seq_length
    assert data["global_batch_size"] * rows == case.scenario.global_batch
    assert data["micro_batch_size"] * rows == case.plan.micro_batch


@pytest.mark.parametrize("name", [n for n in NEMO if "peft" in solved(n).settings["nemo"]])
def test_lora_targets_are_megatron_module_names(name):
    from megatron.core.transformer.transformer_layer import TransformerLayer  # noqa: F401  (Megatron is importable)

    targets = solved(name).settings["nemo"]["peft"]["target_modules"]
    assert set(targets) <= {"linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"} and targets
