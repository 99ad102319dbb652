"""A scenario that contradicts itself is an input error, not an infeasible answer: allow-list entries the catalog
lacks, and pins that an allow-list excludes (optimizer/solve/planner.py ``pins_outside_allow``)."""

from __future__ import annotations

import pytest

from .conftest import scenario_doc


@pytest.mark.parametrize("changes,field,says", [
    ({"allow": {"providers": ["NoSuch"]}}, "allow.providers[0]", "no offer in the catalog is from 'NoSuch'"),
    ({"allow": {"gpus": ["A100-80G"]}, "plan": {"gpu": "H100-SXM"}}, "plan.gpu", "not in allow.gpus"),
    ({"allow": {"max_cards": 2}, "plan": {"cards": 8}}, "plan.cards", "more than allow.max_cards 2"),
    ({"allow": {"max_nodes": 1}, "plan": {"nodes": 2}}, "plan.nodes", "more than allow.max_nodes 1"),
    ({"plan": {"capacity": "spot"}}, "plan.capacity", "spot needs allow.spot: true"),
    ({"allow": {"providers": ["RunPod"]}, "plan": {"offer": "aws-p5-h100"}}, "plan.offer", "allow.providers leaves"),
])  # fmt: skip
def test_a_pin_an_allow_list_excludes_is_a_one_line_input_error(write_scenario, run_cli, changes, field, says):
    """Before, each of these solved to "infeasible" (exit 1), a pinned spot capacity even ran on spot although
    allow.spot is off by default, and an unknown provider's name was never questioned."""
    path = write_scenario(**changes)
    done = run_cli("solve", path)
    assert done.exit_code == 2, done.output
    assert f": {field}: " in done.stderr and says in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_pins_inside_the_allow_lists_still_solve(write_scenario, run_cli):
    doc = scenario_doc(allow={"gpus": ["H100-SXM"], "providers": ["aws"], "max_cards": 8, "spot": True},
                       plan={"gpu": "H100-SXM", "cards": 8})  # fmt: skip
    done = run_cli("solve", write_scenario(**{k: doc[k] for k in ("allow", "plan")}))
    assert done.exit_code in (0, 1), done.output


@pytest.mark.parametrize("method,bits,says", [
    ("full", 4, "full fine-tuning trains the 16-bit weights"),
    ("qlora", 16, "qlora quantises the frozen base"),
])  # fmt: skip
def test_base_bits_that_contradict_the_method_are_refused(write_scenario, run_cli, method, bits, says):
    """qlora with a 16-bit base was solved as "qlora" and launched as plain LoRA; full fine-tuning ignored a 4-bit
    base."""
    training = {"framework": "hf", "base_bits": bits}
    path = write_scenario(method=method, training=training, **({"lora": None} if method == "full" else {}))
    done = run_cli("solve", path)
    assert done.exit_code == 2 and ": training.base_bits: " in done.stderr and says in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_lora_over_an_8_bit_base_stays_allowed(write_scenario, run_cli):
    done = run_cli("solve", write_scenario(training={"framework": "hf", "base_bits": 8}))
    assert done.exit_code in (0, 1), done.output


def test_risk_p99_with_risk_limits_is_refused_at_load_for_every_command(write_scenario, run_cli):
    """It surfaced late, without the file's name, and only on the solve path (estimate and portfolio took it)."""
    path = write_scenario(risk="p99", risk_limits=True)
    for command in (("solve", path), ("estimate", path, "--gpu", "H100-SXM", "--cards", "1", "--micro-batch", "1")):
        done = run_cli(*command)
        assert done.exit_code == 2 and f"{path}: risk_limits: " in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1


def test_a_numeric_string_width_reads_like_the_number(write_scenario, run_cli):
    """hidden: "4096" was refused with 'hidden (4096) must be divisible by heads (32)', which it is."""
    model = {"name": "toy", "layers": 4, "hidden": "4096", "intermediate": 11008, "heads": 32, "kv_heads": 8,
             "vocab": 32000}  # fmt: skip
    done = run_cli("solve", write_scenario(model=model))
    assert done.exit_code in (0, 1) and "divisible" not in done.stderr, done.stderr


def test_a_catalog_named_twice_is_read_once(write_scenario, run_cli):
    """catalog: [us, us], or --add-catalog us beside catalog: us, failed on duplicate offer ids (also in us.yaml)."""
    assert run_cli("solve", write_scenario("twice.yaml", catalog=["us", "us"])).exit_code in (0, 1)
    done = run_cli("solve", write_scenario("added.yaml", catalog="us"), "--add-catalog", "us")
    assert done.exit_code in (0, 1), done.stderr
