"""Golden numbers worked out by hand: model states, ZeRO sharding, LoRA/QLoRA bytes, host offload, the pipeline
bubble, checkpoint saves and billing (issue 16).

Each expected value is a literal with its arithmetic in a comment, from the formula's source (ZeRO paper, DeepSpeed's
estimators, LoRA and QLoRA papers, Narayanan et al. 2021), never read back from the code or the calibration file.
A deliberate model change needs one local update: the expected number and its arithmetic.

Model: Llama-2-7B (tests/memory_builders.py; HF config.json): P = 6,738,415,616 parameters, L = 32, h = 4096,
I = 11008, h_kv = 4096, V = 32000.
"""

from __future__ import annotations

import copy
import math
from fractions import Fraction

import numpy as np
import pytest

from optimizer.inputs.catalog import load_catalog
from optimizer.inputs.schema import Term
from optimizer.inputs.schema_catalog import Offer
from optimizer.models import activations, cost, memory, timing
from optimizer.solve.validator import exact_bill

from .conftest import timing_inputs
from .memory_builders import cfg, consts, job

P = 6_738_415_616  # Llama-2-7B parameters


def _mem(j, **kw) -> dict[str, int]:
    return {k: int(v[0]) for k, v in memory.breakdown(j, cfg(**kw), consts()).items()}


# ------------------------------------------------------------------------------------------------ full fine-tuning


def test_zero2_deepspeed_model_states():
    # DeepSpeed estimate_zero2_model_states_mem_needs: 2P + 18P/N per GPU (2 B weights, 2 + 4 B gradients, 12 B Adam)
    m = _mem(job(framework="hf", sharding="deepspeed"), zero=2, dp=8, grad_accum=4)
    assert m["weights"] == 13_476_831_232  # 2 B x P, not sharded at stage 2
    assert m["gradients"] == 5_053_811_712  # (2 B 16-bit + 4 B fp32 partitions) x P / 8 = 6P/8
    assert m["optimizer"] == 10_107_623_424  # (4 B master + 8 B Adam m, v) x P / 8 = 12P/8


def test_zero3_deepspeed_model_states_and_gathered_layer():
    # DeepSpeed estimate_zero3_model_states_mem_needs: 18P/N + 4 P_ll
    j = job(framework="hf", sharding="deepspeed")
    c = cfg(zero=3, dp=8, grad_accum=4)
    m = _mem(j, zero=3, dp=8, grad_accum=4)
    assert m["weights"] == 1_684_603_904  # 2 B x P / 8
    assert m["gradients"] == 3_369_207_808  # 4 B fp32 partitions x P / 8 (16-bit grads go through buckets)
    assert m["optimizer"] == 10_107_623_424  # 12 B x P / 8
    # largest module: the embedding, V h = 32000 x 4096 = 131,072,000 params; 4 B each (16-bit param + grad)
    assert int(memory.zero3_gathered_bytes(j, c, consts())[0]) == 524_288_000


def test_zero3_offload_moves_states_to_the_host():
    j = job(framework="hf", sharding="deepspeed")
    opt = _mem(j, zero=3, dp=8, grad_accum=4, offload="optimizer")
    assert (opt["gradients"], opt["optimizer"]) == (0, 0)  # fp32 partitions and Adam states live on the CPU
    assert opt["weights"] == 1_684_603_904  # 2P / 8 stays on the GPU
    # host, one 8-GPU node: (4 master + 8 Adam + 4 fp32 grads) x P / 8 per GPU x 8 GPUs x 1.5 DeepSpeed buffer factor
    # = 16P x 1.5 = 161,721,974,784 (the estimator's "offload_optimizer" row)
    assert opt["cpu_offload"] == 161_721_974_784
    everything = _mem(j, zero=3, dp=8, grad_accum=4, offload="all")
    assert everything["weights"] == 0  # parameters streamed from the host
    # + 2 B weights x P / 8 per GPU x 8 x 1.5 = 18P x 1.5 = 121,291,481,088 x 1.5 = 181,937,221,632
    assert everything["cpu_offload"] == 181_937_221_632


def test_pipeline_splits_model_states_over_stages():
    # pp = 2, dp = 4, ZeRO-1 DeepSpeed: each stage holds P/2 parameters
    m = _mem(job(framework="hf", sharding="deepspeed"), pp=2, dp=4, zero=1, grad_accum=4)
    assert m["weights"] == 6_738_415_616  # 2 B x P / 2
    assert m["gradients"] == 10_107_623_424  # (2 B + 4 B / 4) x P / 2 = 3P/2: 16-bit unsharded at stage 1
    assert m["optimizer"] == 10_107_623_424  # 12 B x P / (2 x 4)


