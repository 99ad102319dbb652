"""Mutation check: plant realistic one-line bugs, one at a time, and see whether the tests notice.

Run it before resolving an issue that changes a model, the solver or the launch code (not in CI: about 10-20
minutes on 2 cores):

    python bench/mutation.py                    # every mutation, 2 at a time
    python bench/mutation.py --jobs 1 --only memory-zero1-optimizer-not-sharded,solver-cents-rounded-down
    python bench/mutation.py --module solver    # the mutations of one module
    python bench/mutation.py --list             # what would run

Each mutation is a regular expression and its replacement, applied to the first matching line of the first file
(of its glob list) that matches, in a private copy of the tracked tree (so a running editor or other checkout is
never touched); then its targeted tests run there with ``pytest -x`` and a per-test timeout. A mutation is
"killed" when the tests fail (or time out), and "survived" when they pass: a survivor is a realistic bug the suite
would ship. A pattern that matches nothing (the code moved or was rewritten) no longer plants its bug, so it is
"stale": every selected pattern is checked before anything runs, and a stale one stops the check with exit status
2 and the pattern (``--list`` exits 1 when any is stale; tests/test_mutation_list.py checks every pattern in the
suite, without running a mutation). The summary gives the survival rate per module; the exit status is 1 when
anything survived, 0 otherwise.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

MEMORY_TESTS = ["tests/test_golden.py", "tests/test_survivors.py", "tests/test_memory_components.py",
                "tests/test_memory_techniques.py", "tests/test_memory_properties.py",
                "tests/test_memory_reference.py", "tests/test_memory_fidelity.py"]  # fmt: skip
TIMING_TESTS = ["tests/test_golden.py", "tests/test_timing.py", "tests/test_timing_properties.py",
                "tests/test_timing_structure.py", "tests/test_timing_loso.py"]  # fmt: skip
COST_TESTS = ["tests/test_golden.py", "tests/test_cost.py", "tests/test_validator.py", "tests/test_solver_oracle.py"]
SOLVER_TESTS = ["tests/test_survivors.py", "tests/test_infeasible.py", "tests/test_pareto.py",
                "tests/test_solver_oracle.py"]  # fmt: skip
LAUNCH_TESTS = ["tests/test_survivors.py", "tests/test_launch.py"]
LAUNCH_FILES = ["optimizer/launch.py", "optimizer/launch/*.py"]


@dataclass(frozen=True)
class Mutation:
    """One planted bug: in the first of ``files`` where ``pattern`` matches, its first match becomes ``repl``."""

    id: str
    module: str
    files: tuple[str, ...]
    pattern: str
    repl: str
    tests: tuple[str, ...]
    why: str  # the bug it stands for


def _m(id_: str, module: str, files: str | list[str], pattern: str, repl: str, tests: list[str], why: str) -> Mutation:
    return Mutation(id_, module, tuple([files] if isinstance(files, str) else files), pattern, repl, tuple(tests), why)


MEM, ACT = "optimizer/models/memory.py", "optimizer/models/activations.py"
TIM, COST = "optimizer/models/timing.py", "optimizer/models/cost.py"
COMM = "optimizer/models/comm.py"  # collective volumes and latencies (module "timing": the step-time model)
SOLVER, PARETO, LIMITS = "optimizer/solve/solver.py", "optimizer/solve/pareto.py", "optimizer/solve/limits.py"
DOMINANCE = "optimizer/solve/dominance.py"  # the candidates that can be optimal (pareto, solve and batch use them)
SPACE, VALID = "optimizer/solve/space.py", "optimizer/solve/validator.py"
PF_PLAN, PF_SOLVE = "optimizer/portfolio/plan.py", "optimizer/portfolio/schedule.py"
PORTFOLIO_TESTS = ["tests/test_portfolio_values.py", "tests/test_portfolio.py", "tests/test_portfolio_oracle.py"]
HOST_TESTS = ["tests/test_hosts_values.py", "tests/test_offers_hosts.py", "tests/test_spot.py"]
MEASURE_TESTS = ["tests/test_measure_values.py", "tests/test_calibrate.py", "tests/test_calibrate_measure.py",
                 "tests/test_probe.py"]  # fmt: skip
ENGINE_TESTS = ["tests/test_launch_values.py", "tests/test_launch.py", "tests/test_launch_engines.py"]
MOE_LORA_TESTS = ["tests/test_moe_lora_targets.py"]  # MoE LoRA targets: launch names and the adapter count
LORA_NAMES = "optimizer/launch/lora_names.py"
REVIEW_TESTS = ["tests/test_launch_review.py"]  # run length, retention, schedule, targets, sync, reentrant, buckets
PIPE_TESTS = ["tests/test_timing_structure.py", "tests/test_pipeline_interleaving.py", "tests/test_launch.py"]
EXPLAIN_TESTS = ["tests/test_explain_relax.py", "tests/test_infeasible.py"]
REPORT_TESTS = ["tests/test_report_text.py"]

MUTATIONS: list[Mutation] = [
    _m("solver-halving-steps-dropped", "solver", SOLVER,
       r"chosen = halving_steps\(cols, meets, levels, chosen, tolerance\)", "chosen = chosen",
       ["tests/test_tolerance.py"], "the tolerance rule stops at the first band: a plan waits 4x longer to save 2.6%"),
    _m("gpu-efficiency-like-ignored", "timing", SPACE,
       r'by_gpu\.get\(gpu_id, by_gpu\.get\(like, ', 'by_gpu.get(gpu_id, by_gpu.get(None, ',
       ["tests/test_timing_structure.py"], "the 300 W RTX 6000 Ada is priced 19% faster than the L40S on its chip"),
    _m("moe-quantised-experts-note-dropped", "solver", "optimizer/solve/context.py",
       r"    if sc\.frozen_base_bits < 16:\n        routed", "    if False:\n        routed",
       MOE_LORA_TESTS, "a Mixtral QLoRA plan says nf4 everywhere while 97% of the model stays 16-bit"),
    _m("explain-fused-loss-option-dropped", "solver", "optimizer/solve/explain.py",
       r'\("training\.loss", "fused",', '("training.loss", "standard",', EXPLAIN_TESTS,
       "8B full fine-tuning at 32K is told to rent bigger GPUs when the fused loss alone fits it"),
    _m("fsdp-zero-stages-ignored", "solver", SPACE, r"        and \(stages is None or z in stages\)\n", "\n",
       ["tests/test_engines.py"], "an FSDP plan at ZeRO-1 is priced as one all-reduce and launched as SHARD_GRAD_OP"),
    _m("engine-precisions-ignored", "solver", "optimizer/models/engines.py",
       r"    if precision is not None and cap\.precisions is not None and precision\.value not in cap\.precisions:",
       "    if False:", ["tests/test_engines.py"], "an hf plan pinned to fp8 launches in fp32 (no precision block)"),
    _m("calibrate-empty-overlay-written", "measure", "optimizer/measure/calibrate.py",
       r"    if output is not None and result\.fitted:", "    if output is not None:", MEASURE_TESTS,
       "an overlay with no group is written and the command exits 0 as if it had calibrated something"),
    _m("launch-fp8-trains-fp32", "launch", "optimizer/launch/ds_config.py", r"    if half_bf16\(plan\):",
       "    if plan.precision is Precision.bf16:", ["tests/test_launch_review.py"],
       "an hf fp8 plan's ds_config.json has no bf16 block: DeepSpeed trains it in fp32"),
    _m("launch-moe-zero3-leaf-note-dropped", "launch", "optimizer/launch/by_engine.py",
       r"        if arch is not None and arch\.experts > 1:\n", "        if False:\n", ["tests/test_launch_review.py"],
       "Mixtral under ZeRO-3 with the plain Trainer hangs on experts the ranks fetch differently; nothing says so"),
    _m("launch-loss-not-written", "launch", "optimizer/launch/by_engine.py",
       r"    notes \+= loss_settings\(settings, scenario\)\n", "\n", ["tests/test_launch_review.py"],
       "a plan that fits only with Liger's fused loss launches without it and runs out of memory"),
    # ---- the report's words (tests/test_report_text.py): each verdict names what fails, figures read alike
    _m("report-memory-header-bytes", "output", "optimizer/report/plan.py", r'table\.add_column\("per GPU",',
       'table.add_column("bytes",', REPORT_TESTS, "the memory table's column says bytes over figures in GiB"),
    _m("report-host-ram-counted-as-gpu", "output", "optimizer/solve/planner.py",
       r"fits=bool\(c\.fits\[i\] or c\.ram_short\[i\] or c\.host_capped\[i\]\),", "fits=bool(c.fits[i]),",
       REPORT_TESTS, "an estimate whose cards fit but whose node lacks host RAM says the GPU memory DOES NOT FIT"),
    _m("report-memory-verdict-ignores-host-ram", "output", "optimizer/report/plan.py",
       r"    if host_ok is not False:\n", "    if True:\n", REPORT_TESTS,
       "a configuration short of host RAM reads 'fits.' with only the confirm-with-provider line naming the RAM"),
    _m("report-bound-not-rounded-down", "output", "optimizer/solve/planner.py",
       r"units = max\(math\.ceil\(units - 1e-6\) - 1, 0\)", "units = units", REPORT_TESTS,
       "a time-limited solve proves a bound of 7,608.70 CNY above its own plan's 7,608.69"),
    _m("uncertainty-fits-p90-whole-card", "uncertainty", "optimizer/models/uncertainty.py",
       r"fits_p90=total_p90 <= m\.capacity \* \(1\.0 - scenario\.headroom\),", "fits_p90=total_p90 <= m.capacity,",
       ["tests/test_uncertainty_headroom.py"],
       "the band says 'fits at the high end too' beside a risk line that says the same peak is OVER the usable memory"),
    _m("report-p90-advice-when-median-over", "output", "optimizer/report/plan.py",
       r'elif m\.fits and risk is not None and risk\.level == "p50":', 'elif risk is not None and risk.level == "p50":',
       ["tests/test_uncertainty_headroom.py"], "a configuration at 2,390% of its card is told risk: p90 would fix it"),
    _m("explain-front-thinned-to-8", "explain", "optimizer/solve/explain_relax.py",
       r"MAX_TRADEOFF_POINTS = 12 ", "MAX_TRADEOFF_POINTS = 8 ", REPORT_TESTS,
       "the impossible job says 'of 9 plans on the front' and lists 8, leaving out a pair that admits a plan"),
    _m("explain-advice-lora-to-lora", "explain", "optimizer/solve/explain.py",
       r'"lora": "use qlora"\}', '"lora": "use lora/qlora", "qlora": "use lora/qlora"}',
       REPORT_TESTS, "a LoRA job that fits no card is told to use LoRA"),
    _m("explain-gib-without-separators", "explain", "optimizer/solve/explain.py",
       r"the smallest needs \{need / 2\*\*30:,\.1f\}", "the smallest needs {need / 2**30:.1f}", REPORT_TESTS,
       "24035.8 GiB per GPU beside 1,609 GiB elsewhere"),
    _m("report-no-plan-gpus-dropped", "output", "optimizer/report/plan.py",
       r"    missing = no_plan_text\(result\.no_plan\)\n", "    missing = None\n", REPORT_TESTS,
       "70B lists A100-80G as the only other GPU type; A800, H20 (host RAM) and H800 (no offer) vanish unexplained"),
    _m("report-alternatives-in-report-currency", "output", "optimizer/report/plan.py",
       r"            money_text\(est\),", '            f"{_cost(est):,.2f}",', REPORT_TESTS,
       "the other GPU types' costs read in CNY under a plan whose Cost line reads USD"),
    _m("fused-loss-lm-head-allowed", "solver", "optimizer/models/engines.py",
       r'and "lm_head" in \[str\(t\) for t in spec\.targets\]:', 'and False:', ["tests/test_engines.py"],
       "an lm_head adapter beside Liger's fused loss is priced and saved but never trains"),
    _m("fused-loss-model-type-unchecked", "solver", "optimizer/models/engines.py",
       r"    if types is None or arch\.model_type in types:", "    if True:", ["tests/test_engines.py"],
       "Liger's fused loss is written for a starcoder2 model it does not patch: the full logits come back"),
    _m("axolotl-fp8-cpu-ram-efficient-loading", "launch", "optimizer/launch/axolotl_cfg.py",
       r" and plan\.precision is not Precision\.fp8:", ":", ["tests/test_launch_review.py"],
       "an hf fp8 FSDP plan's axolotl.yaml stops at Accelerator(): torchao with cpu_ram_efficient_loading"),
    _m("startup-model-write-dropped", "timing", "optimizer/models/hosts.py",
       r"    start = start \+ overheads\.model_write_seconds\(job, disk\)", "    start = start + 0.0",
       HOST_TESTS, "a 405B job starts as fast as an 8B one: 812 GB of weights reach the node for nothing"),
    _m("report-host-cap-unnamed", "report", "optimizer/solve/planner.py",
       r"        host_ram_limit=host_ram_limit\(space, i\),", "        host_ram_limit=None,",
       ["tests/test_report_text.py"], "a 500 GiB cap reads as '1,609 GiB needed, 1,800 GiB on the node: does NOT'"),
    _m("no-plan-host-cap-as-memory", "report", "optimizer/solve/planner.py",
       r'else "host_cap" if gid in space\.capped_gpus else', "else", ["tests/test_report_text.py"],
       "GPU types held back by allow.max_host_memory_gib are said to fit nothing in their memory"),
    _m("html-cheaper-alternative-same-cost", "report", "optimizer/report/html/html_plan.py",
       r"    elif dc < -0\.005:", "    elif False:", ["tests/test_html_report.py"],
       "an alternative 0.40 CNY cheaper than the chosen plan is said to cost the same"),
    _m("portfolio-html-zero-jobs", "report", "optimizer/report/html/__init__.py",
       r'if doc\["jobs"\] or doc\["status"\] != "infeasible"', "if True", PORTFOLIO_TESTS,
       "an infeasible portfolio's page says it schedules 0 job occurrences"),
    _m("portfolio-ram-clause-unqualified", "report", "optimizer/portfolio/plan.py",
       r'"other configurations, which fit their cards," if runs else',
       '"configurations that fit their cards" if runs else',
       PORTFOLIO_TESTS, "a job with plans is said to have none with enough host RAM when its window binds"),
    _m("probe-reentrant-not-the-launchs", "measure", "optimizer/measure/probe.py",
       r'    cfg\["use_reentrant"\] = use_reentrant\(sc, trial\.plan if trial\.plan is not None else p\)',
       '    cfg["use_reentrant"] = False', MEASURE_TESTS,
       "a QLoRA FSDP probe measures non-reentrant checkpointing while the launch runs reentrant"),
    _m("nemo-fp8-plugin-dropped", "launch", "optimizer/launch/nemo_cfg.py",
       r'        keys\["precision_plugin"\] = "bf16_with_fp8_mixed"', "        pass", ["tests/test_launch_review.py"],
       "a NeMo fp8 plan's bf16 plugin overwrites transformer_config.fp8: the run trains in bf16"),
    _m("nemo-megatron-fsdp-torch-dist", "launch", "optimizer/launch/nemo_cfg.py",
       r'        strategy\["save_ckpt_format"\] = "fsdp_dtensor"', "        pass", ["tests/test_launch_review.py"],
       "a NeMo ZeRO-3 plan stops at MegatronStrategy: Megatron-FSDP with torch_dist checkpoints"),
    _m("nemo-attention-flash", "launch", "optimizer/launch/nemo_cfg.py",
       r'ATTENTION_BACKEND = \{Attention\.flash: "fused",', 'ATTENTION_BACKEND = {Attention.flash: "flash",',
       ["tests/test_launch_review.py", "tests/test_launch_plan.py"],
       "NeMo runs the flash-attn kernel where the time model priced cuDNN fused attention"),
    _m("torchtune-fused-kept", "launch", "optimizer/launch/torchtune_cfg.py",
       r"    if plan\.optimizer in NO_FUSED_ARG and recipe", "    if False and recipe", ["tests/test_launch_review.py"],
       "a torchtune 8-bit or Adafactor plan raises TypeError for the recipe config's fused: True"),
    _m("calibrate-log-pins-unchecked", "measure", "optimizer/inputs/importers.py", r"    if missing:  # the importers",
       "    if False:  # the importers", MEASURE_TESTS, "calibrate with a scenario lacking plan.cards raises KeyError"),
    _m("hf-config-tied-default-ignored", "memory", "optimizer/inputs/catalog.py",
       r'cfg\.get\("model_type"\) in TIED_BY_DEFAULT\)', "False)", ["tests/test_hf_config.py"],
       "Gemma-2-9B without tie_word_embeddings counts a second 0.92 B output matrix"),
    _m("offer-usable-above-card", "hosts", "optimizer/inputs/catalog.py",
       r"offer\.usable_memory_mib > card_mib \* USABLE_SLACK:", "False:", HOST_TESTS,
       "an offer's 200,000 MiB on an H100 plans 195 GiB per card"),
    _m("skypilot-no-price-after-level", "catalog", "optimizer/inputs/import_skypilot.py",
       r"problem = price_problem\(row, _count\(row\) or 1\)  # before the price-level rule",
       "problem = None  # before the price-level rule", ["tests/test_import_skypilot.py"],
       "a row priced -5 is reported as under 0 x another region's price"),
    _m("load-dtype-auto", "launch", "optimizer/launch/hf_args.py",
       r'    if plan\.precision is Precision\.fp32 or scenario\.method is Method\.full or uses_fsdp\(scenario, plan\):',
       "    if plan.precision is Precision.fp32:", LAUNCH_TESTS,
       "HF full fine-tuning without DeepSpeed loads the bf16 checkpoint as is and trains pure bf16, not fp32 masters"),
    _m("probe-load-dtype-ignored", "measure", "optimizer/measure/probe.py",
       r'cfg\["load_dtype"\] = load_dtype\(probed, ', 'cfg["load_dtype"] = None and (probed, ', ["tests/test_probe.py"],
       "the probe builds an FSDP LoRA base in 16 bits where the launch loads (and the plan prices) fp32"),
    _m("sgd-momentum-dropped", "launch", "optimizer/launch/hf_args.py",
       r'return f"momentum=\{SGD_MOMENTUM\}" if', "return None if", LAUNCH_TESTS,
       "an SGD plan priced with a momentum buffer launches the Trainer's momentum-free SGD"),
    _m("torchtune-sgd-momentum-dropped", "launch", "optimizer/launch/torchtune_cfg.py",
       r'block\["momentum"\] = SGD_MOMENTUM', "pass", LAUNCH_TESTS,
       "torchtune's torch.optim.SGD runs without the momentum buffer the plan prices"),
    _m("one-card-optimizer-ignored", "solver", SPACE,
       r"        if cap is not None and cap\.max_cards is not None:", "        if False:", LAUNCH_TESTS,
       "a torchtune paged_adamw_8bit plan on 4 cards: bitsandbytes cannot step FSDP2's sharded parameters"),
    _m("one-card-pin-unrefused", "solver", "optimizer/models/engines.py",
       r"    if cap\.max_cards is not None and cards is not None and cards > cap\.max_cards:", "    if False:",
       LAUNCH_TESTS, "a pinned two-card torchtune 8-bit plan is solved instead of refused with plan.cards"),
    _m("torchtune-single-device-dropped", "launch", "optimizer/launch/torchtune_cfg.py",
       r"    single = plan\.cards == 1 and plan\.offload is Offload\.none", "    single = False", LAUNCH_TESTS,
       "a one-card torchtune plan runs the distributed recipe, whose FSDP2 the 8-bit optimizers cannot step"),
    _m("axolotl-full-dtype-unnoted", "launch", "optimizer/launch/axolotl_cfg.py",
       r"    if scenario\.method is Method\.full and half and not", "    if False and not", LAUNCH_TESTS,
       "axolotl.yaml trains pure 16-bit weights for a DDP full plan priced with fp32 master weights, unsaid"),
    _m("llamafactory-packing-unnoted", "launch", "optimizer/launch/by_engine.py",
       r"    if scenario\.data\.packing:\n        notes\.append\(LLAMAFACTORY_PACKING",
       "    if False:\n        notes.append(LLAMAFACTORY_PACKING", LAUNCH_TESTS,
       "LLaMA-Factory's whole-sample packing ends at max_steps before the data is seen, unsaid"),
    _m("explain-fit-elsewhere-told-to-pin", "explain", "optimizer/solve/explain.py",
       r"        if f\.offers & own:", "        if True:", ["tests/test_infeasible.py"],
       "70B on gcp pinned to H100-SXM is told to pin H100-SXM, which fits only on us's 16-node offers"),
    _m("nemo-zero3-with-pp", "solver", "optimizer/models/engines.py",
       r'    if \(scenario\.plan\.pp or 1\) > 1 and piped is not None:',
       "    if False:", LAUNCH_TESTS, "a NeMo plan with pp 2 launches Megatron-FSDP, which pipelining excludes"),
    # ---- the efficiency ceiling (winner's curse)
    _m("engines-sharding-default-unset", "solver", "optimizer/models/engines.py",
       r"or not explicit or sharding\.value in cap\.shardings:", "or sharding is Sharding.deepspeed or "
       "sharding.value in cap.shardings:", ["tests/test_engines.py"],
       "training: {framework: torchtune, sharding: deepspeed} accepted silently (the default's value, but set)"),
    _m("calibrate-document-sets-sharding", "measure", "optimizer/measure/calibrate.py",
       r"        doc\[\"training\"\]\.pop\(\"sharding\", None\)\n", "        pass\n", MEASURE_TESTS,
       "ftopt calibrate --scenario on a nemo file writes training.sharding: deepspeed, which the case then refuses"),
    _m("cli-group-help-one-line", "output", "optimizer/cli/commands.py", r"    except NO_ARGS_IS_HELP as exc:\n",
       "    except () as exc:\n", ["tests/test_cli.py"],
       "ftopt catalog (no subcommand) squashes the whole help into one 'ftopt: error: Usage: ...' line"),
    _m("probe-infeasible-exit-2", "measure", "optimizer/inputs/errors.py", r"    exit_code = EXIT_NO_PLAN\n",
       "    exit_code = EXIT_BAD_INPUT\n", ["tests/test_probe.py"],
       "ftopt probe on an infeasible scenario exits 2 (bad input) where the exit table and solve say 1"),
    _m("risk-limits-ceiling-dropped", "solver", SPACE, r'if risk == "p50":',
       "if True:",
       ["tests/test_efficiency_ceiling.py"],
       "risk_limits holds the deadline at the group band while the report puts the slow end at the ceiling"),
    _m("band-ceiling-dropped", "timing", "optimizer/models/uncertainty.py", r"    if above:\n", "    if False:\n",
       ["tests/test_efficiency_ceiling.py"], "a plan faster than any published run of its cell keeps a narrow band"),
    _m("coverage-no-p2p-ignored", "timing", "optimizer/models/coverage.py",
       r"    return np\.logical_not\(p2p\) & \(np\.asarray\(cards\) > np\.asarray\(nodes\)\)",
       "    return np.asarray(cards) < 0", ["tests/test_efficiency_ceiling.py"],
       "a P2P box is judged against a run whose collectives went through host memory (the 12% ceiling for L40S)"),
    _m("band-no-p2p-regime-ignored", "timing", "optimizer/models/coverage.py",
       r'    if plan_cell is None or not plan_cell\.endswith\("-no-p2p"\):',
       "    if True:", ["tests/test_efficiency_ceiling.py"],
       "a plan whose collectives go through host memory keeps a band its regime's runs (1.8-1.9x) lie outside"),
    # ---- hybrid sharding (HSDP)
    _m("comm-hsdp-replicate-dropped", "timing", COMM,
       r"return own \+ np\.where\(hybrid & \(cfg\.zero_stage >= 2\), replicate, 0\.0\)", "return own",
       ["tests/test_hybrid_shard.py"], "the cross-node all-reduce of a hybrid plan's gradient shard forgotten"),
    _m("memory-foreach-step-ignored", "memory", MEM, r"step = grads \+ foreach_step_bytes\(job, cfg, consts\)",
       "step = grads", ["tests/test_optimizer_kernel.py", "tests/test_memory_reference.py"],
       "the foreach AdamW step's copy of v never counted (torchtune's April full row -29% again)"),
    _m("memory-hsdp-shard-ignored", "memory", MEM, r"n = cfg\.shard_ranks\.astype\(np\.float64\)",
       "n = cfg.dp.astype(np.float64)", ["tests/test_hybrid_shard.py"],
       "a hybrid plan's gradients sharded over every rank instead of the node's"),
    _m("memory-offloaded-weights-sharded", "memory", MEM, r"offload=np\.zeros_like\(cfg\.offload\), shard=None\)",
       "offload=np.zeros_like(cfg.offload))", ["tests/test_memory_components.py"],
       "host RAM for offload all counts a ZeRO shard of the weights per card (70B LoRA on 8 cards: 29 GiB, not 200)"),
    _m("memory-megatron-selective-as-per-op", "memory", ACT, r'if job\.selective_recompute == "attention_core":',
       "if False:", ["tests/test_memory_components.py"],
       "NeMo's selective (attention core only) priced as torchtitan's per-op policy: 23 GiB planned, 72 GiB launched"),
    _m("memory-offload-all-drops-no-sync-gradients", "memory", MEM,
       r" & ~holds_unsharded_gradients\(job, cfg, consts\)\n", "\n", ["tests/test_memory_components.py"],
       "offload all zeroes the unsharded gradients a no_sync accumulation holds on the GPU (70B: 282 GB)"),
    # ---- memory: model states
    _m("memory-zero1-optimizer-not-sharded", "memory", MEM,
       r"shard = np\.where\(cfg\.zero_stage >= 1, cfg\.shard_ranks, 1\)",
       "shard = np.where(cfg.zero_stage >= 1, 1, 1)", MEMORY_TESTS, "ZeRO sharding of optimizer states dropped"),
    _m("memory-zero3-weights-not-sharded", "memory", MEM, r"shard = np\.where\(z3, cfg\.shard_ranks, 1\)",
       "shard = np.where(z3, 1, 1)", MEMORY_TESTS, "ZeRO-3 parameter sharding dropped"),
    _m("memory-master-2-bytes", "memory", MEM, r'_field\(job, cfg, consts, pre \+ "master_bytes"\)',
       '0.5 * _field(job, cfg, consts, pre + "master_bytes")', MEMORY_TESTS, "fp32 master weights counted at 2 B"),
    _m("memory-fp32-adam-4-bytes", "memory", MEM, r"adam = np\.where\(fp32, 8\.0,", "adam = np.where(fp32, 4.0,",
       MEMORY_TESTS, "fp32 Adam moments at 4 B instead of 8"),
    _m("memory-8bit-adam-1-byte", "memory", MEM, r"OptimizerName\.adamw_8bit: np\.full\(len\(cfg\), 2\.0\)",
       "OptimizerName.adamw_8bit: np.full(len(cfg), 1.0)", MEMORY_TESTS, "8-bit AdamW keeps one moment"),
    _m("memory-lora-q-single-side", "memory", MEM, r'"q_proj": \(h \+ hq\) \* a\.layers,', '"q_proj": hq * a.layers,',
       MEMORY_TESTS,
       "LoRA A and B of q_proj counted as one matrix"),
    _m("memory-linear-params-kv-once", "memory", MEM, r"2 \* a\.hidden \* a\.kv_width", "a.hidden * a.kv_width",
       MEMORY_TESTS, "k and v projections counted once in the quantised Linear parameters"),
    _m("memory-fp32-grad-partitions-unsharded", "memory", MEM,
       r"f32 = np\.where\(cfg\.zero_stage >= 1, 1\.0 / n, 1\.0\)", "f32 = np.where(cfg.zero_stage >= 2, 1.0 / n, 1.0)",
       MEMORY_TESTS, "DeepSpeed fp32 gradient partitions sharded only from stage 2"),
    _m("memory-zero2-grads-unsharded", "memory", MEM, r"\[1\.0, 1\.0 / n, 0\.0\]", "[1.0, 1.0, 0.0]", MEMORY_TESTS,
       "ZeRO-2 16-bit gradients not sharded"),
    _m("memory-offload-keeps-optimizer", "memory", MEM,
       r"return _i64\(np\.where\(\(cfg\.offload != _NONE\) & \(cfg\.zero_stage >= 1\), 0\.0, states\)\)",
       "return _i64(states)", MEMORY_TESTS, "optimizer offload leaves the states on the GPU"),
    _m("memory-zero3-gathered-halved", "memory", MEM, r"ds = 4\.0 \* largest_module_params\(job\)",
       "ds = 2.0 * largest_module_params(job)", MEMORY_TESTS, "ZeRO-3 gathered layer without its gradients"),
    _m("memory-transient-grads-at-ga2", "memory", MEM, r"transient = \(cfg\.grad_accum <= 1\)",
       "transient = (cfg.grad_accum <= 2)", MEMORY_TESTS, "gradients treated as freed with accumulation 2"),
    _m("memory-logits-not-fragmenting", "memory", MEM,
       r'dynamic = parts\["activations"\] \+ parts\["logits"\] \+ inside', 'dynamic = parts["activations"] + inside',
       MEMORY_TESTS, "fragmentation ignores the logits"),
    _m("memory-host-buffer-factor-dropped", "memory", MEM, r' \* float\(consts\["host_buffer_factor"\]\)', "",
       MEMORY_TESTS, "DeepSpeed host buffer factor forgotten"),
    _m("memory-host-one-gpu-per-node", "memory", MEM, r"np\.minimum\(cfg\.cards, 8\)", "np.minimum(cfg.cards, 1)",
       MEMORY_TESTS, "host RAM counted for one GPU of the node"),
    _m("memory-weights-ignore-tp", "memory", MEM, r"resident = \(base - state \+ trained\) / split / shard",
       "resident = (base - state + trained) / shard", MEMORY_TESTS, "tensor/pipeline split of weights dropped"),
    _m("memory-output-gradient-dropped", "memory", MEM, r"first = output_gradient_bytes\(job, cfg, consts\)",
       "first = 0 * output_gradient_bytes(job, cfg, consts)", MEMORY_TESTS, "output layer gradient at the peak"),
    # ---- activations
    _m("activations-1f1b-one-micro-batch", "activations", ACT,
       r"_f\(np\.minimum\(cfg\.pp, np\.maximum\(cfg\.grad_accum, 1\)\)\)", "_f(np.minimum(cfg.pp, 1))", MEMORY_TESTS,
       "first 1F1B stage holds one micro-batch, not min(pp, GA)"),
    _m("activations-logits-halved", "activations", ACT,
       r"tokens \* job\.arch\.vocab \* per_logit / logits_split\(job, cfg, consts\)\)",
       "tokens * job.arch.vocab * per_logit / logits_split(job, cfg, consts) / 2)",
       MEMORY_TESTS, "logits buffer halved"),
    _m("activations-logits-always-vocab-parallel", "activations", ACT,
       r"return _f\(cfg\.tp\) if vocab_parallel_loss\(job, consts\) else np\.ones\(len\(cfg\)\)",
       "return _f(cfg.tp)", MEMORY_TESTS + ["tests/test_memory_loss_path.py"],
       "tensor-parallel logits divided by t although the output layer gathers them to every rank"),
    _m("activations-kbit-o-proj-input-counted", "activations", ACT, r'if "o_proj" not in names\]',
       "if True]", MEMORY_TESTS, "o_proj's input (the attention output flash saves) counted again for a k-bit base"),
    _m("activations-recompute-layer-dropped", "activations", ACT,
       r"full = tokens \* \(keep_input \* layers_local \+ per_layer\)", "full = tokens * keep_input * layers_local",
       MEMORY_TESTS, "the layer being recomputed is not counted under full checkpointing"),
    _m("activations-no-tp-split", "activations", ACT, r"return per / cfg\.tp\.astype\(np\.float64\)",
       "return per + 0.0 * cfg.tp.astype(np.float64)", MEMORY_TESTS, "sequence parallel split over tp dropped"),
    _m("activations-lora-dropout-2-bytes", "activations", ACT, r"saved \+= sum\(3\.0 \* d_in\[m\]",
       "saved += sum(2.0 * d_in[m]", MEMORY_TESTS, "LoRA dropout mask forgotten"),
    _m("activations-eager-scores-per-token", "activations", ACT,
       r'\* a\.heads \* job\.seq_len', "* a.heads", MEMORY_TESTS, "eager attention scores not s x s"),
    _m("activations-selective-no-recompute-layer", "activations", ACT,
       r"sel = tokens \* \(frac \* per_layer \* layers_local \+ \(1\.0 - frac\) \* per_layer\)",
       "sel = tokens * (frac * per_layer * layers_local)", MEMORY_TESTS, "selective checkpointing's working layer"),
    # ---- timing (patterns follow the current timing.py; a rewrite shows up as skips)
    _m("timing-bubble-removed", "timing", TIM, r"return \(cfg\.pp - 1\) / \(v \* m\)", "return 0.0 * m", TIMING_TESTS,
       "1F1B pipeline bubble removed"),
    _m("timing-allgather-doubled", "timing", COMM, r"gather = np\.where\(cfg\.zero_stage >= 3, ring\(shard, 2\.0\)",
       "gather = np.where(cfg.zero_stage >= 3, ring(shard, 4.0)", TIMING_TESTS, "ZeRO-3 all-gather volume doubled"),
    _m("timing-ddp-allreduce-halved", "timing", COMM, r"volume = ring\(cfg\.dp, 2\.0\) \* grads",
       "volume = ring(cfg.dp, 1.0) * grads", TIMING_TESTS, "DDP all-reduce factor 2(d-1)/d halved"),
    _m("timing-op-selective-recomputes-attention", "timing", TIM,
       r"attn_recomputed = full \| \(sel & \(not op_policy\)\)", "attn_recomputed = full | sel", TIMING_TESTS,
       "per-op selective checkpointing also recomputes the attention core"),
    _m("timing-op-selective-full-forward", "timing", TIM, r"return 2\.0 \* a\.layers \* a\.hidden \* \(a\.kv_width",
       "return 4.0 * a.layers * a.hidden * (a.kv_width", TIMING_TESTS, "per-op selective recomputes every matmul"),
    _m("timing-final-save-dropped", "timing", TIM, r"saves = np\.floor\(train_s / 3600\.0 / every_h\) \+ 1\.0",
       "saves = np.floor(train_s / 3600.0 / every_h)", TIMING_TESTS, "final checkpoint save not counted"),
    _m("timing-startup-dropped", "timing", TIM, r' \+ float\(consts\["startup_seconds"\]\)', "", TIMING_TESTS,
       "start-up time forgotten"),
    _m("timing-recompute-flops-dropped", "timing", TIM, r"\[full, sel\], \[2\.0 \* n, ", "[full, sel], [0.0 * n, ",
       TIMING_TESTS, "full recomputation's extra forward not counted"),
    _m("timing-dequant-passes", "timing", TIM, r"passes = np\.where\(cfg\.checkpointing == _CK_FULL, 3\.0, 2\.0\)",
       "passes = np.where(cfg.checkpointing == _CK_FULL, 2.0, 2.0)", TIMING_TESTS, "recomputation's dequantisation"),
    _m("timing-optimizer-kernel-ignored", "timing", TIM,
       r'float\(consts\["optimizer_bytes_per_param"\]\) \* kernel_traffic\(job, cfg, consts\)',
       'float(consts["optimizer_bytes_per_param"])', ["tests/test_optimizer_kernel.py"],
       "every AdamW step priced as the fused kernel, also torch's foreach default (PEFT's full run +98% again)"),
    _m("timing-cpu-adam-not-shared", "timing", TIM, r'consts\["cpu_adam_seconds_per_param"\]\) \* sharing',
       'consts["cpu_adam_seconds_per_param"])', TIMING_TESTS, "GPUs of a node share one CPU for offloaded Adam"),
    _m("timing-grad-offload-dropped", "timing", TIM, r"host = grad_offload_seconds\(job, cfg, hw\) \+ ",
       "host = ", TIMING_TESTS, "offloaded gradients never cross PCIe"),
    _m("timing-cpu-bytes-ignored", "timing", TIM, r"\* sharing \* width", "* sharing", TIMING_TESTS,
       "CPU Adam priced at fp32 width for a pure-bf16 engine"),
    # ---- cost
    _m("cost-hours-rounded-down", "cost", COST, r"np\.ceil\(np\.maximum\(hours, 0\.0\) \* 3600\.0 / increment_s",
       "np.floor(np.maximum(hours, 0.0) * 3600.0 / increment_s", COST_TESTS, "billing rounds started units down"),
    _m("cost-month-skipped", "cost", COST, r"_LONG = \(Term\.month, Term\.week, Term\.day\)",
       "_LONG = (Term.week, Term.day)", COST_TESTS, "monthly term never considered"),
    _m("cost-increment-priced-per-hour", "cost", COST,
       r"hourly = n_inc \* offer\.prices\[Term\.hour\]\.amount \* inc / 3600\.0",
       "hourly = n_inc * offer.prices[Term.hour].amount", COST_TESTS, "per-second increments priced per hour"),
    # ---- solver
    _m("solver-cents-rounded-down", "solver", LIMITS,
       r"np\.ceil\(np\.round\(np\.asarray\(amount, dtype=np\.float64\) \* 100\.0, 6\)\)",
       "np.floor(np.round(np.asarray(amount, dtype=np.float64) * 100.0, 6))", SOLVER_TESTS, "money rounded down"),
    _m("solver-seconds-rounded-down", "solver", LIMITS,
       r"np\.ceil\(np\.round\(np\.asarray\(hours, dtype=np\.float64\) \* 3600\.0, 6\)\)",
       "np.floor(np.round(np.asarray(hours, dtype=np.float64) * 3600.0, 6))", SOLVER_TESTS, "time rounded down"),
    _m("solver-deadline-dropped", "solver", SOLVER, r"    for spec in limits\.specs\(\):",
       '    for spec in (s for s in limits.specs() if s.key != "deadline_s"):', SOLVER_TESTS,
       "deadline constraint dropped (once hung the Pareto sweep)"),
    _m("solver-levels-swapped", "solver", SOLVER,
       r'levels = \["cost_cents", "time_s"\] if objective is Objective\.cost else \["time_s", "cost_cents"\]',
       'levels = ["time_s", "cost_cents"] if objective is Objective.cost else ["cost_cents", "time_s"]',
       SOLVER_TESTS, "lexicographic levels swapped"),
    _m("solver-budget-rounded-up", "solver", LIMITS, r"return int\(math\.floor\(round\(x \* scale, 6\)\)\)",
       "return int(math.ceil(round(x * scale, 6)))",
       SOLVER_TESTS, "budget rounded up to the next cent"),
    _m("solver-level-not-fixed", "solver", SOLVER, r"model\.add\(var == value\)", "model.add(var >= 0)",
       SOLVER_TESTS, "a solved level is not fixed before the tie-break"),
    _m("solver-tolerance-ignored", "solver", SOLVER, r"bound = band_limit\(value, tolerance\)",
       "bound = value", ["tests/test_tolerance.py"], "the tolerance band never widened (issue 20 item 5)"),
    _m("space-risk-ignored", "solver", SPACE,
       r'at_risk = mem\["total"\] \* memory_ratios\(scenario, accuracy, gpus, offer_idx, cfg, nodes,\n.*\)',
       'at_risk = mem["total"]', ["tests/test_risk.py"], "plans fitted at the prediction, not the risk (item 4)"),
    _m("space-memory-cell-ignored", "solver", SPACE,
       r'at_risk = mem\["total"\] \* memory_ratios\(scenario, accuracy, gpus, offer_idx, cfg, nodes,\n.*\)',
       'at_risk = mem["total"] * memory_risk(scenario, cal)', ["tests/test_memory_cell_high.py"],
       "plans fitted at the overall memory band, not their own cell's (the worst run like them)"),
    # ---- pareto
    _m("pareto-limit-forgotten", "pareto", DOMINANCE, r"        if not spec\.monotone:",
       '        if not spec.monotone and spec.key != "max_cards":', ["tests/test_limits_registry.py"],
       "a user limit left out of the front's reduction (issue 23: a feasible scenario called infeasible)"),
    _m("pareto-epsilon-not-stepped", "pareto", PARETO, r"eps_s = time_s - 1", "eps_s = time_s",
       ["tests/test_pareto.py"], "epsilon bound not moved past the last point (a sweep that never ends)"),
    _m("pareto-dominated-kept", "pareto", DOMINANCE, r"out\[idx\[~\(le & lt\)\.any\(axis=1\)\]\] = True",
       "out[idx] = True", ["tests/test_pareto.py"], "dominated candidates kept"),
    _m("pareto-ties-dropped", "pareto", DOMINANCE, r"le = \(c\[None, :\] <= c\[:, None\]\)",
       "le = (c[None, :] < c[:, None])", ["tests/test_pareto.py"], "dominance test with strict cost"),
    # ---- space
    _m("space-kv-heads-unchecked", "space", SPACE, r"if arch\.heads % tp or arch\.kv_heads % tp or",
       "if arch.heads % tp or", ["tests/test_survivors.py", "tests/test_batch_grid.py", "tests/test_solver_oracle.py"],
       "tp must divide the KV heads"),
    _m("space-fit-filter-dropped", "space", SPACE,
       r"card = \(at_risk <= usable\) & \(peak > 0\)", "card = peak > 0",
       ["tests/test_scenarios.py", "tests/test_solver_oracle.py"], "plans that do not fit are kept"),
    _m("space-host-limit-ignored", "space", SPACE, r'capped = mem\["cpu_offload"\] > host_gib \* 2\*\*30',
       "pass", ["tests/test_scenarios.py"], "allow.max_host_memory_gib ignored"),
    # ---- launch (patterns searched in launch.py or the launch/ package)
    _m("launch-hf-ga-times-dp", "launch", LAUNCH_FILES,
       r'("per_device_train_batch_size": plan\.micro_batch,\s*"gradient_accumulation_steps": plan\.grad_accum)',
       r"\1 * plan.dp", LAUNCH_TESTS, "HF gradient_accumulation_steps = grad_accum x dp"),
    _m("launch-ds-train-batch-without-dp", "launch", LAUNCH_FILES,
       r'"train_batch_size": plan\.micro_batch \* plan\.grad_accum \* plan\.dp',
       '"train_batch_size": plan.micro_batch * plan.grad_accum', LAUNCH_TESTS, "DeepSpeed train_batch_size"),
    _m("launch-nemo-global-batch-without-dp", "launch", LAUNCH_FILES,
       r"rows = plan\.micro_batch \* plan\.grad_accum \* plan\.dp", "rows = plan.micro_batch * plan.grad_accum",
       LAUNCH_TESTS, "NeMo global_batch_size"),
    _m("launch-kernel-from-scenario", "launch", LAUNCH_FILES,
       r"return plan\.attention or scenario\.training\.attention", "return scenario.training.attention",
       ["tests/test_launch_plan.py"], "the requested kernel written where the GPU runs another (flash on a V100)"),
    _m("launch-packing-not-exported", "launch", LAUNCH_FILES,
       r'"dataset": \{"packed": scenario\.data\.packing\}', '"dataset": {"packed": False}',
       ["tests/test_launch_plan.py"], "torchtune rows left unpacked where the plan counts packed rows"),
    _m("launch-torchtune-ga-times-dp", "launch", LAUNCH_FILES,
       r'("batch_size": plan\.micro_batch,\s*"gradient_accumulation_steps": plan\.grad_accum)', r"\1 * plan.dp",
       LAUNCH_TESTS, "torchtune gradient_accumulation_steps = grad_accum x dp"),
    # ---- validator
    _m("validator-nan-hours-fit", "validator", VALID,
       r'(fits = r\.memory\["total"\] \* ratio <= r\.capacity_bytes \* \(1\.0 - sc\.headroom\)) and '
       r'math\.isfinite\(r\.time\["hours"\]\)', r"\1", ["tests/test_validator.py"],
       "a plan with infinite (NaN) hours accepted as fitting"),
    _m("validator-budget-rounded-down", "validator", VALID, r"elif ceil_cents\(plan_total \* exact\(rate\.rate\)\)",
       "elif int(plan_total * exact(rate.rate) * 100)", ["tests/test_survivors.py", "tests/test_validator.py"],
       "the validator's budget check rounds money down"),
    # ---- portfolio (many jobs over a calendar)
    _m("portfolio-rentals-not-converted", "portfolio", PF_PLAN,
       r"prices = \{t\.value: p\.amount \* rate for t, p in o\.prices\.items\(\)\}",
       "prices = {t.value: p.amount for t, p in o.prices.items()}", PORTFOLIO_TESTS,
       "rental prices in the offer's currency, not the portfolio's (CNY offers in a USD portfolio)"),
    _m("portfolio-solo-bill-not-converted", "portfolio", PF_PLAN, r"b\.per_card \* cards \* rate, i\)\)",
       "b.per_card * cards, i))", PORTFOLIO_TESTS, "a solo rental billed in the offer's currency"),
    _m("portfolio-power-one-card", "portfolio", PF_PLAN, r"energy = cards \* hours \* pools\[q\]\[1\]",
       "energy = hours * pools[q][1]", PORTFOLIO_TESTS, "electricity counted for one card of a pool run"),
    _m("portfolio-block-cut-too-strong", "portfolio", PF_SOLVE,
       r"rate = min\(price / TERM_HOURS\[Term\(t\)\] for t, price in rental\.prices\.items\(\)\)",
       "rate = max(price / TERM_HOURS[Term(t)] for t, price in rental.prices.items())", PORTFOLIO_TESTS,
       "a shared block's redundant bill bound uses the dearest rate: a worse schedule reported optimal"),
    _m("portfolio-sharing-dearest-unit", "portfolio", "optimizer/portfolio/problem.py",
       r"long_price = min\(rental\.prices\[t\.value\]", "long_price = max(rental.prices[t.value]", PORTFOLIO_TESTS,
       "the sharing test prices a block at the dearest long unit: sharing left out, a worse schedule called optimal"),
    _m("portfolio-table-offload-dropped", "portfolio", "optimizer/report/portfolio.py",
       r'parts \+= \[f"offload=\{p\[\'offload\'\]\}"\] if p\["offload"\] != "none" else \[\]', "parts += []",
       ["tests/test_portfolio.py"], "the 70B job's plan column hides the optimizer offload that needs ~1.6 TB of RAM"),
    # ---- hosts and spot
    _m("spot-mean-interval-not-rate", "hosts", "optimizer/models/hosts.py",
       r"mean = run\(2\.0 / \(1\.0 / mtbi_low_h \+ 1\.0 / mtbi_high_h\)\)",
       "mean = run((mtbi_low_h + mtbi_high_h) / 2.0)", HOST_TESTS,
       "spot time from the band's mean interval instead of its mean rate"),
    _m("hosts-disk-gb-as-gib", "hosts", "optimizer/models/hosts.py",
       r"_nan_or\(o\.host\.local_disk_gb if o\.host else None, 1e9\)",
       "_nan_or(o.host.local_disk_gb if o.host else None, GIB)", HOST_TESTS,
       "an offer's local disk in GB read as GiB"),
    _m("uncertainty-memory-band-not-widened", "uncertainty", "optimizer/models/coverage.py",
       r'band = widest\(band, accuracy\["memory_coverage"\]\["uncovered"\]\)', "band = band",
       ["tests/test_uncertainty.py", "tests/test_uncertainty_headroom.py"],
       "a plan outside the measured memory runs keeps the narrow band"),
    _m("memory-cell-high-ignored", "uncertainty", "optimizer/models/coverage.py",
       r"    high = cell_high\(accuracy, plan_cell\)\n    if high is None:", "    high = None\n    if high is None:",
       ["tests/test_memory_cell_high.py", "tests/test_uncertainty.py"],
       "a plan in a cell whose measured run peaked far above its prediction keeps the overall band"),
    _m("uncertainty-p90-budget-no-fx", "uncertainty", "optimizer/models/uncertainty.py",
       r"high \* fx <= budget\.amount", "high <= budget.amount",
       ["tests/test_uncertainty_fx.py", "tests/test_uncertainty.py", "tests/test_uncertainty_headroom.py"],
       "the p90 budget check compares the offer's currency with the budget's"),
    # ---- measurements, calibration, probe
    _m("measure-gb-as-gib", "measure", "optimizer/inputs/measurement.py",
       r'UNIT_BYTES: dict\[str, float\] = \{"GB": 1e9,',
       'UNIT_BYTES: dict[str, float] = {"GB": 2.0**30,', MEASURE_TESTS, "a measured peak in GB read as GiB"),
    _m("calibrate-time-factor-inverted", "measure", "optimizer/measure/calibrate.py",
       r"lambda r: r\.before / r\.measured\)", "lambda r: r.measured / r.before)", MEASURE_TESTS,
       "the time factor fitted as measured / predicted tokens/s (inverted)"),
    _m("calibrate-memory-factor-inverted", "measure", "optimizer/measure/calibrate.py",
       r"lambda r: r\.measured / r\.before\)", "lambda r: r.before / r.measured)", MEASURE_TESTS,
       "the memory factor fitted as predicted / measured (inverted)"),
    _m("overlay-throughput-times-factor", "measure", "optimizer/models/overlay.py",
       r't\["tokens_per_second"\] = time\["tokens_per_second"\] / f_t',
       't["tokens_per_second"] = time["tokens_per_second"] * f_t', MEASURE_TESTS,
       "a slower-than-predicted group reported with more tokens per second"),
    _m("probe-trial-ignores-cards", "measure", "optimizer/measure/probe.py",
       r'"tokens": float\(tokens_steps \* p\.micro_batch \* cards \* base\["seq_len"\]\)',
       '"tokens": float(tokens_steps * p.micro_batch * base["seq_len"])', MEASURE_TESTS,
       "the probe's trial sized for one card whatever its cards"),
    _m("engines-pinned-offload-stage-unchecked", "solver", "optimizer/models/engines.py",
       r"if pins\.zero_stage is not None and pins\.zero_stage not in at:", "if False:", ["tests/test_engines.py"],
       "a pinned ZeRO-0 with offload optimizer accepted: memory keeps the states on the GPU, time prices CPU Adam"),
    _m("engines-pinned-offload-pairs-unchecked", "solver", "optimizer/models/engines.py",
       r"    if rule\.pairs is not None:\n", "    if False:\n", ["tests/test_engines.py"],
       "an FSDP engine pinned to optimizer-only offload, which its launch files cannot write"),
    _m("engines-pinned-offload-optimizer-unchecked", "solver", "optimizer/models/engines.py",
       r"    if not rule\.pinnable:\n", "    if False:\n", ["tests/test_engines.py"],
       "a pinned offload with a bitsandbytes optimizer accepted, which cannot step on CPU tensors"),
    _m("space-pinned-offload-optimizer-dropped", "solver", SPACE,
       r"rule = dataclasses\.replace\(rule, allowed=rule\.pinnable\)", "rule = rule", ["tests/test_engines.py"],
       "a pinned SGD ZeRO-Offload under DeepSpeed, which the launch file runs, leaves no configuration"),
    _m("nemo-sequence-parallel-dropped", "launch", "optimizer/launch/nemo_cfg.py",
       r'strategy\["sequence_parallel"\] = True', "pass", ["tests/test_launch.py"],
       "a NeMo tp plan launched without sequence parallelism, which the memory model assumes"),
    _m("space-unstated-nvlink-as-nvlink", "solver", SPACE,
       r'link\["nvlink"\] if of\.nvlink else 0\.0((.|\n)*?)g\.nvlink_domain if of\.nvlink else 1',
       r'link["nvlink"] if of.nvlink is not False else 0.0\1g.nvlink_domain if of.nvlink is not False else 1',
       ["tests/test_offers_hosts.py"],
       "an offer that does not say SXM or PCIe priced on NVLink (AutoDL's A100s: a third of the hours on PCIe)"),
    _m("requirements-unstated-nvlink-silent", "solver", "optimizer/solve/requirements.py",
       r"if ranks < 2 or offer\.nvlink is not None", "if True", ["tests/test_offers_hosts.py"],
       "a plan on an offer that does not say SXM or PCIe never asks the provider"),
    _m("planner-pins-allow-unchecked", "solver", "optimizer/solve/planner.py",
       r"    problem = pins_outside_allow\(sc, catalog, source, gpus\)\n", "    problem = None\n",
       ["tests/test_pins_allow.py"], "a pinned spot capacity runs on spot although allow.spot is off"),
    _m("hosts-fixed-checkpoint-interval", "timing", "optimizer/models/hosts.py",
       r"interval = interruptions\.young_daly_interval_s\(save, mtbi\)", "interval = np.full(n, 7200.0)",
       ["tests/test_offers_hosts.py"], "a 988 GB checkpoint saved every 2 h: 10 of the 70B job's 44 h"),
    _m("hosts-on-demand-failures-ignored", "timing", "optimizer/models/hosts.py",
       r"lost = overheads\.failure_seconds\(train, mtbi, start \+ save, interval\)", "lost = np.zeros(n)",
       ["tests/test_offers_hosts.py"], "on-demand hardware failures never cost a restart or lost work"),
    _m("launch-save-steps-dropped", "launch", "optimizer/launch/by_engine.py",
       r'set_in_hf_files\(settings, \{"save_steps": save_steps\}\)', "pass", ["tests/test_offers_hosts.py"],
       "the Trainer saves every 500 steps, which the plan's hours do not count"),
    _m("coverage-moe-ignored", "timing", "optimizer/models/coverage.py",
       r'return f"\{method\}\+moe" if experts > 1 else method', "return method", ["tests/test_moe_coverage.py"],
       "a Mixtral plan matched the dense LoRA runs' cell and printed a narrow band"),
    _m("coverage-arch-ceiling-dropped", "timing", "optimizer/models/coverage.py",
       r"    return best_hfu_on_arch\(accuracy, plan_cell, precision\)\n", "    return None\n",
       ["tests/test_efficiency_ceiling.py"],
       "a plan no published run is like keeps a band for HFU 77% on A100s, above every ampere run (73.7%)"),
    _m("launch-sync-each-batch-dropped", "launch", "optimizer/launch/hf_args.py",
       r'return \{"gradient_accumulation_kwargs": \{"sync_each_batch": True\}\}', "return None",
       ["tests/test_launch.py"], "an FSDP plan priced with a reduce per micro-batch launched with no_sync"),
    _m("nemo-packed-seq-length-cut", "launch", "optimizer/launch/nemo_cfg.py",
       r'"seq_length": scenario\.seq_len \* plan\.micro_batch,', '"seq_length": scenario.seq_len,',
       ["tests/test_launch_plan.py"], "a NeMo pack of 2 x 4096 tokens cut at 4096 by the dataset's collate function"),
    _m("nemo-packing-note-dropped", "launch", "optimizer/launch/nemo_cfg.py",
       r"    if packed is not None:\n        notes\.append\(packed\)\n", "", ["tests/test_launch_plan.py"],
       "seq_length 16384 and global_batch_size 64 against a plan of 4096 x 256, with no word on why"),
    _m("nemo-packing-note-rows-not-packs", "launch", "optimizer/launch/nemo_cfg.py",
       r'f"global_batch_size \{rows // m\} = global batch', 'f"global_batch_size {rows} = global batch',
       ["tests/test_launch_plan.py"], "the packing note names a global_batch_size the launch file does not write"),
    _m("overheads-qlora-disk-4bit", "timing", "optimizer/models/overheads.py",
       r"    base = job\.arch\.total_params \* 2\.0\n", "    base = job.arch.total_params * job.base_bits / 8.0\n",
       ["tests/test_offers_hosts.py"], "a 70B QLoRA disk line asks for 41 GB where the bf16 download needs 141"),
    _m("checklist-group-time-ratio", "solver", "optimizer/solve/checklist.py",
       r"ratio = time_ratio_p90 if time_ratio_p90 is not None else 1\.0",
       'ratio = float(space.accuracy["time"]["ratio_p90"]) if space.accuracy else 1.0', ["tests/test_offers_hosts.py"],
       "a no-P2P plan told to stop at 1.3x where its band expects 1.9x"),
    _m("checklist-allreduce-all-cards", "solver", "optimizer/solve/checklist.py",
       r'return f"all_reduce_perf -b 1G -e 1G -g \{dp\} \(nccl-tests\)"',
       'return "all_reduce_perf -b 1G -e 1G -g 8 (nccl-tests)"', ["tests/test_offers_hosts.py"],
       "a tp 4 x dp 2 plan's check over 2 GPUs printed all_reduce_perf -g 8, the whole node"),
    _m("checklist-allreduce-pp-as-dp", "solver", "optimizer/solve/checklist.py",
       r"dp = int\(cfg\.dp\[0\]\)", "dp = int(c.cards[i]) // int(cfg.tp[0])", ["tests/test_offers_hosts.py"],
       "a tp 4 x pp 2 plan, with no data-parallel all-reduce, told to measure one over 2 GPUs"),
    _m("torchtune-lora-output-dropped", "launch", "optimizer/launch/torchtune_cfg.py",
       r'block\["apply_lora_to_output"\] = output and not tied', 'block["apply_lora_to_output"] = False',
       ["tests/test_launch.py"], "an lm_head adapter the plan priced, silently left off torchtune's model"),
    _m("hosts-saves-beyond-steps", "timing", "optimizer/models/hosts.py",
       r"saves = np\.minimum\(overheads\.saves_count\(train, interval / 3600\.0\), float\(job\.steps\)\)",
       "saves = overheads.saves_count(train, interval / 3600.0)", ["tests/test_offers_hosts.py"],
       "1,084 checkpoint saves counted inside a single optimizer step"),
    _m("catalog-config-dtype-key-ignored", "solver", "optimizer/inputs/catalog.py",
       r'for key in \("dtype", "torch_dtype"\):', 'for key in ("torch_dtype",):', ["tests/test_hf_config.py"],
       "a transformers-5 config.json (dtype) read as having no dtype: a bf16 model planned in fp16 unwarned"),
    _m("catalog-moe-count-unchecked", "solver", "optimizer/inputs/catalog.py",
       r"    if experts_key is None and expected is not None:", "    if False:", ["tests/test_hf_config.py"],
       "a Mixtral config without num_local_experts read as a dense 7.2B model"),
    _m("overlay-band-order-unchecked", "measure", "optimizer/models/overlay.py",
       r"if self\.ratio_p10 > self\.ratio_p90:", "if False:", ["tests/test_calibrate.py"],
       "an overlay band upside down puts hours_p10 above hours_p90"),
    # ---- launch values of the newer engines
    _m("launch-torchtune-rank-is-alpha", "launch", LAUNCH_FILES, r'block\["lora_rank"\] = spec\.rank',
       'block["lora_rank"] = spec.alpha', ENGINE_TESTS, "torchtune lora_rank set to the LoRA alpha"),
    _m("launch-nemo-lora-dim-alpha-swapped", "launch", LAUNCH_FILES,
       r'\{"dim": spec\.rank, "alpha": spec\.alpha', '{"dim": spec.alpha, "alpha": spec.rank', ENGINE_TESTS,
       "NeMo LoRA dim and alpha swapped"),
    _m("launch-torchrun-every-card", "launch", LAUNCH_FILES,
       r"--nproc_per_node \{min\(plan\.cards, cards_per_node\)\}", "--nproc_per_node {plan.cards}", ENGINE_TESTS,
       "torchrun --nproc_per_node set to every card of a multi-node plan"),
    # ---- MoE LoRA targets (catalogs/lora_targets.yaml)
    _m("launch-moe-experts-as-module-names", "launch", LORA_NAMES,
       r"modules = \[t for t in wanted if t not in MLP or linear_mlps\]", "modules = list(wanted)", MOE_LORA_TESTS,
       "Mixtral's LoraConfig names gate_proj/up_proj/down_proj, modules no expert has: 13.6M adapters, 223M priced"),
    _m("launch-moe-no-target-parameters", "launch", LORA_NAMES,
       r'keys\["target_parameters"\] = list\(names\.parameters\)', "pass", MOE_LORA_TESTS,
       "launch.yaml's LoraConfig leaves the routed experts out: PEFT adapts the attention only"),
    _m("launch-axolotl-no-target-parameters", "launch", "optimizer/launch/axolotl_cfg.py",
       r'cfg\["lora_target_parameters"\] = list\(names\.parameters\)', "pass", MOE_LORA_TESTS,
       "axolotl.yaml adapts no expert of an MoE model"),
    _m("launch-moe-arch-not-passed", "launch", "optimizer/solve/planner.py",
       r"save_steps\(best\), space\.job\.arch,", "save_steps(best), None,", MOE_LORA_TESTS,
       "the solve writes the launch files without the model: Mixtral gets the dense module names again"),
    _m("launch-llamafactory-experts-unnoted", "launch", "optimizer/launch/by_engine.py",
       r"\[\*names\.notes, \*llamafactory_notes\(names\)\]", "[*names.notes]", MOE_LORA_TESTS,
       "llamafactory.yaml silently adapts no expert of an MoE model"),
    _m("launch-moe-dropout-unchecked", "launch", "optimizer/solve/planner.py",
       r"if dropout is not None:  # the launch files could not start \(PEFT refuses it\)", "if False:", MOE_LORA_TESTS,
       "an MoE plan with lora.dropout 0.05 whose LoraConfig PEFT refuses at start-up (ParamWrapper)"),
    _m("memory-lora-moe-gate-up-unfused", "memory", MEM, r"gate_up = routed \* \(h \+ 2 \* w\) if",
       "gate_up = 2 * routed * (h + w) if", [*MOE_LORA_TESTS, "tests/test_hf_config.py"],
       "a routed expert's fused gate_up_proj priced as two adapters: 16.8M more than PEFT creates for Mixtral"),
    # ---- pipeline schedule
    _m("pipeline-interleaves-partial-groups", "timing", "optimizer/models/pipeline.py",
       r"return np\.where\(interleaving_allowed\(cfg\.grad_accum, cfg\.pp\), out, 1\)", "return out",
       PIPE_TESTS, "interleaved chunks on a step whose micro-batches Megatron refuses (not a multiple of pp)"),
    # ---- explanations
    _m("relax-deadline-from-cheapest-plan", "explain", "optimizer/solve/explain_relax.py",
       r"need = hours_needed\(space, fast if fast is not None else best\)",
       "need = hours_needed(space, best)", EXPLAIN_TESTS,
       "the deadline relaxation read from the cheapest plan instead of the fastest"),
    _m("relax-deadline-without-spot-margin", "explain", "optimizer/solve/explain_relax.py",
       r'return float\(np\.ceil\(column\(space, "deadline_time_s", np\.array\(\[i\]\)\)\[0\] / 36\.0\)\) / 100\.0',
       "return _hours(space, i)", ["tests/test_spot.py"],
       "the deadline an explanation lists forgets the spot plan's pessimistic margin the solver checks"),
    _m("launch-dir-keeps-stale-files", "output", "optimizer/inputs/atomic.py",
       r"stale = \[base / name for name in owned if name not in files\]", "stale = []",
       ["tests/test_output_faults.py"],
       "an earlier plan's ds_config.json stays in the launch folder beside a new plan"),
    _m("launch-dir-checked-while-renaming", "output", "optimizer/inputs/atomic.py",
       r"modes = \{name: check_target\(target\) for", "modes = {name: None for",
       ["tests/test_output_faults.py"], "a launch folder's targets checked only as each is renamed: a failure leaves "
       "the new plan's first files beside the old plan's others"),
    _m("outputs-written-one-by-one", "output", "optimizer/cli/commands.py",
       r"write_outputs_atomic\(outputs\)  # all or none: a failed --html",
       "[write_outputs_atomic([o]) for o in outputs]  # a failed --html", ["tests/test_output_faults.py"],
       "solve writes the launch files, then fails on --html: exit 3 with the new launch files left behind"),
    _m("outputs-rename-not-rolled-back", "output", "optimizer/inputs/atomic.py",
       r"_roll_back\(done, temps, created\)\n        if isinstance",
       "_roll_back([], temps, created)\n        if isinstance", ["tests/test_output_faults.py"],
       "a rename that fails midway leaves the outputs renamed before it replaced: half of the new set on disk"),
    _m("batch-html-checked-after-solving", "output", "optimizer/cli/commands.py",
       r"check_writable\(html_path\)  # before the batch", "pass  # before the batch", ["tests/test_output_faults.py"],
       "batch --html into a folder that takes no file is found out after every scenario is solved"),
    _m("output-directory-refused-as-usage", "output", "optimizer/cli/commands.py",
       r'"--html", "html_path", type=click\.Path\(\)', '"--html", "html_path", type=click.Path(dir_okay=False)',
       ["tests/test_output_faults.py"], "--html DIR exits 2 (bad input) where README promises 3 (cannot be written)"),
    _m("portfolio-window-blamed-on-memory", "portfolio", PF_PLAN, r"    if runs:\n        fastest = min",
       "    if False:\n        fastest = min", ["tests/test_portfolio.py"],
       "a 2.4 h window the fastest 70B plan needs 4.73 h for is reported as a memory and host-RAM problem"),
    _m("portfolio-cost-of-no-plan-dashed", "portfolio", "optimizer/report/portfolio.py",
       r'if c\["total"\] is None:  # no schedule', "if False:  # no schedule", ["tests/test_portfolio.py"],
       "an infeasible portfolio prints 'Cost: - = rent - + capital - + power -'"),
    _m("gantt-label-margin-fixed", "output", "optimizer/report/html/html_svg.py",
       r"left = math\.ceil\(max\(widest, 120\.0\)\) \+ 14", "left = 230", ["tests/test_html_report.py"],
       "the portfolio chart's 44-character rental labels start left of the SVG: 'ambda-gpu_8x_h100_sxm5...'"),
    _m("gantt-long-label-not-cut", "output", "optimizer/report/html/html_svg.py",
       r"if text_width\(text, font_px\) <= max_px:", "if True:", ["tests/test_html_report.py"],
       "a 140-character offer name widens the label margin until the day axis is a sliver"),
    _m("html-font-without-cjk", "output", "optimizer/report/html/style.css",
       r'Arial,"Noto Sans CJK SC","PingFang SC","Microsoft YaHei","Source Han Sans SC",sans-serif',
       "Arial,sans-serif", ["tests/test_html_report.py"],
       "a report naming 算家云 (cn catalog) shows boxes where the system font has no CJK glyphs"),
    _m("probe-packages-unchecked", "measure", "optimizer/measure/probe_script.py",
       r"    if missing:\n        print\(f\"probe\.py: error:", "    if False:\n        print(f\"probe.py: error:",
       ["tests/test_probe.py"], "python probe.py --tiny without torch dies with a ModuleNotFoundError traceback"),
    _m("batch-lock-file-left", "batch", "optimizer/solve/batch.py", r"            os\.unlink\(lock\)  # still locked",
       "            pass  # still locked", ["tests/test_output_faults.py"],
       "every batch run leaves a .NAME.lock file beside its output"),
    _m("batch-lock-kept-on-removed-file", "batch", "optimizer/solve/batch.py",
       r"        if same:\n            return fd", "        if True:\n            return fd",
       ["tests/test_output_faults.py"],
       "a batch that opened the lock file as its holder removed it locks a deleted file: two writers on one -o"),
    _m("batch-csv-python-booleans", "batch", "optimizer/solve/batch.py",
       r"writerow\(\[_csv_value\(k, row\[k\]\) for k in ROW_FIELDS\]\)",
       'writerow(["" if row[k] is None else row[k] for k in ROW_FIELDS])', ["tests/test_batch.py"],
       "the CSV says True/False where the JSONL says true/false"),
    _m("batch-summary-unpluralised", "batch", "optimizer/report/batch.py",
       r"scenarios = f\"\{summary\.total\} scenario\{'' if summary\.total == 1 else 's'\}\"",
       'scenarios = f"{summary.total} scenarios"', ["tests/test_batch.py"], "'Done: 1 scenarios'"),
    _m("batch-bar-stopped-unstarted", "batch", "optimizer/report/batch.py",
       r'            if "task" in state:\n                bar\.stop\(\)',
       "            if True:\n                bar.stop()", ["tests/test_output_faults.py"],
       "a blank line on stderr before the one-line error of a second batch on one -o"),
    _m("torchtune-qlora-without-builder", "launch", "optimizer/launch/torchtune_cfg.py",
       r"if entry is None or entry\[0\] in QLORA_MODULES:", "if True:", ["tests/test_errors.py"],
       "a torchtune QLoRA plan for a model torchtune has no qlora_* builder for (Qwen2.5) is solved, not refused"),
    _m("explain-no-engine-settings", "explain", "optimizer/solve/explain.py",
       r"        if getattr\(part, key\) == value or sc\.training\.framework\.value not in frameworks:\n"
       r"            continue",
       "        continue", ["tests/test_infeasible.py"],
       "an infeasible FSDP scenario whose held gradients a reduce per micro-batch or DeepSpeed would fit says "
       "nothing fits"),
    _m("checklist-no-p2p-expects-fitted-link", "checklist", "optimizer/solve/checklist.py",
       r"if int\(c\.nodes\[i\]\) == 1 and not hosts\.p2p\(gpu, offer\):", "if False:",
       ["tests/test_offers_hosts.py"],
       "a no-P2P plan's nccl-tests expectation is the fitted training link, half what a healthy host measures"),
    _m("unpacked-lone-sample-padded", "timing", "optimizer/models/configs.py",
       r"return np\.where\(cfg\.micro_batch == 1, float\(job\.sample_row_tokens\), full\)", "return full",
       ["tests/test_model_input.py"],
       "a micro-batch of one unpacked sample is timed padded to seq_len, which no launch file pads it to"),
    _m("kbit-quantises-fused-experts", "memory", "optimizer/models/memory.py",
       r"return linear_params\(job\) - 3 \* a\.hidden \* a\.moe_layers \* a\.experts \* a\.expert_width",
       "return linear_params(job)", ["tests/test_moe_lora_targets.py"],
       "a QLoRA MoE base counted at NF4 for its routed experts, which bitsandbytes leaves in 16 bits"),
    _m("batch-row-write-not-held", "batch", "optimizer/solve/batch.py",
       r"with interrupt_deferred\(\):", "with threading.Lock():", ["tests/test_batch.py"],
       "a Ctrl-C as a row is written cuts it short instead of waiting for it: a solved row is lost"),
    _m("batch-error-path-repeated", "batch", "optimizer/solve/batch.py",
       r"return error\[len\(prefix\) :\] if error\.startswith\(prefix\) else error", "return error",
       ["tests/test_batch.py"], "error X/broken.yaml: X/broken.yaml: catalog: ... names the scenario twice"),
    _m("cli-builtin-catalogs-typed", "output", "optimizer/cli/commands.py",
       r'    return ", "\.join\(builtin_offer_names\(\)\)', '    return "cn, us"', ["tests/test_help_text.py"],
       "--catalog help lists two built-in catalogs (cn, us) where catalogs/offers/ holds seven"),
    _m("engines-sharding-unchecked", "solver", "optimizer/models/engines.py",
       r"    refused = sharding_refusal\(scenario, cap\)\n", "    refused = None\n", ["tests/test_engines.py"],
       "training: {framework: nemo, sharding: fsdp} accepted silently, though NeMo never reads the field"),
    # ---- launch review: what every file must say for the run to be the priced one
    _m("launch-max-steps-dropped", "launch", "optimizer/launch/by_engine.py",
       r'set_in_hf_files\(settings, \{"max_steps": steps\}\)', "pass", REVIEW_TESTS,
       "the HF files train num_train_epochs 3 (Axolotl 1 epoch), not the steps the plan is priced for"),
    _m("launch-steps-not-passed", "launch", "optimizer/solve/planner.py",
       r"space\.job\.arch, run_steps\(best\),", "space.job.arch, None,", REVIEW_TESTS,
       "the solve writes the launch files without the plan's step count"),
    _m("launch-torchtune-steps-per-epoch-total", "launch", "optimizer/launch/by_engine.py",
       r'settings\["torchtune"\]\["max_steps_per_epoch"\] = math\.ceil\(steps / epochs\)',
       'settings["torchtune"]["max_steps_per_epoch"] = steps', REVIEW_TESTS,
       "a 3-epoch torchtune run trains three times the plan's steps"),
    _m("launch-nemo-max-steps-dropped", "launch", "optimizer/launch/by_engine.py",
       r'settings\["nemo"\]\["trainer"\] = \{"max_steps": steps\}', "pass", REVIEW_TESTS,
       "a NeMo run with no trainer.max_steps"),
    _m("launch-save-total-limit-dropped", "launch", "optimizer/launch/by_engine.py",
       r'set_in_hf_files\(settings, \{"save_total_limit": kept\}\)', "pass", REVIEW_TESTS,
       "every checkpoint kept on a disk sized for the model and two"),
    _m("launch-axolotl-cosine-schedule", "launch", "optimizer/launch/axolotl_cfg.py",
       r'        "lr_scheduler": LR_SCHEDULE\["lr_scheduler_type"\],\n', "", REVIEW_TESTS,
       "Axolotl launches its default cosine schedule where the HF files run linear"),
    _m("launch-lm-head-dropped-beside-all-linear", "launch", LORA_NAMES,
       r"if asked == \[ALL_LINEAR\]:", "if ALL_LINEAR in asked:", REVIEW_TESTS,
       "[all-linear, lm_head] written as all-linear: PEFT leaves out the lm_head adapter the plan priced"),
    _m("launch-torchtune-output-not-with-all-linear", "launch", "optimizer/launch/torchtune_cfg.py",
       r'output = "lm_head" in targets', 'output = not every and "lm_head" in targets', REVIEW_TESTS,
       "torchtune's output layer left without the adapter [all-linear, lm_head] asks for"),
    _m("launch-llamafactory-sync-each-batch-dropped", "launch", "optimizer/launch/llamafactory_cfg.py",
       r'cfg\["accelerator_config"\] = sync', "pass", REVIEW_TESTS,
       "LLaMA-Factory holds unsharded gradients over the accumulation the plan priced as reduced each micro-batch"),
    _m("launch-axolotl-sync-each-batch-dropped", "launch", "optimizer/launch/axolotl_cfg.py",
       r'cfg\["accelerator_config"\] = sync', "pass", REVIEW_TESTS,
       "Axolotl holds unsharded gradients over the accumulation the plan priced as reduced each micro-batch"),
    _m("launch-llamafactory-reentrant-default", "launch", "optimizer/launch/llamafactory_cfg.py",
       r'cfg\["use_reentrant_gc"\] = use_reentrant\(scenario, plan\)', "pass", REVIEW_TESTS,
       "LLaMA-Factory recomputes reentrant (its default) where the HF and Axolotl files do not"),
    _m("nemo-offload-not-precision-aware", "launch", "optimizer/launch/nemo_cfg.py",
       r'keys\["use_precision_aware_optimizer"\] = True', "pass", REVIEW_TESTS,
       "Megatron-LM refuses the CPU offload, megatron-core keeps an fp32 main copy on the GPU"),
    _m("ds-bucket-defaults", "launch", "optimizer/launch/ds_config.py",
       r'keys: dict\[str, Any\] = \{"reduce_bucket_size": "auto"\}', "keys: dict[str, Any] = {}", REVIEW_TESTS,
       "DeepSpeed's 5e8-element reduce buckets, two of them: 2-4 GB where the plan priced 1 GB"),
    _m("probe-fsdp-orig-params", "measure", "optimizer/measure/probe.py",
       r'cfg\["fsdp"\] = fsdp_plugin\(sc, trial\.plan\)',
       'cfg["fsdp"] = {**fsdp_plugin(sc, trial.plan), "fsdp_use_orig_params": True}', ["tests/test_probe.py"],
       "the probe measures FSDP with use_orig_params true where the LoRA launch runs it false"),
    _m("probe-lm-head-dropped", "measure", "optimizer/measure/probe_script.py",
       r'return "all-linear" if isinstance\(modules, list\) and "all-linear" in modules else modules',
       'return [m for m in modules if m != "lm_head"] if isinstance(modules, list) else modules', REVIEW_TESTS,
       "the probe measures LoRA without the lm_head adapter the plan and launch have"),
    _m("scenario-catalog-cwd-first", "catalog", "optimizer/inputs/catalog.py",
       r"bases = \(\[base\] if base is not None else \[\]\) \+ \[Path\(\), CATALOG_DIR\.parent\]",
       "bases = [Path()] + ([base] if base is not None else []) + [CATALOG_DIR.parent]", ["tests/test_catalog.py"],
       "a scenario's catalog: o.yaml plans with the working directory's o.yaml, not the one beside it"),
    _m("scenario-named-file-cwd-first", "catalog", "optimizer/inputs/catalog.py",
       r"return p if p\.exists\(\) and not beside\.exists\(\) else beside", "return p if p.exists() else beside",
       ["tests/test_catalog.py"], "a scenario's calibration: cal.yaml reads the working directory's cal.yaml"),
    _m("validate-builtin-id-clash-unchecked", "catalog", VALID,
       r'clashes = _builtin_id_clashes\(loaded, by_kind\["offers"\]\) if paths else \(\)', "clashes = ()",
       ["tests/test_cli.py"], "validate passes, unsaid, an offer id that --add-catalog refuses as a built-in's"),
    _m("validate-builtin-file-clashes-with-itself", "catalog", "optimizer/inputs/catalog.py",
       r"if f\.resolve\(\) not in left_out\]", "]", ["tests/test_cli.py"],
       "catalog validate us refuses every us.yaml offer as a duplicate of itself"),
    _m("skypilot-host-columns-unchecked", "catalog", "optimizer/inputs/import_skypilot.py",
       r'or \(host_problem\(row\) if rules\.get\("host_facts"\) else None\)', "or None",
       ["tests/test_import_skypilot.py"], "MemoryGiB -5 fails the import as offers[8].host.ram_gib of the output file"),
    _m("skypilot-price-ceiling-dropped", "catalog", "optimizer/inputs/import_skypilot.py",
       r"if value / count > MAX_CARD_PRICE:", "if False:", ["tests/test_import_skypilot.py"],
       "Price 1e308 fails the import as offers[8].prices.hour.amount of the output file"),
    _m("skypilot-bad-price-said-missing", "catalog", "optimizer/inputs/import_skypilot.py",
       r'return f"Price \{text\} is not a positive finite number"', 'return "no on-demand Price"',
       ["tests/test_import_skypilot.py"], "a Price of -5, 0, NaN or inf is skipped as 'no on-demand Price'"),
    _m("skypilot-overflow-price-sets-level", "catalog", "optimizer/inputs/import_skypilot.py",
       r"if price_problem\(row, _count\(row\) or 1\) is None:  # a Price of 1e308", "if True:  # a Price of 1e308",
       ["tests/test_import_skypilot.py"], "one GCP row priced 1e308 makes every other region's a second price level"),
    _m("hf-config-own-size-limit", "catalog", "optimizer/inputs/catalog.py",
       r'read_json\(p, str\(p\), MAX_JSON_BYTES, "an HF config\.json"\)',
       'read_json(p, str(p), 4 * 1024 * 1024, "an HF config.json")', ["tests/test_hf_config.py"],
       "a 5 MiB config.json is refused where the README promises 16 MiB for a JSON file"),
    _m("batch-folder-unreadable-entries-dropped", "batch", "optimizer/solve/batch.py",
       r"p\.suffix in SCENARIO_SUFFIXES and not p\.is_dir\(\)", "p.suffix in SCENARIO_SUFFIXES and p.is_file()",
       ["tests/test_batch.py"], "a named pipe or a dangling link named *.yaml in a batch folder gets no row"),
    _m("batch-glob-unreadable-matches-dropped", "batch", "optimizer/solve/batch.py",
       r"glob\.glob\(item, recursive=True\) if not Path\(p\)\.is_dir\(\)",
       "glob.glob(item, recursive=True) if Path(p).is_file()", ["tests/test_batch.py"],
       "a named pipe or a dangling link a batch glob matches gets no row, no warning"),
    _m("hint-logits-share-ignored", "explain", "optimizer/solve/hint.py",
       r'return logits_share\(space, chosen\) >= float\(limits\["logits_share"\]\)', "return True",
       ["tests/test_hint.py"],
       "every hf solve is solved a second time with the fused loss, 14B LoRA whose logits are 11% of its peak too"),
    _m("html-trade-hint-dropped", "report", "optimizer/report/html/html_plan.py",
       r'for label, key in \(\("Trade-off", "trade_off"\), \("Hint", "hint"\)\):', "for label, key in ():",
       ["tests/test_html_report.py"], "the HTML page leaves out the trade the tolerance made and the fused-loss hint"),
    _m("torchtune-sgd-fused-kept", "launch", "optimizer/launch/torchtune_cfg.py", r'        block\["fused"\] = False',
       "        pass", LAUNCH_TESTS, "torchtune's distributed SGD plan keeps fused: True, which FSDP2's DTensors lack"),
    _m("axolotl-act-offload-dropped", "launch", "optimizer/launch/axolotl_cfg.py",
       r"    if scenario\.training\.activation_offload:\n        keys", "    if False:\n        keys", LAUNCH_TESTS,
       "axolotl.yaml keeps every activation on the GPU for a plan priced with them offloaded"),
    _m("zero3-kbit-load-ignored", "memory", SPACE,
       r"    card &= memory\.kbit_load_bytes\(job, cfg, cal\[\"memory\"\]\) <= usable",
       "    pass", LAUNCH_TESTS, "70B QLoRA under ZeRO-3 on 2 x 24 GB: each GPU loads the whole 37 GiB NF4 base first"),
    _m("probe-qlora-host-copies-dropped", "measure", "optimizer/measure/probe.py",
       r"        host_copy = ranks \* kbit_base",
       "        host_copy = 0.0", ["tests/test_probe.py"],
       "the 70B QLoRA probe prints 76 GiB of host RAM where its four ranks hold four NF4 copies, about 220"),
    _m("loso-own-flop-count-ignored", "timing", "bench/loso.py",
       r'    if "model_flops_per_token" in measured:\n',
       '    if False:\n', ["tests/test_timing_loso.py"],
       "the 2019 Megatron-LM V100 run is converted with the later formula, 7% fewer tokens/s than its team counted"),
    _m("review-figures-readme-unchecked", "bench", "bench/readme_figures.py",
       r'        if text\[start:end\] != values\[group\]:\n',
       '        if False:\n', ["tests/test_review_figures.py"],
       "the README's rule-of-thumb saving keeps an old figure after the docs' table is rewritten (it quoted 17.6% "
       "for a month while the review measured 22.0%)"),
    _m("calibrate-run-held-to-instances", "measure", "optimizer/measure/calibrate.py",
       r'whole_instances=False\)', 'whole_instances=True)', ["tests/test_calibrate.py"],
       "a measured run on one card of a GPU the catalogs rent as 8-card instances is refused by ftopt calibrate"),
    _m("fsdp-quant-state-sharded", "memory", MEM,
       r"    return np\.where\(_uses_fsdp\(job, cfg\) & \(cfg\.zero_stage >= 3\), state, 0\.0\)",
       "    return np.zeros(len(cfg))", ["tests/test_memory_components.py"],
       "FSDP QLoRA shards and offloads bitsandbytes' absmax with the weights: 1.1 GB per GPU missing for a 70B"),
    _m("fsdp2-fp32-accumulation-ignored", "memory", MEM,
       r'    g16 = np\.where\(held & \(job\.reduce_dtype == "fp32"\), 4\.0, b\["grad16"\]\)',
       '    g16 = b["grad16"]', ["tests/test_memory_accumulation.py"],
       "FSDP2 with an fp32 reduce dtype accumulates held gradients at 2 B: KempnerForge's 70B 30 GiB low per GPU"),
    _m("loss-16bit-held-as-16bit", "memory", "catalogs/calibration.yaml",
       r"standard_16bit_held: 8,", "standard_16bit_held: 6,", ["tests/test_memory_loss_path.py"],
       "a 16-bit loss whose loop keeps the logits priced as if it dropped them: 2 B per logit missing"),
    _m("launch-reduce-dtype-unsaid", "launch", "optimizer/launch/by_engine.py",
       r'    if scenario\.training\.reduce_dtype == "fp32":', "    if False:", ["tests/test_launch_review.py"],
       "a plan priced with FSDP2's fp32 gradient accumulation launches files that never mention the policy"),
    _m("fsdp-root-resharded", "memory", MEM,
       r'    root = 2\.0 \* \(a\.embedding_params \+ a\.hidden\) if root_kept else 0\.0',
       "    root = 0.0", ["tests/test_memory_components.py"],
       "hf_fsdp frees its root unit after forward: the 16-bit embeddings and head (1 GB at 70B) missing at the peak"),
]


@dataclass
class Result:
    mutation: Mutation
    outcome: str  # killed | survived | skipped | timeout
    seconds: float
    detail: str


def _tracked(repo: Path) -> list[str]:
    out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=repo, capture_output=True, text=True,
                         check=True)  # fmt: skip
    return [p for p in out.stdout.splitlines() if (repo / p).is_file()]


def _copy_tree(repo: Path, dest: Path) -> None:
    for rel in _tracked(repo):
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(repo / rel, target)


def _find(m: Mutation, tree: Path) -> tuple[Path, str, str] | str:
    """(file, original text, mutant text) of the first file the pattern changes, or why it was skipped."""
    for pattern in m.files:
        for name in sorted(glob.glob(str(tree / pattern))):
            path = Path(name)
            text = path.read_text(encoding="utf-8")
            mutant, n = re.subn(m.pattern, m.repl, text, count=1)
            if n and mutant != text:
                return path, text, mutant
    return f"pattern not found in {', '.join(m.files)}: {m.pattern}"


def stale(mutations: list[Mutation], tree: Path = REPO) -> list[str]:
    """One line per mutation that would not plant its bug: a pattern that changes nothing, or a missing test file."""
    out = []
    for m in mutations:
        found = _find(m, tree)
        if isinstance(found, str):
            out.append(f"{m.id}: {found}")
        out += [f"{m.id}: test file {t} does not exist" for t in m.tests if not (tree / t).is_file()]
    return out


def _apply(m: Mutation, tree: Path) -> tuple[Path, str] | str:
    """(file, original text) after writing the mutant, or the reason it was skipped."""
    found = _find(m, tree)
    if isinstance(found, str):
        return found
    path, text, mutant = found
    path.write_text(mutant, encoding="utf-8")
    return path, text


def _run_one(m: Mutation, tree: Path, per_test_s: int, total_s: int) -> Result:
    started = time.monotonic()
    applied = _apply(m, tree)
    if isinstance(applied, str):
        return Result(m, "skipped", 0.0, applied)
    path, original = applied
    env = dict(os.environ, PYTHONPATH=str(tree), PYTHONDONTWRITEBYTECODE="1")
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", f"--timeout={per_test_s}",
           *m.tests]  # fmt: skip
    try:
        proc = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, timeout=total_s)
        lines = proc.stdout.strip().splitlines()
        failed = [ln for ln in lines if ln.startswith(("FAILED", "ERROR"))]
        outcome = "survived" if proc.returncode == 0 else "killed"
        detail = failed[0] if failed else (lines[-1] if lines else f"exit status {proc.returncode}")
    except subprocess.TimeoutExpired:
        outcome, detail = "timeout", f"tests ran past {total_s} s (counted as killed)"
    finally:
        path.write_text(original, encoding="utf-8")
    return Result(m, outcome, time.monotonic() - started, str(detail))


def _worker(mutations: list[Mutation], per_test_s: int, total_s: int, report) -> list[Result]:
    with tempfile.TemporaryDirectory(prefix="ftopt-mutation-") as tmp:
        tree = Path(tmp)
        _copy_tree(REPO, tree)
        out = []
        for m in mutations:
            r = _run_one(m, tree, per_test_s, total_s)
            report(r)
            out.append(r)
        return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=2, help="mutations run at once, each in its own copy (default 2)")
    ap.add_argument("--only", help="comma-separated mutation ids")
    ap.add_argument("--module", help="run only this module's mutations (memory, activations, timing, ...)")
    ap.add_argument("--per-test-timeout", type=int, default=120, help="pytest-timeout per test, seconds")
    ap.add_argument("--timeout", type=int, default=600, help="limit for one mutation's test run, seconds")
    ap.add_argument("--list", action="store_true", help="list the mutations (and whether each pattern is found)")
    ap.add_argument("--no-baseline", action="store_true", help="skip the unmutated run of the selected tests")
    args = ap.parse_args(argv)
    chosen = MUTATIONS
    if args.only:
        wanted = set(args.only.split(","))
        unknown = wanted - {m.id for m in MUTATIONS}
        if unknown:
            print(f"unknown mutation ids: {', '.join(sorted(unknown))}", file=sys.stderr)
            return 2
        chosen = [m for m in chosen if m.id in wanted]
    if args.module:
        chosen = [m for m in chosen if m.module == args.module]
    if args.list:
        for m in chosen:
            state = "STALE" if isinstance(_find(m, REPO), str) else "found"
            print(f"{m.id:42s} {m.module:12s} {state:8s} {m.why}")
        return 1 if stale(chosen) else 0
    problems = stale(chosen)
    if problems:
        print("stale mutations (they would plant nothing): update each pattern to the current code", file=sys.stderr)
        print("\n".join(problems), file=sys.stderr)
        return 2
    if not args.no_baseline:
        # the selected tests must pass on the unmutated tree, or every mutation would look killed
        tests = sorted({t for m in chosen for t in m.tests})
        env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONDONTWRITEBYTECODE="1")
        cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
               f"--timeout={args.per_test_timeout}", *tests]  # fmt: skip
        t0 = time.monotonic()
        base = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
        if base.returncode != 0:
            print(f"baseline: the unmutated tests fail, fix them first:\n{base.stdout[-3000:]}", file=sys.stderr)
            return 2
        print(f"baseline: {len(tests)} test files pass unmutated ({time.monotonic() - t0:.0f} s)", flush=True)
    print(f"{len(chosen)} mutations, {args.jobs} at a time", flush=True)

    def report(r: Result) -> None:
        print(f"{r.outcome:9s} {r.seconds:6.1f}s  {r.mutation.id:42s} {r.detail[:110]}", flush=True)

    shards = [chosen[i :: args.jobs] for i in range(max(args.jobs, 1))]
    started = time.monotonic()
    with cf.ThreadPoolExecutor(max_workers=len(shards)) as pool:
        futures = [pool.submit(_worker, s, args.per_test_timeout, args.timeout, report) for s in shards if s]
        results = [r for f in futures for r in f.result()]
    by_module: dict[str, list[Result]] = defaultdict(list)
    for r in results:
        by_module[r.mutation.module].append(r)
    print(f"\nper module (killed includes timeouts; skipped = pattern not found), {time.monotonic() - started:.0f} s:")
    total_run = total_surv = 0
    for module in sorted(by_module):
        rs = by_module[module]
        ran = [r for r in rs if r.outcome != "skipped"]
        surv = [r for r in ran if r.outcome == "survived"]
        total_run, total_surv = total_run + len(ran), total_surv + len(surv)
        rate = f"{len(surv) / len(ran):.0%}" if ran else "-"
        skipped = len(rs) - len(ran)
        print(f"  {module:12s} ran {len(ran):3d}  survived {len(surv):3d}  ({rate})  skipped {skipped}")
    print(f"  {'all':12s} ran {total_run:3d}  survived {total_surv:3d}  "
          f"({total_surv / total_run:.0%})" if total_run else "  nothing ran")  # fmt: skip
    for r in results:
        if r.outcome in ("survived", "skipped"):
            print(f"{r.outcome.upper()}: {r.mutation.id} ({r.mutation.why}): {r.detail}")
    return 1 if total_surv else 0


if __name__ == "__main__":
    sys.exit(main())
