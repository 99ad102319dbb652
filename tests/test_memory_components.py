"""Each memory component against a number computed by hand (comments show the arithmetic).

Sources of the formulas: optimizer/models/memory.py and activations.py docstrings, docs/formulas.md
Part I. Tolerances: exact (int64 bytes, ceil) unless stated.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from optimizer.inputs.schema import Offload
from optimizer.models import activations, memory
from optimizer.models.configs import OFFLOAD
from tests.memory_builders import LLAMA2_7B, LLAMA31_8B, LLAMA32_3B, cfg, consts, job

P7 = LLAMA2_7B.total_params  # 6,738,415,616


def _one(fn, j, c) -> int:
    return int(fn(j, c, consts())[0])


def test_lora_params_llama31_8b_rank16_all_linear_is_41_94m():
    # formulas.md section 5: 41.94M, the published figure
    j = job(arch=LLAMA31_8B, method="lora", rank=16, targets=["all-linear"])
    assert memory.lora_params(j) == 41_943_040


def test_lora_params_llama32_3b_rank32_qv_matches_peft():
    # formulas.md section 5: PEFT's num_trainable_params = 9,175,040
    j = job(arch=LLAMA32_3B, method="lora", rank=32, targets=["q_proj", "v_proj"])
    assert memory.lora_params(j) == 9_175_040


def test_hf_single_gpu_full_finetune_states_are_18_bytes_per_param():
    # HF AMP: 6 (fp32 + autocast copy) + 4 grads + 8 Adam = 18 B/param (LLaMA-Factory "Full = 18x GB")
    j, c = job(framework="hf"), cfg(grad_accum=2)
    states = sum(_one(f, j, c) for f in (memory.weight_bytes, memory.gradient_bytes, memory.optimizer_bytes))
    assert states == 18 * P7


def test_torchtune_pure_bf16_full_finetune_states_are_8_bytes_per_param():
    # 2 weights + 2 grads + 4 bf16 AdamW (LLaMA-Factory "pure_bf16 = 8x GB"; torchtune memory_optimizations.rst)
    j, c = job(framework="torchtune"), cfg(grad_accum=2)
    states = sum(_one(f, j, c) for f in (memory.weight_bytes, memory.gradient_bytes, memory.optimizer_bytes))
    assert states == 8 * P7


def test_eight_bit_adamw_keeps_two_bytes_of_moments_per_param():
    j = job(framework="torchtune")
    assert _one(memory.optimizer_bytes, j, cfg(optimizer="adamw_8bit")) == 2 * P7


def test_qlora_base_uses_nf4_for_block_linears_and_16_bits_elsewhere():
    # torchtune: P_lin x 0.515869 + (P - P_lin) x 2 + adapters x 2
    j = job(arch=LLAMA2_7B, method="qlora", framework="torchtune", rank=8, targets=["q_proj", "v_proj"])
    p_lin = 32 * (4 * 4096 * 4096 + 3 * 4096 * 11008)  # 6,476,005,376
    adapters = 8 * 32 * (2 * (4096 + 4096))  # 4,194,304
    expected = np.ceil(p_lin * 0.515869 + (P7 - p_lin) * 2 + adapters * 2)
    assert _one(memory.weight_bytes, j, cfg()) == int(expected)


def test_peft_kbit_training_keeps_non_quantised_params_in_fp32():
    # hf plain profile: kbit_nonlinear_bytes 4 (prepare_model_for_kbit_training), so 2 bytes more per such param
    tt = job(method="qlora", framework="torchtune", rank=8)
    hf = job(method="qlora", framework="hf", rank=8)
    p_nonlin = P7 - memory.linear_params(hf)
    adapters = memory.lora_params(hf)
    diff = _one(memory.weight_bytes, hf, cfg()) - _one(memory.weight_bytes, tt, cfg())
    assert diff == pytest.approx(2 * p_nonlin + 2 * adapters, abs=2)


def test_activation_bytes_per_token_layer_eager_full_llama2_7b():
    # frozen 12h + 4h_kv + 6I + 4a, trainable extra 10h + 2I: 22*4096 + 4*4096 + 8*11008 + 4*32 = 194,688
    j = job(framework="hf", method="full")
    assert float(activations.activation_bytes_per_token_layer(j, cfg(), consts())[0]) == 194_688


def test_lora_activations_save_only_adapted_inputs():
    # q,v adapters share one input: frozen 12h + 4h_kv + 6I + 4a + 2h = 14*4096 + 4*4096 + 6*11008 + 128 = 139,904
    j = job(framework="hf", method="lora", targets=["q_proj", "v_proj"])
    assert float(activations.activation_bytes_per_token_layer(j, cfg(), consts())[0]) == 139_904


def test_eager_attention_adds_six_bytes_per_head_per_token_of_context():
    flash = job(attention="flash", seq_len=1024)
    eager = job(attention="eager", seq_len=1024)
    per_token_layer = activations.activation_bytes_per_token_layer
    diff = per_token_layer(eager, cfg(), consts()) - per_token_layer(flash, cfg(), consts())
    assert float(diff[0]) == 6 * 32 * 1024


def test_full_checkpointing_keeps_layer_inputs_plus_one_layer():
    # T = 2048: T x (2h x L + c_layer) = 2048 x (8192 x 32 + 194,688) = 935,591,936
    j = job(framework="hf", method="full", seq_len=2048)
    assert _one(activations.activation_bytes, j, cfg(checkpointing="full")) == 2048 * (8192 * 32 + 194_688)


def test_no_checkpointing_keeps_every_layer():
    j = job(framework="hf", method="full", seq_len=2048)
    assert _one(activations.activation_bytes, j, cfg(checkpointing="none")) == 2048 * 32 * 194_688


def test_selective_checkpointing_sits_between_full_and_none():
    j = job(framework="hf", method="full", seq_len=4096)
    a = [_one(activations.activation_bytes, j, cfg(checkpointing=ck)) for ck in ("full", "selective", "none")]
    assert a[0] < a[1] < a[2]


def test_standard_loss_logits_scale_with_tokens_and_vocab_over_tp():
    # T x V x c / t: exact in the tokens (micro-batch, sequence) and in 1/t; c per vocab entry per token lies
    # between the bf16 logits alone (2 B) and an fp32 upcast + fp32 log-softmax + its gradient (16 B,
    # formulas.md section 4.5)
    j = job(framework="hf", seq_len=2048)
    one = _one(activations.logits_bytes, j, cfg(micro_batch=1))
    assert _one(activations.logits_bytes, j, cfg(micro_batch=4)) == pytest.approx(4 * one, abs=4)
    assert _one(activations.logits_bytes, job(framework="hf", seq_len=4096), cfg()) == pytest.approx(2 * one, abs=2)
    sharded = job(framework="hf", seq_len=2048, loss_parallel=True)  # vocabulary-parallel loss: / t
    assert _one(activations.logits_bytes, sharded, cfg(tp=2)) == pytest.approx(one / 2, abs=1)
    assert _one(activations.logits_bytes, j, cfg(tp=2)) == one  # hf's default gathers the logits on every rank
    assert 2 <= one / (2048 * 32000) <= 16


def test_chunked_loss_is_cheaper_than_standard():
    std = job(framework="torchtune", loss="standard")
    chunked = job(framework="torchtune", loss="chunked")
    assert _one(activations.logits_bytes, chunked, cfg()) < _one(activations.logits_bytes, std, cfg())


def test_tensor_parallel_halves_weights_and_activations():
    j = job(framework="nemo")
    for fn in (memory.weight_bytes, activations.activation_bytes):
        assert _one(fn, j, cfg(tp=2)) == pytest.approx(_one(fn, j, cfg(tp=1)) / 2, abs=1)


def test_deepspeed_optimizer_offload_moves_fp32_gradient_partitions_to_cpu():
    j = job(framework="hf", sharding="deepspeed")
    assert _one(memory.gradient_bytes, j, cfg(zero=3, dp=8, offload="optimizer")) == 0
    assert _one(memory.gradient_bytes, j, cfg(zero=3, dp=8, offload="none")) == int(np.ceil(4 * P7 / 8))


def test_fsdp_zero3_shards_fp32_weights_over_dp():
    j = job(framework="hf", sharding="fsdp")
    assert _one(memory.weight_bytes, j, cfg(zero=3, dp=8)) == int(np.ceil(4 * P7 / 8))


def test_gradients_freed_each_step_overlap_with_activations():
    # GA = 1 on one GPU: peak W + O + max(A + LOG, G), so gradients report max(0, G - A - LOG)
    j = job(framework="hf", seq_len=512)
    c = cfg(grad_accum=1, checkpointing="full")
    parts = memory.breakdown(j, c, consts())
    g = _one(memory.gradient_bytes, j, c)
    assert int(parts["gradients"][0]) == max(0, g - int(parts["activations"][0]) - int(parts["logits"][0]))


def test_gradient_accumulation_keeps_all_gradients():
    j = job(framework="hf", seq_len=512)
    c = cfg(grad_accum=4, checkpointing="full")
    assert int(memory.breakdown(j, c, consts())["gradients"][0]) == _one(memory.gradient_bytes, j, c)


def test_total_of_a_lora_plan_holds_the_model_states_worked_by_hand():
    # LoRA r16 q/v on Llama-2-7B under HF AMP, one GPU, GA 4 (gradients kept), full checkpointing. Model states by
    # hand (tests/test_golden.py): weights 2 B x 6,738,415,616 + 4 B x 8,388,608 = 13,510,385,664, gradients
    # 4 B x 8,388,608 = 33,554,432, AdamW 8 B x 8,388,608 = 67,108,864: 13,611,048,960 in all. Whatever the
    # per-token parts and overheads are, the total holds exactly these states besides them.
    j = job(method="lora", framework="hf")
    parts = memory.breakdown(j, cfg(grad_accum=4, checkpointing="full"), consts())
    dynamic = sum(int(parts[k][0]) for k in ("activations", "logits", "overhead"))
    assert int(parts["total"][0]) - dynamic == 13_611_048_960


def test_overhead_contains_context_and_fragmentation():
    parts = memory.breakdown(job(), cfg(), consts())
    assert parts["overhead"][0] >= parts["context"][0] + parts["fragmentation"][0]


def test_allocated_peak_is_what_torch_allocates():
    # torch.cuda.max_memory_allocated sees tensors only: model states + activations + logits + buffers + gathered
    # parameters, each from its own function; reserved adds the allocator's fragmentation, nvidia-smi the CUDA
    # context (0.75 GiB in the calibration, within formulas.md section 7's 0.3-2 GB)
    j, c = job(framework="hf", sharding="deepspeed"), cfg(zero=3, dp=8, grad_accum=4)
    parts = memory.breakdown(j, c, consts())
    tensors = sum(_one(f, j, c) for f in (memory.weight_bytes, memory.gradient_bytes, memory.optimizer_bytes,
                                          activations.activation_bytes, activations.logits_bytes, memory.buffer_bytes,
                                          memory.zero3_gathered_bytes))  # fmt: skip
    smi, res, alloc = (int(memory.peak_for_metric(parts, m)[0]) for m in ("nvidia-smi", "reserved", "allocated"))
    assert alloc == tensors
    assert 0 < res - alloc < 0.5 * (alloc - _one(memory.weight_bytes, j, c))
    assert 0.3e9 <= smi - res <= 2e9


def test_unknown_metric_is_rejected():
    with pytest.raises(ValueError, match="metric must be one of"):
        memory.peak_for_metric(memory.breakdown(job(), cfg(), consts()), "smi")


def test_vectorised_breakdown_equals_a_loop_of_scalar_calls():
    j = job(method="qlora", framework="hf", sharding="fsdp", rank=16)
    rows = dict(tp=[1, 2, 1, 4], dp=[1, 2, 8, 2], zero=[0, 3, 3, 2], micro_batch=[1, 2, 4, 8],
                grad_accum=[1, 4, 1, 2])  # fmt: skip
    vec = memory.breakdown(j, cfg(n=4, **rows), consts())
    for i in range(4):
        one = memory.breakdown(j, cfg(**{k: v[i] for k, v in rows.items()}), consts())
        assert {k: int(v[i]) for k, v in vec.items()} == {k: int(v[0]) for k, v in one.items()}


def test_offload_needs_host_memory_and_none_needs_none():
    j = job()
    assert _one(memory.cpu_offload_bytes, j, cfg(zero=3, dp=8, offload="all")) > 0
    assert _one(memory.cpu_offload_bytes, j, cfg(zero=3, dp=8, offload="none")) == 0


@pytest.mark.parametrize("method", ["full", "lora"])
def test_host_ram_for_offload_all_is_the_whole_model_however_many_cards_share_the_node(method):
    """One node holds every rank's offloaded parameters: the whole model, on 1 card or 8. The solver's rows carry
    their ZeRO shard group (``shard`` = dp); the unsharded weights used to be divided by it and then by the cards
    again, so 70B LoRA with ``offload: all`` on 8 cards asked for 1/8 of the base (29 GiB instead of 200)."""
    j = job(arch=LLAMA31_8B, method=method, rank=16)
    one = cfg(zero=3, dp=1, offload="all")
    eight = dataclasses.replace(cfg(zero=3, dp=8, offload="all"), shard=np.array([8]))
    base = LLAMA31_8B.total_params * 2 * 1.5  # bf16 weights x DeepSpeed's host buffer factor
    assert _one(memory.cpu_offload_bytes, j, eight) == pytest.approx(_one(memory.cpu_offload_bytes, j, one), rel=1e-6)
    assert _one(memory.cpu_offload_bytes, j, eight) >= base


@pytest.mark.parametrize("attention", ["flash", "eager"])
def test_megatron_selective_keeps_every_tensor_but_the_attention_core(attention):
    """nemo's selective level recomputes the attention core only (Megatron-Core core_attn): with flash attention
    that drops the fp32 log-sum-exp, so it holds nearly what no checkpointing holds; with eager attention it drops
    the s x s scores. It used to be priced as torchtitan's per-op policy (30% of each layer), so a NeMo plan that
    fitted at 23 GiB of activations needed 72 GiB once launched."""
    j = job(arch=LLAMA31_8B, framework="nemo", attention=attention, seq_len=4096)
    layers, tokens = LLAMA31_8B.layers, 4096
    core = activations.attention_core_bytes_per_token_layer(j, cfg(), consts())[0]
    none = _one(activations.activation_bytes, j, cfg(checkpointing="none"))
    sel = _one(activations.activation_bytes, j, cfg(checkpointing="selective"))
    assert sel == pytest.approx(none - tokens * core * (layers - 1), abs=2)
    if attention == "flash":
        assert core == 4 * LLAMA31_8B.heads and sel > 0.99 * none
    else:
        assert sel < 0.5 * none  # the scores are most of an eager layer at 4096 tokens
    hf = job(arch=LLAMA31_8B, framework="hf", attention=attention, seq_len=4096)
    per_op = _one(activations.activation_bytes, hf, cfg(checkpointing="selective"))
    assert per_op < 0.5 * _one(activations.activation_bytes, hf, cfg(checkpointing="none"))


def test_offload_all_leaves_a_no_sync_accumulations_unsharded_gradients_on_the_gpu():
    """The HF Trainer under FSDP accumulates inside no_sync: each rank holds the full gradient until the last
    micro-batch, on the device even with CPU offload (only the reduced shards move). offload all used to zero it,
    so 70B full fine-tuning on 8 H100s planned 36 GiB per card where the launched job holds 282 GB of gradients."""
    j = job(arch=LLAMA31_8B, framework="hf", sharding="fsdp")
    accumulating = dataclasses.replace(cfg(zero=3, dp=8, offload="all", grad_accum=4), shard=np.array([8]))
    held = _one(memory.gradient_bytes, j, accumulating)
    assert memory.holds_unsharded_gradients(j, accumulating, consts()).all()
    assert held == pytest.approx(LLAMA31_8B.total_params * 4, rel=0.01)  # HF FSDP's fp32 gradients, unsharded
    synced = dataclasses.replace(j, reduce_every_micro_batch=True)
    assert _one(memory.gradient_bytes, synced, accumulating) == 0  # reduced every micro-batch: shards on the host
    assert _one(memory.gradient_bytes, j, dataclasses.replace(accumulating, grad_accum=np.array([1]))) == 0


def test_a_4_bit_base_loads_whole_on_each_gpu_under_deepspeed_zero3_only():
    """transformers builds a quantised model outside zero.Init and bitsandbytes places it whole on each GPU before
    DeepSpeed partitions it: under ZeRO-3 the load needs the unsharded 4-bit base (as weight_bytes prices it on one
    card) plus the context; FSDP loads through rank 0's host copy, 16-bit bases through zero.Init."""
    q = job(LLAMA2_7B, "qlora")
    z3 = cfg(2, dp=2, zero=np.array([3, 2]))
    load = memory.kbit_load_bytes(q, z3, consts())
    p_lin = memory.quantized_params(q)
    nonlinear = consts()["profiles"]["hf_deepspeed"]["kbit_nonlinear_bytes"]  # DeepSpeed keeps them 16-bit
    whole = p_lin * consts()["nf4_bytes_per_param"] + (LLAMA2_7B.total_params - p_lin) * nonlinear
    assert load[0] == pytest.approx(whole + consts()["context_bytes"], rel=1e-6) and load[1] == 0
    assert 3.0 < (load[0] - consts()["context_bytes"]) / 2**30 < 4.5  # Llama-2-7B in NF4
    assert not memory.kbit_load_bytes(job(LLAMA2_7B, "qlora", sharding="fsdp"), z3, consts()).any()
    assert not memory.kbit_load_bytes(job(LLAMA2_7B, "lora"), z3, consts()).any()