@pytest.mark.parametrize("framework,sharding", [("hf", "deepspeed"), ("hf", "fsdp"), ("torchtune", "fsdp"),
                                                ("nemo", "deepspeed")])  # fmt: skip
def test_optimizer_bytes_times_dp_is_constant_from_zero1(framework, sharding):
    # ZeRO-1 and up shard the optimizer states over dp exactly: O(dp) x dp = O(1) x 1 (up to the ceil of one byte)
    j = job(framework=framework, sharding=sharding)
    dps = np.array([1, 2, 4, 8])
    for zero in (1, 2, 3):
        o = memory.optimizer_bytes(j, cfg(n=4, zero=zero, dp=dps), consts())
        assert o[0] > 0
        assert np.all(np.abs(o * dps - o[0]) <= dps), (zero, o)


# ------------------------------------------------------------------------------------------------ LoRA and QLoRA


def test_lora_adapter_parameters():
    # r (d_in + d_out) per adapted Linear: q (4096 + 4096) + v (4096 + 4096) = 16,384 per layer x 32 layers x r 16
    # = 8,388,608 (PEFT prints 4,194,304 trainable for r = 8 on Llama-2-7B q/v)
    assert memory.lora_params(job(method="lora", rank=16)) == 8_388_608
    # all-linear on Llama-3.1-8B, r 16: formulas.md section 5 gives 41.94M
    from .memory_builders import LLAMA31_8B

    assert memory.lora_params(job(arch=LLAMA31_8B, method="lora", targets=["all-linear"])) == 41_943_040


def test_lora_model_states_under_hf_amp():
    m = _mem(job(method="lora", framework="hf"), grad_accum=4)
    # frozen 16-bit base 2 B x P + fp32 adapters 4 B x 8,388,608 = 13,476,831,232 + 33,554,432
    assert m["weights"] == 13_510_385_664
    assert m["gradients"] == 33_554_432  # fp32 adapter gradients, 4 B x 8,388,608 (kept: GA 4)
    assert m["optimizer"] == 67_108_864  # AdamW m + v in fp32, 8 B x 8,388,608; no master copy under AMP


def test_qlora_base_weights():
    # P_lin = L (2h^2 + 2h h_kv + 3hI) = 32 x (33,554,432 + 33,554,432 + 135,266,304) = 6,476,005,376 quantised;
    # the rest, P - P_lin = 262,410,240 (embeddings 2 x 131,072,000 + 65 norms x 4096), PEFT casts to fp32 (4 B).
    # NF4 with double quantisation: 4 + 8/64 + 32/(64 x 256) bits = 0.515869 B (to 6 decimals in the calibration).
    assert consts()["nf4_bytes_per_param"] == pytest.approx(0.515869140625, abs=1e-6)
    # 6,476,005,376 x 0.515869 + 262,410,240 x 4 + 4 B x 8,388,608 adapters
    # = 3,340,770,417.3 + 1,049,640,960 + 33,554,432 = 4,423,965,809.3 -> 4,423,965,810
    m = _mem(job(method="qlora", framework="hf"), grad_accum=4)
    assert m["weights"] == 4_423_965_810


# ------------------------------------------------------------------------------------------------ activations


@pytest.mark.parametrize("checkpointing", ["none", "selective", "full"])
@pytest.mark.parametrize("framework", ["hf", "torchtune", "nemo"])
def test_doubling_the_micro_batch_doubles_activations_and_logits(checkpointing, framework):
    # every saved tensor and the logits are per token: T = s b doubles, so do they (up to the ceil of one byte)
    j = job(framework=framework, method="full")
    one, two = (activations.activation_bytes(j, cfg(micro_batch=b, checkpointing=checkpointing), consts())[0]
                + activations.logits_bytes(j, cfg(micro_batch=b, checkpointing=checkpointing), consts())[0]
                for b in (2, 4))  # fmt: skip
    assert abs(int(two) - 2 * int(one)) <= 2


# ------------------------------------------------------------------------------------------------ time


def _no_optimizer_step(k: dict) -> dict:
    k = copy.deepcopy(k)
    k["optimizer_bytes_per_param"] = 0.0  # isolate the micro-batch work (one GPU per stage: no collectives)
    return k


