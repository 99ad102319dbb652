"""Step-time model (optimizer/models/timing.py): FLOP counts, communication volumes, bubble, precision, offload.

Numbers in comments are worked by hand from the formulas in timing.py's docstrings (formulas.md Part II section 3).
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from optimizer.models import timing
from tests.conftest import timing_inputs

# Toy architecture small enough to count by hand: L=2, h=64, I=128, a=k=4, V=100, untied.
TOY = {"name": "toy", "layers": 2, "hidden": 64, "intermediate": 128, "heads": 4, "kv_heads": 4, "vocab": 100,
       "tied_embeddings": False}  # fmt: skip
REL = 1e-9  # formulas evaluated exactly; only float rounding
NO_LATENCY = {"collective_latency_s": {"intra": 0.0, "network": 0.0}}  # volumes alone (latency: test_timing_structure)


def test_full_finetune_counts_6n_plus_attention(catalog):
    job, *_ = timing_inputs(catalog, model=TOY, method="full", lora=None, seq_len=256)
    n = job.arch.total_params - 100 * 64  # input embedding lookup is free; the untied head is a GEMM
    # 6N + 12 L h s = 6N + 12 x 2 x 64 x 256 = 6N + 393,216
    assert timing.model_flops_per_token(job) == pytest.approx(6 * n + 393_216, rel=REL)


def test_lora_counts_4n_plus_attention(catalog):
    job, *_ = timing_inputs(catalog, model=TOY, seq_len=256)
    n = job.arch.total_params - 100 * 64
    assert timing.model_flops_per_token(job) == pytest.approx(4 * n + 393_216, rel=REL)


def test_full_checkpointing_adds_one_forward(catalog):
    job, cfg, _, _ = timing_inputs(catalog, model=TOY, method="full", lora=None, seq_len=256, checkpointing="full")
    n = job.arch.total_params - 100 * 64
    # 8N + 16 L h s: + 2N + 4 x 2 x 64 x 256 = + 2N + 131,072
    assert timing.hardware_flops_per_token(job, cfg)[0] == pytest.approx(8 * n + 524_288, rel=REL)


def test_selective_checkpointing_recomputes_attention_core_only(catalog):
    job, cfg, _, _ = timing_inputs(catalog, model=TOY, method="full", lora=None, seq_len=256, checkpointing="selective")
    assert timing.hardware_flops_per_token(job, cfg)[0] == pytest.approx(
        timing.model_flops_per_token(job) + 131_072, rel=REL
    )


def test_op_selective_checkpointing_recomputes_every_other_block_matmul(catalog):
    # torchtitan's per-op policy recomputes k, o and up of each block and keeps the SDPA output. TOY: h_kv = h_q = 64
    # (4 heads of 16), I = 128: 2 L h (h_kv + h_q + I) = 2 x 2 x 64 x (64 + 64 + 128) = 65,536 dense, no attention.
    job, cfg, _, k = timing_inputs(catalog, model=TOY, method="full", lora=None, seq_len=256, checkpointing="selective")
    assert timing.selective_recompute(job, k) == "every_other_matmul"  # the hf engine (FSDP2, as torchtitan runs it)
    dense, attn = timing.flops_per_token_parts(job, cfg, timing.selective_recompute(job, k))
    none_cfg = timing_inputs(catalog, model=TOY, method="full", lora=None, seq_len=256)[1]
    dense0, attn0 = timing.flops_per_token_parts(job, none_cfg)
    assert dense[0] - dense0[0] == pytest.approx(65_536, rel=REL)
    assert attn[0] == pytest.approx(attn0[0], rel=REL)
    # Llama-3.1-8B (L 32, h 4096, h_kv 8 x 128 = 1024, I 14336): 2 x 32 x 4096 x (1024 + 4096 + 14336)
    # = 262,144 x 19,456 = 5,100,273,664 FLOPs per token, a third of the 2N = 15.0e9 a full recomputation adds.
    llama = {"name": "l8", "layers": 32, "hidden": 4096, "intermediate": 14336, "heads": 32, "kv_heads": 8,
             "vocab": 128256, "tied_embeddings": False}  # fmt: skip
    job8, *_ = timing_inputs(catalog, model=llama, method="full", lora=None)
    assert timing.every_other_matmul_flops(job8) == pytest.approx(5_100_273_664, rel=REL)


def test_megatron_selective_checkpointing_keeps_attention_core_recompute(catalog):
    # nemo (Megatron-Core recompute_granularity selective): + 4 L h s = 4 x 2 x 64 x 256 = 131,072 attention, no dense
    job, cfg, _, k = timing_inputs(catalog, model=TOY, method="full", lora=None, seq_len=256, checkpointing="selective",
                                   training={"framework": "nemo", "optimizer": "adamw", "attention": "flash"})
    dense, attn = timing.flops_per_token_parts(job, cfg, timing.selective_recompute(job, k))
    assert attn[0] - 3 * 131_072 == pytest.approx(131_072, rel=REL)
    assert dense[0] == pytest.approx(6 * (job.arch.total_params - 100 * 64), rel=REL)


def test_zero3_moves_one_and_a_half_times_the_ddp_volume(catalog):
    # formulas.md Part II 3.2 worked check: 10B bf16 under ZeRO-3 sends 60 GB per step, DDP 40 GB (n -> infinity);
    # here with the ring factor (n-1)/n for n = 8, per micro-batch and gradient accumulation 1.
    kw = {"method": "full", "lora": None, "global_batch": 8}
    job, cfg, hw, k = timing_inputs(catalog, "A100-80G", 8, zero_stage=[0, 3], **kw)
    k = {**k, **NO_LATENCY}
    bw = timing.dp_bandwidth(cfg, hw)
    comm = timing.comm_seconds(job, cfg, hw, k)
    p = job.arch.total_params
    assert comm["dp"][0] * bw[0] == pytest.approx(2 * 7 / 8 * 2 * p, rel=REL)  # all-reduce 2(n-1)/n x 2P
    assert comm["zero"][1] * bw[1] == pytest.approx(3 * 7 / 8 * 2 * p, rel=REL)  # 2 gathers + 1 reduce-scatter
    assert comm["dp"][1] == 0.0


def test_lora_zero3_gathers_the_frozen_base_in_its_stored_width(catalog):
    # QLoRA's NF4 base (4 bit) is gathered at a quarter of the bytes of a 16-bit LoRA base.
    lora = timing_inputs(catalog, "A100-80G", 8, zero_stage=3, global_batch=8)
    qlora = timing_inputs(catalog, "A100-80G", 8, zero_stage=3, global_batch=8, method="qlora")
    lora, qlora = ((*x[:3], {**x[3], **NO_LATENCY}) for x in (lora, qlora))
    scatter = {m: timing.comm_seconds(*args)["zero"][0] for m, args in (("lora", lora), ("qlora", qlora))}
    grads = 2 * 7 / 8 * 2 * timing.trainable_params(lora[0]) / timing.dp_bandwidth(lora[1], lora[2])[0] / 2
    assert (scatter["qlora"] - grads) == pytest.approx((scatter["lora"] - grads) / 4, rel=1e-6)


def test_tensor_parallel_all_reduces_grow_with_recomputation(catalog):
    # 4 all-reduces per layer (6 with full recomputation) of b s h 2 bytes, ring over t GPUs.
    job, cfg, hw, k = timing_inputs(catalog, "H100-SXM", 2, tp=2, checkpointing="none")
    _, cfg_full, hw_full, _ = timing_inputs(catalog, "H100-SXM", 2, tp=2, checkpointing="full")
    k = {**k, **NO_LATENCY}
    plain = timing.comm_seconds(job, cfg, hw, k)["tp"][0]
    full = timing.comm_seconds(job, cfg_full, hw_full, k)["tp"][0]
    a = job.arch
    assert plain * hw.tp_bytes_per_s[0] == pytest.approx(2 * 1 / 2 * 4 * a.layers * 2048 * a.hidden * 2, rel=REL)
    assert full / plain == pytest.approx(1.5, rel=REL)


def test_pipeline_bubble_is_p_minus_one_over_m(catalog):
    # One stage's compute is 1/p of the model; the step is m micro-batches x (1 + (p-1)/m). dp = 1, tp = 1: no
    # collectives but the stage-to-stage sends (subtracted), so step - optimizer = m x compute_p x (1 + (p-1)/m)
    # = (m + p - 1) x compute_1 / p.
    args = timing_inputs(catalog, "H100-SXM", [1, 4], pp=[1, 4], global_batch=8)
    job, cfg, hw, k = args
    m = cfg.grad_accum[0]  # 8
    sends = m * timing.comm_seconds(*args)["pp"] * (1 + (cfg.pp - 1) / m)
    body = timing.step_seconds(*args) - timing.optimizer_seconds(*args) - sends
    assert body[1] / (body[0] / m / 4) == pytest.approx(m + 3, rel=1e-9)


def test_fp8_speeds_up_the_linear_layers_only(catalog):
    # Amdahl: attention stays in bf16, so with a the attention share of the bf16 compute time the fp8 speed-up of
    # compute (casts left out) is 1 / ((1 - a) / (peak ratio x f_fp8) + a); H100: peak ratio 1979 / 989 = 2.001.
    kw = {"method": "full", "lora": None, "seq_len": 8192}
    bf16 = timing_inputs(catalog, "H100-SXM", 1, precision="bf16", **kw)
    job, cfg, hw, k = timing_inputs(catalog, "H100-SXM", 1, precision="fp8", **kw)
    k = {**k, "fp8_cast_bytes": 0}
    without_attention = {**bf16[3], "causal_attention_share": 0.0}
    a = 1 - timing.compute_seconds(*bf16[:3], without_attention)[0] / timing.compute_seconds(*bf16)[0]
    gpu = catalog.gpus["H100-SXM"]
    gain = gpu.fp8_tflops / gpu.bf16_tflops * k["precision_factor"]["fp8"]
    ratio = timing.compute_seconds(*bf16)[0] / timing.compute_seconds(job, cfg, hw, k)[0]
    assert 0.1 < a < 0.5  # 8192 tokens: attention is a sizeable share, so the test can tell
    assert ratio == pytest.approx(1 / ((1 - a) / gain + a), rel=REL)


def test_fp32_runs_at_the_fp32_peak(catalog):
    fp32 = timing_inputs(catalog, "A100-80G", 1, precision="fp32")
    bf16 = timing_inputs(catalog, "A100-80G", 1, precision="bf16")
    gpu = catalog.gpus["A100-80G"]
    assert fp32[2].peak_flops[0] == gpu.fp32_tflops * 1e12
    assert timing.step_seconds(*fp32)[0] > timing.step_seconds(*bf16)[0]


def test_dequantisation_time_only_for_a_quantised_base(catalog):
    lora = timing_inputs(catalog, "A100-80G", 1)
    qlora = timing_inputs(catalog, "A100-80G", 1, method="qlora")
    assert timing.dequant_seconds(*lora)[0] == 0.0
    # memory-bound: the NF4 weights are read and the 16-bit copy written once per pass over the layers; full
    # recomputation adds a third pass (forward, recomputed forward, backward), so exactly 3/2 of the time
    plain = timing.dequant_seconds(*qlora)[0]
    assert plain > 0
    ck = timing_inputs(catalog, "A100-80G", 1, method="qlora", checkpointing="full")
    assert timing.dequant_seconds(*ck)[0] == pytest.approx(1.5 * plain, rel=REL)
    # and it scales with 1 / HBM bandwidth
    hbm = catalog.gpus["A100-80G"].memory_bandwidth_gb_per_s
    fast = timing_inputs(catalog, "A100-80G", 1, method="qlora", gpu_changes={"memory_bandwidth_gb_per_s": 2 * hbm})
    assert timing.dequant_seconds(*fast)[0] == pytest.approx(plain / 2, rel=REL)


def test_qlora_is_slower_than_lora_under_hf_bitsandbytes(catalog):
    lora = timing_inputs(catalog, "A100-80G", 1, micro_batch=4)
    qlora = timing_inputs(catalog, "A100-80G", 1, micro_batch=4, method="qlora")
    ratio = timing.step_seconds(*qlora)[0] / timing.step_seconds(*lora)[0]
    assert 1.1 <= ratio <= 1.4  # qlora-step-time-prior fact: 1.1-1.4 with HF + bitsandbytes


def test_optimizer_offload_adds_cpu_adam_and_parameter_upload(catalog):
    kw = {"method": "full", "lora": None}
    gpu = timing_inputs(catalog, "A100-80G", 1, **kw)
    cpu = timing_inputs(catalog, "A100-80G", 1, offload="optimizer", **kw)
    job, cfg, hw, k = cpu
    p = job.arch.total_params
    adam, upload = p * k["cpu_adam_seconds_per_param"], 2 * p / hw.pcie_bytes_per_s[0]  # one card uses the CPU
    assert adam > upload  # 2.57e-10 s/param (ZeRO-Offload Table 4) against 2 B/param over ~22 GB/s
    expected = max(adam, upload)  # the tiled upload runs while Adam works on the next tile (paper sec. 5.1)
    assert timing.optimizer_seconds(*cpu)[0] == pytest.approx(expected, rel=REL)
    assert timing.step_seconds(*cpu)[0] > timing.step_seconds(*gpu)[0]


def test_offload_traffic_per_micro_batch_by_hand(catalog):
    """One card, ZeRO-2, offload optimizer: gradients out (2 B/param) each micro-batch behind 0.7 x compute."""
    kw = {"method": "full", "lora": None, "seq_len": 256, "global_batch": 4}
    none = timing_inputs(catalog, "RTX-4090", 1, zero_stage=2, **kw)
    opt = timing_inputs(catalog, "RTX-4090", 1, zero_stage=2, offload="optimizer", **kw)
    job, cfg, hw, k = opt
    p = job.arch.total_params
    pcie = 31.5e9 * k["link_efficiency"]["pcie"]  # gpus.yaml RTX-4090 PCIe 4.0 x16 per direction x 0.7
    assert hw.pcie_bytes_per_s[0] == pytest.approx(pcie, rel=REL)
    grads_out = 2.0 * p / pcie  # the whole model's 16-bit gradients on one rank
    assert timing.grad_offload_seconds(job, cfg, hw)[0] == pytest.approx(grads_out, rel=REL)
    compute = timing.compute_seconds(*opt)[0]
    m = int(cfg.grad_accum[0])
    exposed = max(0.0, grads_out - k["comm_overlap"] * compute)  # a single card has no ZeRO collective
    adam = p * k["cpu_adam_seconds_per_param"]
    gpu_opt = p * k["optimizer_bytes_per_param"] / hw.hbm_bytes_per_s[0]
    added = m * exposed + max(adam, 2.0 * p / pcie) - gpu_opt
    gain = timing.step_seconds(*opt)[0] - timing.step_seconds(*none)[0]
    assert gain == pytest.approx(added, rel=1e-9)
    assert exposed > 0  # 256-token micro-batches: the copy outlasts the backward it hides behind


def test_offload_all_costs_more_than_optimizer_more_than_none_on_pcie_gen4(catalog):
    """Same ZeRO-3 plan on one PCIe 4.0 card: each offload level adds at least its hand-computed host traffic."""
    kw = {"method": "full", "lora": None}
    levels = ("none", "optimizer", "all")
    args = {o: timing_inputs(catalog, "RTX-4090", 1, zero_stage=3, offload=o, **kw) for o in levels}
    step = {o: timing.step_seconds(*a)[0] for o, a in args.items()}
    job, cfg, hw, k = args["all"]
    p, m = job.arch.total_params, int(cfg.grad_accum[0])
    pcie = 31.5e9 * k["link_efficiency"]["pcie"]
    compute = timing.compute_seconds(*args["all"])[0]
    gpu_opt = p * k["optimizer_bytes_per_param"] / hw.hbm_bytes_per_s[0]
    adam = p * k["cpu_adam_seconds_per_param"]  # at least the CPU Adam step replaces the GPU one
    assert step["optimizer"] - step["none"] >= adam - gpu_opt > 0
    fetch = 2 * 2.0 * p / pcie  # 2 B/param in for the forward and again for the backward, each micro-batch
    lower = m * max(0.0, 2.0 * p / pcie + fetch - k["comm_overlap"] * compute) - m * max(
        0.0, 2.0 * p / pcie - k["comm_overlap"] * compute)
    assert step["all"] - step["optimizer"] >= lower * (1 - 1e-9) > 0  # equal up to rounding: same optimizer step
    assert step["all"] > 1.1 * step["optimizer"] > 1.1 * step["none"]


def test_parameter_offload_streams_weights_every_micro_batch(catalog):
    args = timing_inputs(catalog, "A100-80G", 8, zero_stage=3, offload="all", method="full", lora=None)
    job, cfg, hw, _ = args
    expected = 4 * job.arch.total_params / 8 / hw.pcie_bytes_per_s[0]  # 2 x 2 B x P / d
    assert timing.param_offload_seconds(job, cfg, hw)[0] == pytest.approx(expected, rel=REL)
    q_job, q_cfg, q_hw, _ = timing_inputs(catalog, "A100-80G", 8, zero_stage=3, offload="all", method="qlora")
    assert timing.param_offload_seconds(q_job, q_cfg, q_hw)[0] == pytest.approx(expected / 4, rel=REL)  # NF4 0.5 B


def test_larger_micro_batches_raise_efficiency_towards_the_plateau(catalog):
    job, cfg, hw, k = timing_inputs(catalog, "A100-80G", 1, micro_batch=[1, 2, 4, 8], global_batch=8)
    eta = timing.compute_efficiency(job, cfg, hw, k)
    assert np.all(np.diff(eta) > 0)
    assert eta[-1] < hw.efficiency[0]


def test_vector_evaluation_equals_a_loop_of_single_rows(catalog):
    kw = {"method": "full", "lora": None, "global_batch": 64}
    cards, tp, zero, mb = [1, 2, 8, 8, 16, 16], [1, 1, 2, 1, 8, 4], [0, 1, 3, 2, 3, 3], [1, 2, 4, 1, 2, 8]
    vec = timing.job_time(*timing_inputs(catalog, "H100-SXM", cards, tp=tp, zero_stage=zero, micro_batch=mb, **kw))
    for i in range(len(cards)):
        one = timing.job_time(
            *timing_inputs(catalog, "H100-SXM", cards[i], tp=tp[i], zero_stage=zero[i], micro_batch=mb[i], **kw)
        )
        for key, values in vec.items():
            assert values[i] == pytest.approx(one[key][0], rel=1e-12), key


def test_hours_include_startup_and_checkpoint_saves(catalog):
    # Llama-3.1-8B (P = 8,030,261,248): a save writes 2 B x P = 16.060522496 GB; at 1 s/GB, 16.060522496 s each.
    # The save interval is set to 0.4 of the training time: saves at 0.4 and 0.8, plus the final one = 3 saves.
    # Start-up 100 s. So hours x 3600 = train + 3 x 16.060522496 + 100 = train + 148.181567488 s.
    job, cfg, hw, k = timing_inputs(catalog, "A100-80G", 1)
    train_s = job.steps * float(timing.job_time(job, cfg, hw, k)["step_seconds"][0])
    k = dict(k, checkpoint_seconds_per_gb=1.0, startup_seconds=100.0, checkpoint_every_hours=0.4 * train_s / 3600)
    out = timing.job_time(job, cfg, hw, k)
    assert float(out["hours"][0]) * 3600 - train_s == pytest.approx(148.181567488, rel=1e-9)


def test_estimate_accepts_pipeline_parallelism(run_cli, write_scenario):
    path = write_scenario(model="Llama-3.1-70B", method="full", lora=None, global_batch=64,
                          training={"framework": "nemo", "attention": "flash"})  # hf runs data parallel only
    result = run_cli("estimate", path, "--gpu", "H100-SXM", "--cards", "8", "--pp", "2", "--tp", "4", "--zero", "1",
                     "--micro-batch", "1", "--checkpointing", "full", "--json")  # fmt: skip
    assert result.exit_code in (0, 1), result.output  # 1: answered, the configuration does not fit
    out = json.loads(result.stdout)
    assert (out["plan"]["pp"], out["plan"]["dp"], out["plan"]["grad_accum"]) == (2, 1, 64)
    assert out["time"]["tokens_per_second"] > 0 and out["time"]["step_seconds"] > 0


def test_fp8_is_refused_on_a_gpu_without_fp8(run_cli, write_scenario):
    result = run_cli("estimate", write_scenario(), "--gpu", "A100-80G", "--cards", "1", "--micro-batch", "1",
                     "--precision", "fp8")  # fmt: skip
    assert result.exit_code == 2
    one_line = r"ftopt: error: \S+scenario\.yaml: plan\.precision: [^\n]*fp8[^\n]*\n"
    assert re.fullmatch(one_line, result.stderr), result.stderr


def test_framework_profiles_change_speed_where_calibrated(catalog):
    # torchtune's factor (fitted on its A100 cases) and hf's bitsandbytes QLoRA factor make the stacks differ.
    hf = timing_inputs(catalog, "A100-80G", 1, method="qlora", micro_batch=4)
    tt = timing_inputs(catalog, "A100-80G", 1, method="qlora", micro_batch=4,
                       training={"framework": "torchtune", "optimizer": "adamw", "attention": "sdpa"})  # fmt: skip
    k = catalog.calibration["timing"]
    expected = k["framework_factor"]["torchtune"] / k["method_factor"]["hf"]["qlora"]  # 1.07 / 0.8 on compute
    ratio = timing.compute_efficiency(*tt)[0] / timing.compute_efficiency(*hf)[0]
    assert ratio == pytest.approx(expected, rel=REL)
    assert timing.step_seconds(*tt)[0] < timing.step_seconds(*hf)[0]


def test_cpu_adam_time_follows_the_bytes_each_engine_moves(catalog):
    """Memory-bound CPU step: torchtune's pure-bf16 AdamW moves 14 B/param, DeepSpeed's fp32 CPU-Adam 28 B/param."""
    kw = {"method": "full", "lora": None}
    ds = timing_inputs(catalog, "A100-80G", 8, zero_stage=3, offload="all", **kw)
    tt = timing_inputs(catalog, "A100-80G", 8, zero_stage=3, offload="all", **kw,
                       training={"framework": "torchtune", "optimizer": "adamw", "attention": "sdpa"})  # fmt: skip
    p = ds[0].arch.total_params  # 8 ranks on one node: the node's CPU steps the whole model
    assert timing.optimizer_seconds(*ds)[0] == pytest.approx(p * 2.57e-10, rel=1e-9)  # ZeRO-Offload Table 4
    assert timing.optimizer_seconds(*tt)[0] == pytest.approx(p * 2.57e-10 * 14 / 28, rel=1e-9)