def test_fsdp_keeps_the_whole_bitsandbytes_quant_state_on_every_gpu():
    # Params4bit.quant_state is not parameter data: FSDP shards and offloads the packed 4-bit weights only, so each of
    # the 2 ranks holds every absmax (P_lin x 0.0159 B), with the weights offloaded too; torchao shards its scalers
    qlora = job(method="qlora", framework="hf", sharding="fsdp")
    all_, none = OFFLOAD.index(Offload.all), OFFLOAD.index(Offload.none)
    c = cfg(n=3, dp=2, zero=np.array([3, 3, 0]), offload=np.array([all_, none, none]))
    p_lin = float(memory.quantized_params(qlora))
    state = p_lin * (consts()["nf4_bytes_per_param"] - 0.5)
    whole = float(memory.quantised_base_bytes(qlora, consts()["nf4_bytes_per_param"], 2.0))  # hf_fsdp: bf16 storage
    adapters = float(memory.trainable_params(qlora)) * 4.0  # hf_fsdp fp32 adapters
    got = memory.weight_bytes(qlora, c, consts())
    assert got[0] == pytest.approx(state, rel=1e-6)  # offloaded: only the replicated state stays
    assert got[1] == pytest.approx((whole - state + adapters) / 2 + state, rel=1e-6)
    ddp = float(memory.quantised_base_bytes(qlora, consts()["nf4_bytes_per_param"], 4.0))  # hf: PEFT's fp32 casts
    assert got[2] == pytest.approx(ddp + adapters, rel=1e-6)  # stage 0: every byte whole on each GPU anyway
    torchao = job(method="qlora", framework="torchtune", sharding="fsdp")
    assert memory.replicated_quant_state_bytes(torchao, c, consts()).tolist() == [0.0, 0.0, 0.0]


def test_hf_fsdp_keeps_its_root_unit_unsharded_through_the_peak():
    # FSDP does not reshard the root after forward; under a decoder-layer auto-wrap the root holds the 16-bit
    # embeddings, head and final norm, whole on every GPU even for a 4-bit base; torchtune shards embeddings and
    # output as units of their own, so its largest unit stays max(P_layer, V h)
    a = LLAMA2_7B
    c = cfg(n=1, dp=2, zero=3)
    live = consts()["fsdp_live_units"]
    qlora = job(method="qlora", framework="hf", sharding="fsdp")
    root = 2.0 * (a.embedding_params + a.hidden)
    w = consts()["nf4_bytes_per_param"]
    expected = live * w * a.layer_params + root
    assert memory.zero3_gathered_bytes(qlora, c, consts())[0] == pytest.approx(expected, abs=1)
    tune = job(method="qlora", framework="torchtune", sharding="fsdp")
    expected = live * w * max(a.layer_params, a.vocab * a.hidden)
    assert memory.zero3_gathered_bytes(tune, c, consts())[0] == pytest.approx(expected, abs=1)