def test_pipeline_bubble_is_p_minus_1_over_m():
    # 1F1B (Narayanan et al. 2021): step = m x micro x (1 + (p - 1)/m) = (m + p - 1) x micro. With tp = dp = 1 and
    # the optimizer step zeroed, step(m) / (step(m + 1) - step(m)) = m + p - 1: for p = 4, m = 1 that is 4, m = 8: 11
    cat = load_catalog()
    steps = {}
    for m in (1, 2, 8, 9):
        j, c, hw, k = timing_inputs(cat, "H100-SXM", 4, pp=4, global_batch=m, method="full", lora=None)
        steps[m] = float(timing.step_seconds(j, c, hw, _no_optimizer_step(k))[0])
    assert steps[1] / (steps[2] - steps[1]) == pytest.approx(4.0, rel=1e-9)
    assert steps[8] / (steps[9] - steps[8]) == pytest.approx(11.0, rel=1e-9)


def test_checkpoint_saves_write_16_bit_weights():
    # the base scenario's Llama-3.1-8B, P = 8,030,261,248: one save (the final one: the run is shorter than the
    # save interval) of 2 B x P = 16.060522496 GB; at checkpoint_seconds_per_gb = 1 s/GB and no start-up that is
    # 16.060522496 s beyond steps x step
    cat = load_catalog()
    j, c, hw, k = timing_inputs(cat, "H100-SXM", 8, zero_stage=3, method="full", lora=None,
                                data={"tokens": 2.0e6, "epochs": 1})  # fmt: skip
    k = dict(k, checkpoint_seconds_per_gb=1.0, startup_seconds=0.0, checkpoint_every_hours=1000.0)
    out = timing.job_time(j, c, hw, k)
    overhead_s = float(out["hours"][0]) * 3600 - j.steps * float(out["step_seconds"][0])
    assert overhead_s == pytest.approx(16.060522496, rel=1e-9)


# ------------------------------------------------------------------------------------------------ billing


def _offer(**prices: float) -> Offer:
    base = next(o for o in load_catalog().offers if o.gpu == "A100-80G")
    price = next(iter(base.prices.values()))
    doc = base.model_dump(mode="json", exclude_none=True)
    doc.update(id="golden", hour_increment_s=3600,
               prices={t: {**price.model_dump(mode="json"), "amount": a} for t, a in prices.items()})  # fmt: skip
    return Offer.model_validate(doc)


@pytest.mark.parametrize(
    "hours,prices,expected,units",
    [
        # 750 h: 1 month (720 h) + 1 day (24 h) + 6 hours = 900 + 41 + 6 x 2 = 953; month + 30 h = 960,
        # month + 2 days = 982, 5 weeks = 1250, 32 days = 1312
        (750.0, {"hour": 2.0, "day": 41.0, "week": 250.0, "month": 900.0}, "953", {"month": 1, "day": 1, "hour": 6}),
        # 2.1 h hourly: a started hour is paid, 3 x 1.37 = 4.11
        (2.1, {"hour": 1.37}, "4.11", {"hour": 3}),
        # 20 h: 20 x 1.5 = 30 > one day at 25
        (20.0, {"hour": 1.5, "day": 25.0}, "25", {"day": 1}),
        # 170 h, weeks only: 2 weeks (336 h) = 2 x 99.99 = 199.98
        (170.0, {"week": 99.99}, "199.98", {"week": 2}),
    ],
)
def test_cheapest_bill(hours, prices, expected, units):
    offer = _offer(**prices)
    want = Fraction(expected)
    assert exact_bill(hours, offer).per_card == want
    assert exact_bill(hours, offer).units == units
    b = cost.bill(hours, offer)
    assert math.isclose(b.per_card, float(want), rel_tol=1e-12) and b.units == units


def test_pinned_term_bills_only_that_term():
    offer = _offer(hour=2.0, day=41.0)
    # pinned to hours: 30 h x 2 = 60 even though a day + 6 h (41 + 12 = 53) is cheaper
    assert exact_bill(30.0, offer, frozenset([Term.hour])).per_card == 60
    assert cost.bill(30.0, offer, frozenset([Term.hour])).per_card == pytest.approx(60.0, rel=1e-12)
    assert exact_bill(30.0, offer).per_card == 53


# ------------------------------------------------------------------------------------------------ found by the
# mutation check (bench/mutation.py): each pins a rule no other test could tell from a plausible slip


def test_fp32_training_keeps_fp32_weights_gradients_and_adam_moments():
    # fp32 full fine-tuning on one GPU (no mixed precision: no master copy): 4 B weights, 4 B gradients,
    # 8 B AdamW m + v per parameter
    m = _mem(job(framework="hf"), precision="fp32", grad_accum=4)
    assert m["weights"] == 26_953_662_464  # 4 x 6,738,415,616
    assert m["gradients"] == 26_953_662_464  # 4 x P, kept across accumulation steps
    assert m["optimizer"] == 53_907_324_928  # 8 x P


