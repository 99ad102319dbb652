"""torch.compile, activation offloading, the optimizer step in backward and torchtune's fp32-upcast loss, each
against a number computed by hand (comments show the arithmetic), and checked where the torchtune Llama-3.2-3B
ladder (pytorch/torchtune:README.md@1814feb17, "Optimization flags"; tests/data/reference/memory_cases.yaml) isolates
the technique. Tolerances: exact (int64 bytes, ceil) unless stated.
"""

from __future__ import annotations

import numpy as np
import pytest

from optimizer.models import activations, memory
from tests.memory_builders import LLAMA32_3B, cfg, consts, job

GIB = 2**30
H, I_, L = LLAMA32_3B.hidden, LLAMA32_3B.intermediate, LLAMA32_3B.layers  # 3072, 8192, 28
T = 2 * 4096  # the ladder's micro-batch 2 x 4096 packed tokens


def _one(fn, j, c) -> int:
    return int(fn(j, c, consts())[0])


def test_compile_saves_8h_plus_2i_per_token_and_layer_in_full_finetuning():
    # eager full FT 22h + 4h_kv + 8I + 4a, compiled (fused) 14h + 4h_kv + 6I + 4a: 8h + 2I = 40,960 B
    eager = job(arch=LLAMA32_3B, framework="torchtune", seq_len=4096)
    compiled = job(arch=LLAMA32_3B, framework="torchtune", seq_len=4096, compile=True)
    per_eager = activations.activation_bytes_per_token_layer(eager, cfg(), consts())[0]
    per_compiled = activations.activation_bytes_per_token_layer(compiled, cfg(), consts())[0]
    assert per_eager - per_compiled == 8 * H + 2 * I_ == 40_960


def test_compile_drop_matches_the_ladder_rung_within_5_percent():
    # ladder "+ Packed Dataset" 60.0 GiB -> "+ Compile" 51.0 GiB (only compile changes): 9.0 GiB; model 8.75 GiB
    eager = job(arch=LLAMA32_3B, framework="torchtune", seq_len=4096, loss="standard")
    compiled = job(arch=LLAMA32_3B, framework="torchtune", seq_len=4096, loss="standard", compile=True)
    c = cfg(micro_batch=2)
    drop = _one(activations.activation_bytes, eager, c) - _one(activations.activation_bytes, compiled, c)
    assert drop == T * L * 40_960
    assert abs(drop / GIB / 9.0 - 1.0) <= 0.05, f"model {drop / GIB:.2f} GiB vs ladder 9.0 GiB"


def test_activation_offload_keeps_only_the_layer_in_flight():
    # full checkpointing keeps T (2h L + c_layer); offloading leaves T c_layer: 2h L T = 1.31 GiB moved
    on = job(arch=LLAMA32_3B, framework="torchtune", seq_len=4096, activation_offload=True)
    off = job(arch=LLAMA32_3B, framework="torchtune", seq_len=4096)
    c = cfg(micro_batch=2, checkpointing="full")
    per_layer = activations.activation_bytes_per_token_layer(on, c, consts())[0]
    assert _one(activations.activation_bytes, on, c) == int(np.ceil(T * per_layer))
    moved = _one(activations.activation_bytes, off, c) - _one(activations.activation_bytes, on, c)
    assert abs(moved - 2 * H * L * T) <= 1  # 1,409,286,144 B = 1.31 GiB, the ladder notes' "about 1.3 GiB"


def test_activation_offload_without_checkpointing_also_keeps_one_layer():
    on = job(arch=LLAMA32_3B, framework="torchtune", activation_offload=True)
    assert _one(activations.activation_bytes, on, cfg(checkpointing="none")) == _one(
        activations.activation_bytes, on, cfg(checkpointing="full")
    )


def test_optimizer_in_backward_holds_one_module_of_gradients():
    # torchtune bf16 grads: largest module = embedding V h = 128256 x 3072 = 394,002,432 params x 2 B
    j = job(arch=LLAMA32_3B, framework="torchtune", optimizer_in_backward=True)
    assert _one(memory.gradient_bytes, j, cfg()) == 2 * 128_256 * 3072


def test_optimizer_in_backward_needs_gradient_accumulation_1():
    on = job(arch=LLAMA32_3B, framework="torchtune", optimizer_in_backward=True)
    off = job(arch=LLAMA32_3B, framework="torchtune")
    c = cfg(grad_accum=4)
    assert _one(memory.gradient_bytes, on, c) == _one(memory.gradient_bytes, off, c) == 2 * LLAMA32_3B.total_params


def test_torchtune_standard_loss_uses_fp32_upcast_bytes():
    # torchtune output(h).float() then unchunked CE: T x V x 12 = 8192 x 128256 x 12 B = 11.74 GiB
    j = job(arch=LLAMA32_3B, framework="torchtune", seq_len=4096, loss="standard")
    assert _one(activations.logits_bytes, j, cfg(micro_batch=2)) == T * 128_256 * 12


def test_chunked_cross_entropy_bytes_are_counted_from_what_autograd_keeps():
    # eager: bf16 logits 2 + saved fp32 log-softmax 4 + one fp32 chunk 4/8 = 6.5 B; compiled per-chunk CE
    # (torchtune compile_loss): bf16 logits 2 + one bf16 gradient chunk 2/8 = 2.25 B per vocab entry and token
    eager = job(arch=LLAMA32_3B, framework="torchtune", seq_len=4096, loss="chunked")
    compiled = job(arch=LLAMA32_3B, framework="torchtune", seq_len=4096, loss="chunked", compile=True)
    c = cfg(micro_batch=2)
    assert _one(activations.logits_bytes, eager, c) == int(np.ceil(T * 128_256 * 6.5))
    assert _one(activations.logits_bytes, compiled, c) == int(np.ceil(T * 128_256 * 2.25))


