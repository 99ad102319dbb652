"""DeepSpeed config JSON for an hf plan under ``sharding: deepspeed``.

Checked against DeepSpeed 0.19.8 (``deepspeed.runtime.config.DeepSpeedConfig`` with the plan's data-parallel size,
tests_real/test_deepspeed.py) and its HF glue in transformers 5.24 / accelerate 1.15. Keys as spelled in
deepspeedai/DeepSpeed:docs/_pages/config-json.md.
"""

from __future__ import annotations

from typing import Any

from optimizer.inputs.schema import Offload, OptimizerName, Precision
from optimizer.inputs.schema_plan import Plan
from optimizer.launch.launch_common import half_bf16


def ds_declares_optimizer(plan: Plan) -> bool:
    """Whether ds_config.json names the optimizer: ZeRO-Offload of AdamW.

    ZeRO-Offload refuses a client optimizer (zero_force_ds_cpu_optimizer); declared in the config, DeepSpeed builds
    DeepSpeedCPUAdam, and the HF Trainer hands it a DummyOptim instead of building its own
    (transformers integrations/deepspeed.py deepspeed_optim_sched).
    """
    return offloads_optimizer(plan) and plan.optimizer is OptimizerName.adamw


def offloads_optimizer(plan: Plan) -> bool:
    """ZeRO-Offload of the optimizer: an offload mode at ZeRO stage 1-3 (config-json: offload_optimizer)."""
    return plan.offload is not Offload.none and plan.zero_stage >= 1


def bucket_sizes(plan: Plan) -> dict[str, Any]:
    """The ZeRO bucket keys as the memory model prices them: "auto", which the HF Trainer fills from the model.

    The memory model counts HF's "auto" sizes (models/memory.py buffer_bytes, calibration ds_bucket_bytes): the
    Trainer sets reduce_bucket_size h x h and, at ZeRO-3, stage3_prefetch_bucket_size 0.9 h x h and
    stage3_param_persistence_threshold 10 h (transformers integrations/deepspeed.py trainer_config_finalize).
    Left out, DeepSpeed's own defaults apply: reduce_bucket_size 5e8 elements, and ZeRO-1/2 with overlap_comm and
    contiguous_gradients allocates two reduce buffers of it (runtime/zero/stage_1_and_2.py setup_buckets), 2 GB in
    16 bits and 4 GB in ZeRO-1's fp32, against h x h (34 MB x 2 for h = 4096). allgather_bucket_size is not written:
    ZeRO-1/2 gathers the updated parameters in place (runtime/utils.py all_gather_dp_groups takes
    all_gather_into_tensor), so it allocates no bucket of that size.
    """
    keys: dict[str, Any] = {"reduce_bucket_size": "auto"}
    if plan.zero_stage == 3:
        keys.update(stage3_prefetch_bucket_size="auto", stage3_param_persistence_threshold="auto")
    return keys


def deepspeed_config(plan: Plan) -> dict[str, Any]:
    """DeepSpeed config JSON for the plan (ZeRO stage, offload, batch sizes, mixed precision, bucket sizes)."""
    zero: dict[str, Any] = {"stage": plan.zero_stage, "overlap_comm": True, "contiguous_gradients": True,
                            **bucket_sizes(plan)}  # fmt: skip
    if offloads_optimizer(plan):  # config-json: valid for ZeRO stage 1, 2, 3
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    if plan.offload is Offload.all and plan.zero_stage == 3:  # config-json: offload_param "valid only with stage 3"
        zero["offload_param"] = {"device": "cpu", "pin_memory": True}
    if plan.zero_stage == 3:
        # otherwise Trainer.save_model writes no usable weights under ZeRO-3 (transformers trainer.py); accelerate's
        # zero3_save_16bit_model, which the PEFT ZeRO-3 configs set to true, is this key
        zero["stage3_gather_16bit_weights_on_model_save"] = True
    config: dict[str, Any] = {
        "train_micro_batch_size_per_gpu": plan.micro_batch,
        "gradient_accumulation_steps": plan.grad_accum,
        "train_batch_size": plan.micro_batch * plan.grad_accum * plan.dp,
        "zero_optimization": zero,
        # must equal TrainingArguments max_grad_norm (default 1.0): the Trainer rejects a mismatch
        # (HfTrainerDeepSpeedConfig.trainer_config_process fill_match "gradient_clipping")
        "gradient_clipping": 1.0,
    }
    if ds_declares_optimizer(plan):
        # "auto": the HF Trainer fills learning_rate, adam_beta1/2, adam_epsilon and weight_decay in
        config["optimizer"] = {
            "type": "AdamW",
            "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"},
        }
    elif offloads_optimizer(plan):
        # Any other optimizer under ZeRO-Offload: by default accelerate replaces the client optimizer with
        # DeepSpeedCPUAdam (adamw_mode off), so an SGD plan would silently train Adam (accelerate
        # utils/deepspeed.py map_pytorch_optim_to_deepspeed, called when zero_force_ds_cpu_optimizer is true).
        # Turned off, DeepSpeed steps the client torch optimizer on the CPU partitions (DeepSpeed
        # runtime/engine.py _configure_zero_optimizer, "zero_force_ds_cpu_optimizer").
        config["zero_force_ds_cpu_optimizer"] = False
    if half_bf16(plan):  # an fp8 plan's non-fp8 part; DeepSpeed has no fp8 switch (launch_common.half_bf16)
        config["bf16"] = {"enabled": True}
    elif plan.precision is Precision.fp16:
        config["fp16"] = {"enabled": True, "loss_scale": 0}  # config-json: loss_scale 0 = dynamic loss scaling
    else:  # the Trainer takes a config with neither block for fp16 ("deepspeed's default mode is fp16")
        config["fp16"] = {"enabled": False}
    return config