def test_gradient_accumulation_of_two_keeps_every_gradient():
    # with GA > 1 the gradients accumulate across micro-batches, so all of them are live at the peak: HF AMP keeps
    # 4 B fp32 gradients, 4 x 6,738,415,616 = 26,953,662,464, whatever the activations are
    for ga in (2, 4):
        assert _mem(job(framework="hf"), grad_accum=ga, checkpointing="full")["gradients"] == 26_953_662_464


def test_lora_dropout_keeps_a_copy_and_a_mask_per_adapted_input():
    # dropout > 0 keeps the dropped-out 16-bit input (2 B) and its 1 B mask for each adapted module: q and v read
    # h = 4096 each, so 3 x (4096 + 4096) = 24,576 B per token per layer; T = 2048 tokens x 32 layers (no
    # checkpointing): 24,576 x 2048 x 32 = 1,610,612,736 bytes more than without dropout
    c = cfg(checkpointing="none")
    plain = activations.activation_bytes(job(method="lora"), c, consts())[0]
    dropped = activations.activation_bytes(job(method="lora", dropout=0.1), c, consts())[0]
    assert int(dropped - plain) == 1_610_612_736


def test_logits_fragment_the_allocator_like_activations():
    # the caching allocator's reserve grows with what is allocated and freed every micro-batch; the logits and
    # loss buffers are such tensors just like activations: a byte more of either adds the same fragmentation
    j_std, j_chunk = job(framework="torchtune", loss="standard"), job(framework="torchtune", loss="chunked")
    c_none, c_full = cfg(checkpointing="none"), cfg(checkpointing="full")
    a = {k: memory.breakdown(j, c, consts()) for k, (j, c) in
         {"std": (j_std, c_full), "chunk": (j_chunk, c_full), "none": (j_std, c_none)}.items()}  # fmt: skip
    d_logits = int(a["std"]["logits"][0] - a["chunk"]["logits"][0])
    d_acts = int(a["none"]["activations"][0] - a["std"]["activations"][0])
    per_logit = int(a["std"]["fragmentation"][0] - a["chunk"]["fragmentation"][0]) / d_logits
    per_act = int(a["none"]["fragmentation"][0] - a["std"]["fragmentation"][0]) / d_acts
    assert d_logits > 0 and d_acts > 0
    assert per_logit == pytest.approx(per_act, abs=1e-6)


def test_selective_checkpointing_keeps_a_fraction_of_every_layer_plus_one_working_layer():
    # selective (torchtitan per-op policy) keeps f = 0.3 of each layer's saved tensors and recomputes the other 0.7
    # of one layer at a time: A_sel = T c (0.3 L + 0.7) = A_none x (0.3 + 0.7 / 32) for the 32 layers of Llama-2-7B
    assert consts()["selective_keep_fraction"] == 0.3  # docs/memory-model.md section 2 (update both together)
    j = job(framework="hf", method="full")
    none = int(activations.activation_bytes(j, cfg(checkpointing="none"), consts())[0])
    sel = int(activations.activation_bytes(j, cfg(checkpointing="selective"), consts())[0])
    assert sel == pytest.approx(none * (0.3 + 0.7 / 32), abs=2)


def test_offloaded_adam_is_one_cpu_per_node_whatever_the_ranks():
    # ZeRO-Offload: the CPU Adam work of a node is its ranks' shards together, P x c_cpu for the whole model on one
    # 8-GPU node, whether 1 or 8 ranks hold it (the ranks share the node's cores): the step time that c_cpu adds is
    # the same at dp = 1 and dp = 8 (the parameter upload runs under it, ZeRO-Offload section 5.1, and is shorter)
    cat = load_catalog()
    steps = []
    for cards in (1, 8):
        j, c, hw, k = timing_inputs(cat, "A100-80G", cards, zero_stage=3, offload="optimizer", method="full",
                                    lora=None)  # fmt: skip
        whole = j.arch.total_params * k["cpu_adam_seconds_per_param"]
        assert 2.0 * j.arch.total_params / cards / hw.pcie_bytes_per_s[0] < whole
        steps.append(float(timing.optimizer_seconds(j, c, hw, k)[0]))
        assert steps[-1] == pytest.approx(whole, rel=1e-9)
    assert steps[0] > 0