def test_plain_to_chunked_cross_entropy_drop_is_within_20_percent_of_the_ladder_rung():
    # ladder "+ Compile" 51.0 -> "+ Chunked Cross Entropy" 42.9 GiB: 8.1 GiB; model T V (12 - 2.25) = 9.54 GiB (+18%).
    # With the former fitted chunked constant (4 B) this was 7.83 GiB (-3%); the derived 2.25 B is what the LoRA and
    # QLoRA rows of the same ladder allow (docs/memory-model.md section 3), and both rows stay within 3% in total.
    std = job(arch=LLAMA32_3B, framework="torchtune", seq_len=4096, loss="standard", compile=True)
    chunked = job(arch=LLAMA32_3B, framework="torchtune", seq_len=4096, loss="chunked", compile=True)
    c = cfg(micro_batch=2)
    drop = _one(activations.logits_bytes, std, c) - _one(activations.logits_bytes, chunked, c)
    assert abs(drop / GIB / 8.1 - 1.0) <= 0.20, f"model {drop / GIB:.2f} GiB vs ladder 8.1 GiB"


def test_output_layer_gradient_adds_to_the_forward_peak_in_full_fine_tuning():
    # the (tied) output layer's gradient V h x 2 B is produced while logits and activations are live
    full = job(arch=LLAMA32_3B, framework="torchtune", seq_len=4096, compile=True, optimizer_in_backward=True)
    c = cfg(micro_batch=2, checkpointing="full")
    assert _one(memory.output_gradient_bytes, full, c) == 128_256 * 3072 * 2
    parts = memory.breakdown(full, c, consts())
    live = parts["activations"][0] + parts["logits"][0]
    assert parts["gradients"][0] == max(_one(memory.gradient_bytes, full, c), live + 128_256 * 3072 * 2) - live
    lora = job(arch=LLAMA32_3B, framework="torchtune", method="lora")
    assert _one(memory.output_gradient_bytes, lora, c) == 0
    assert _one(memory.output_gradient_bytes, full, cfg(zero=3, dp=2)) == 0


def test_hf_standard_loss_is_the_framework_default_and_equal_to_torchtunes_current_one():
    # HF's default loss is the standard one; torchtune's current standard loss keeps the same fp32 log-softmax and
    # gradients (12 B per logit at the start of backward, bench/loss_path_memory.py measures both with real torch);
    # torchtune recipes before PR #1235 also held the fp32 logits through backward: exactly 4 B more per logit
    hf_std, hf_auto = job(framework="hf", loss="standard"), job(framework="hf")
    assert _one(activations.logits_bytes, hf_std, cfg()) == _one(activations.logits_bytes, hf_auto, cfg())
    tt_std = job(framework="torchtune", loss="standard")
    assert _one(activations.logits_bytes, tt_std, cfg()) == _one(activations.logits_bytes, hf_std, cfg())
    held = job(framework="torchtune", loss="standard_held")
    extra = _one(activations.logits_bytes, held, cfg()) - _one(activations.logits_bytes, tt_std, cfg())
    assert extra == 4 * 2048 * 32_000  # micro-batch 1 x 2,048 tokens x 32,000 vocab entries x 4 B


def test_new_settings_default_off_in_a_scenario_and_activation_offload_keeps_one_layer():
    # a scenario that does not mention compile / activation_offload / optimizer_in_backward trains without them
    from optimizer.inputs.catalog import load_catalog, resolve_model
    from optimizer.inputs.schema import Scenario
    from optimizer.solve.space import make_job

    from .conftest import scenario_doc

    sc = Scenario.model_validate(scenario_doc(training={"framework": "torchtune"}))
    catalog = load_catalog()
    built = make_job(sc, resolve_model(sc, catalog), catalog.calibration)
    assert (built.compile, built.activation_offload, built.optimizer_in_backward) == (False, False, False)
    # and turning activation offload on leaves one layer's activations, T x c_layer, on the GPU: 1/L of the
    # no-checkpointing activations (L = 32 for Llama-2-7B)
    j, off = job(framework="torchtune"), job(framework="torchtune", activation_offload=True)
    c = cfg(micro_batch=2, checkpointing="full")
    every_layer = _one(activations.activation_bytes, j, cfg(micro_batch=2, checkpointing="none"))
    assert _one(activations.activation_bytes, off, c) == pytest.approx(every_layer / 32, abs=1)


def test_vectorised_breakdown_with_the_new_settings_equals_a_loop_of_scalar_calls():
    j = job(arch=LLAMA32_3B, framework="torchtune", compile=True, activation_offload=True, optimizer_in_backward=True)
    rows = dict(dp=[1, 2, 4], zero=[0, 3, 3], micro_batch=[1, 2, 4], grad_accum=[1, 4, 1])  # fmt: skip
    vec = memory.breakdown(j, cfg(n=3, checkpointing="full", **rows), consts())
    for i in range(3):
        one = memory.breakdown(j, cfg(checkpointing="full", **{k: v[i] for k, v in rows.items()}), consts())
        assert {k: int(v[i]) for k, v in vec.items()} == {k: int(v[0]) for k, v in one.items()}
