"""The probe run: ``python probe.py [--tiny] [--steps N] [--warmup W] [--out FILE]`` (written by ``ftopt probe``).

Standalone: it needs torch, transformers and peft (accelerate; deepspeed when the plan shards with DeepSpeed,
bitsandbytes for QLoRA), never ftopt; a missing one stops it with one line giving the ``pip install`` of the
packages probe_config.json lists (exit status 2) before anything is imported. It reads ``probe_config.json`` beside
itself, creates its TrainingArguments (and so the DeepSpeed config) first, builds the model from its configuration
with random weights where they train (no download, no checkpoint on disk, never a whole copy on the host except
FSDP's rank 0: :func:`build_model`), trains W warm-up and N measured optimizer steps on random tokens of the planned
length with HF Trainer in the planned configuration (micro-batch, gradient accumulation 1, checkpointing, precision,
LoRA/QLoRA, ZeRO stage and offload through DeepSpeed or FSDP), and writes one measurement in the reference-case
schema:

- ``step_seconds``: median wall time of the measured steps (CUDA synchronised before and after each step);
- ``tokens_per_second_per_gpu`` = micro_batch x seq_len / step_seconds (every rank processes its own micro-batch);
- ``peak`` (GiB, metric allocated) = ``torch.cuda.max_memory_allocated`` of rank 0 over the run, and ``peaks``
  with its ``max_memory_reserved`` and the largest ``nvidia-smi`` memory.used of its GPU at the end of a step;
- ``environment``: GPU name, device count, library versions.

``--tiny`` runs the same code on the CPU with a small model of the same family and writes a measurement whose
memory fields are empty and whose ``environment.device`` is ``cpu``: a smoke test of the pipeline, which
``ftopt calibrate`` accepts but does not fit (a CPU says nothing about the planned GPU). Several GPUs:
``torchrun --nproc_per_node N probe.py``; rank 0 writes the file. ``--build-only cuda|cpu`` only builds the
planned model and prints the host memory it took (a check before a long run; the CPU variant quantises there).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
GIB = 2.0**30
# TrainingArguments optim per plan optimizer; AdamW fused, as the launch files ask and the time model prices it, unless
# the scenario's training.optimizer_kernel is foreach (adamw_torch, torch's multi-tensor path)
OPTIMIZERS = {"adamw": "adamw_torch_fused", "adamw_8bit": "adamw_bnb_8bit", "paged_adamw_8bit": "paged_adamw_8bit",
              "sgd": "sgd", "adafactor": "adafactor"}  # fmt: skip
# pip name -> the module it installs, for the packages probe_config.json lists (ftopt probe's install line)
MODULES = {"pyyaml": "yaml", "flash-attn": "flash_attn"}
# every run's packages; a CPU run (--tiny) needs no others (no DeepSpeed, NF4 or flash attention there)
BASE_PACKAGES = ("torch", "transformers", "peft", "accelerate", "pyyaml")
OPTIONAL = ("pyyaml",)  # without it the measurement is written as JSON text, which YAML reads
TINY = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
        "vocab_size": 512, "tiny_seq_len": 64, "tiny_micro_batch": 2}  # fmt: skip


def tiny_config(cfg: dict[str, Any]) -> dict[str, Any]:
    """The plan's configuration with a small model of the same family, sequence and batch (CPU smoke run)."""
    model = dict(cfg["model"])
    ratio = max(1, model["num_attention_heads"] // model["num_key_value_heads"])
    heads = TINY["num_attention_heads"]
    model.update({k: TINY[k] for k in ("hidden_size", "intermediate_size", "num_hidden_layers", "vocab_size")},
                 num_attention_heads=heads, num_key_value_heads=max(1, heads // min(ratio, heads)))  # fmt: skip
    if model.get("num_local_experts", 1) > 1:
        model["num_local_experts"] = 2
        model["num_experts_per_tok"] = 1
    out = dict(cfg, model=model, seq_len=min(cfg["seq_len"], TINY["tiny_seq_len"]),
               micro_batch=min(cfg["micro_batch"], TINY["tiny_micro_batch"]))  # fmt: skip
    return out


def tiny_scenario(cfg: dict[str, Any], total_steps: int) -> dict[str, Any]:
    """The measurement scenario of a --tiny run: the small model inline, one card, no sharding (what ran)."""
    m = cfg["model"]
    doc = json.loads(json.dumps(cfg["scenario"]))
    doc["model"] = {"name": f"tiny-{m['family']}", "layers": m["num_hidden_layers"], "hidden": m["hidden_size"],
                    "intermediate": m["intermediate_size"], "heads": m["num_attention_heads"],
                    "kv_heads": m["num_key_value_heads"], "vocab": m["vocab_size"],
                    "tied_embeddings": bool(m.get("tie_word_embeddings", False)),
                    "experts": m.get("num_local_experts", 1), "experts_per_token": m.get("num_experts_per_tok", 1),
                    "qkv_bias": m["family"] == "qwen2"}  # fmt: skip
    doc["seq_len"] = cfg["seq_len"]
    doc["global_batch"] = cfg["micro_batch"]
    doc["data"] = {"tokens": float(total_steps * cfg["micro_batch"] * cfg["seq_len"]), "epochs": 1}
    doc["plan"] = {**doc["plan"], "cards": 1, "tp": 1, "zero_stage": 0, "offload": "none",
                   "micro_batch": cfg["micro_batch"]}  # fmt: skip
    return doc


def hf_config(cfg: dict[str, Any], device: str) -> Any:
    """The transformers config of the model (Llama, Qwen2 or Mixtral family) with the planned attention kernel."""
    import transformers

    m = dict(cfg["model"])
    family = m.pop("family")
    config_cls = {"llama": transformers.LlamaConfig, "qwen2": transformers.Qwen2Config,
                  "mixtral": transformers.MixtralConfig}[family]  # fmt: skip
    attn = {"flash": "flash_attention_2", "sdpa": "sdpa", "eager": "eager"}[cfg["attention"]]
    if device == "cpu" or (attn == "flash_attention_2" and not _has("flash_attn")):
        attn = "sdpa"  # FlashAttention needs CUDA and the flash_attn package; sdpa is the closest kernel
    config = config_cls(**m, max_position_embeddings=max(cfg["seq_len"], 128), use_cache=False)
    config._attn_implementation = attn
    return config


def target_device(device: str) -> Any:
    """Where this rank's weights live: its own GPU (``LOCAL_RANK``, the device_map {"": local_rank}), or the CPU."""
    import torch

    return torch.device("cpu") if device == "cpu" else torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))


def build_model(cfg: dict[str, Any], device: str, quantise: bool | None = None) -> Any:
    """A randomly initialised causal LM from the config, LoRA/QLoRA applied; never whole on the host.

    Call it after TrainingArguments exist: under ZeRO-3 their DeepSpeed config makes transformers build the model
    inside ``deepspeed.zero.Init``, partitioned across the ranks as it is created (transformers
    integrations/deepspeed.py is_deepspeed_zero3_enabled). Otherwise the weights are created where they train:
    - QLoRA (``quantise``, default on a GPU): the model is declared on the meta device and each Linear is drawn in
      16 bits on the rank's device and quantised to NF4 there at once, one matrix at a time (quantise in place);
    - FSDP: rank 0 builds the model on the host, the other ranks on the meta device, and FSDP fills theirs from
      rank 0 (``sync_module_states``, ``cpu_ram_efficient_loading``): one copy on the host per node;
    - otherwise directly on the rank's GPU (random init in place).
    """
    import torch
    import transformers

    config = hf_config(cfg, device)
    half = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(cfg["precision"], torch.float32)
    method = cfg["method"]
    quantise = method == "qlora" and device != "cpu" if quantise is None else quantise
    # the launch's load dtype (hf_args.load_dtype: fp32 master weights the Trainer autocasts, fp32 LoRA bases under
    # FSDP, else the 16-bit compute dtype); under DeepSpeed, which casts the module itself: fp32 for full fine-tuning
    loaded = cfg.get("load_dtype")
    if device == "cpu" and not quantise:
        dtype = torch.float32
    elif loaded:
        dtype = getattr(torch, loaded)
    else:
        dtype = torch.float32 if method == "full" else half
    target = target_device(device)
    zero3 = transformers.integrations.deepspeed.is_deepspeed_zero3_enabled()
    fsdp = device != "cpu" and cfg["zero_stage"] > 0 and cfg["sharding"] == "fsdp"
    if quantise:
        # a plan that offloads its parameters keeps them on the host: each matrix is quantised on the GPU, then moved
        home = torch.device("cpu") if cfg["offload"] == "all" else target
        model = quantised_model(config, target, half, _quant_storage(cfg, half), home)
    elif zero3:
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=dtype)  # inside zero.Init
    elif fsdp and int(os.environ.get("RANK", "0")) > 0:
        from accelerate import init_empty_weights

        with init_empty_weights(include_buffers=False):
            model = transformers.AutoModelForCausalLM.from_config(config, dtype=dtype)
    elif fsdp:
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=dtype)
    else:
        with target:
            model = transformers.AutoModelForCausalLM.from_config(config, dtype=dtype)
    if method != "full":
        import peft

        lora = cfg["lora"]
        names = lora.get("peft_targets") or {}
        extra = {"target_parameters": names["target_parameters"]} if names.get("target_parameters") else {}
        settings = peft.LoraConfig(r=lora["rank"], lora_alpha=lora["alpha"], target_modules=peft_modules(lora),
                                   lora_dropout=lora["dropout"], task_type="CAUSAL_LM", **extra)  # fmt: skip
        model = peft.get_peft_model(model, settings)
    return model


def peft_modules(lora: dict[str, Any]) -> Any:
    """PEFT ``target_modules``: the launch's LoraConfig names (``peft_targets``).

    lm_head is included where the plan prices its adapter; an MoE model's experts are target_parameters. An older
    config's ``targets`` holding all-linear becomes PEFT's all-linear string.
    """
    modules = (lora.get("peft_targets") or {"target_modules": lora["targets"]})["target_modules"]
    return "all-linear" if isinstance(modules, list) and "all-linear" in modules else modules


def _quant_storage(cfg: dict[str, Any], half: Any) -> Any:
    """NF4 storage dtype: uint8, or the float dtype FSDP/ZeRO-3 shard when the 4-bit base is sharded.

    float32 under fp16, else bfloat16 (peft docs accelerate/fsdp.md and deepspeed.md, ``bnb_4bit_quant_storage``).
    """
    import torch

    sharded = cfg["zero_stage"] > 0 and (cfg["sharding"] == "fsdp" or cfg["zero_stage"] == 3)
    if not sharded:
        return torch.uint8
    return torch.float32 if half is torch.float16 else torch.bfloat16


def quantised_model(config: Any, target: Any, half: Any, storage: Any, home: Any = None) -> Any:
    """The model with NF4 (double-quantised) Linears, without a whole 16-bit copy anywhere.

    Declared on the meta device (accelerate init_empty_weights; buffers such as the rotary frequencies stay real),
    then each block Linear becomes a bitsandbytes Linear4bit whose weight is drawn in 16 bits on ``target`` and
    quantised there, then kept on ``home`` (default ``target``; the host for a plan that offloads its parameters);
    embeddings, norms and the output layer are drawn on ``home`` in 16 bits.
    """
    home = target if home is None else home
    import bitsandbytes as bnb
    import torch
    import transformers
    from accelerate import init_empty_weights

    with init_empty_weights(include_buffers=False):
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=half)
    std = float(getattr(config, "initializer_range", 0.02))
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is not torch.nn.Linear or name == "lm_head":
                continue
            layer = bnb.nn.Linear4bit(child.in_features, child.out_features, bias=child.bias is not None,
                                      compute_dtype=half, compress_statistics=True, quant_type="nf4",
                                      quant_storage=storage, device="meta")  # fmt: skip
            drawn = torch.empty(child.out_features, child.in_features, dtype=half, device=target).normal_(0.0, std)
            layer.weight = bnb.nn.Params4bit(drawn, requires_grad=False, compress_statistics=True, quant_type="nf4",
                                             quant_storage=storage, module=layer).to(target)  # fmt: skip
            del drawn
            if home != target:
                layer.weight = layer.weight.to(home)  # the NF4 data and its quantisation state
            if target.type == "cpu":
                _return_freed_memory()  # quantising on the host leaves freed buffers that glibc would keep
            if child.bias is not None:
                layer.bias = torch.nn.Parameter(torch.zeros(child.out_features, dtype=half, device=home))
            setattr(parent, name, layer)
    _materialise(model, home, half, std)
    model.is_loaded_in_4bit = True  # what PEFT and the Trainer read for a bitsandbytes 4-bit base
    return model


def _return_freed_memory() -> None:
    """Hand the heap's freed pages back to the system (glibc malloc_trim; a no-op elsewhere)."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    if name:
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(name).malloc_trim(0)


def _materialise(model: Any, target: Any, dtype: Any, std: float) -> None:
    """Draw every parameter still on the meta device on ``target`` and move the buffers there.

    Norm weights 1, biases 0, the rest N(0, std); tied embeddings are tied again.
    """
    import torch

    for module in model.modules():
        for name, param in list(module.named_parameters(recurse=False)):
            if not param.is_meta:
                continue
            data = torch.empty(param.shape, dtype=dtype, device=target)
            if name.endswith("bias"):
                data.zero_()
            elif param.dim() == 1:
                data.fill_(1.0)
            else:
                data.normal_(0.0, std)
            module._parameters[name] = torch.nn.Parameter(data, requires_grad=param.requires_grad)
        for name, buffer in list(module.named_buffers(recurse=False)):
            module._buffers[name] = buffer.to(target)
    if getattr(model.config, "tie_word_embeddings", False):
        model.tie_weights()


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def ds_config(cfg: dict[str, Any]) -> dict[str, Any] | None:
    """The DeepSpeed config ``ftopt probe`` wrote for the trial; None without ZeRO under DeepSpeed.

    It is the launch's own (ZeRO stage, offload, batch sizes, precision, the optimizer DeepSpeed steps on the host).
    """
    if cfg["zero_stage"] == 0 or cfg["sharding"] != "deepspeed":
        return None
    return cfg.get("deepspeed")


def fsdp_args(cfg: dict[str, Any]) -> dict[str, Any]:
    """TrainingArguments fsdp settings for the plan (empty unless it shards with FSDP).

    The launch's own accelerate FSDP settings (``cfg["fsdp"]``, ftopt's launch/fsdp_args.py: FSDP1, sharding
    strategy, offload, use_orig_params, loading, state dict) in the Trainer's ``fsdp_config`` names: it drops the
    ``fsdp_`` prefix itself and reads the FSDP1 sharding strategy as ``reshard_after_forward`` and the offload as
    ``cpu_offload`` (transformers 5.24 training_args.py _process_fsdp_args, which defaults to FSDP2 and
    use_orig_params true without them).
    """
    if cfg["zero_stage"] == 0 or cfg["sharding"] != "fsdp":
        return {}
    rename = {"sharding_strategy": "reshard_after_forward", "offload_params": "cpu_offload"}
    config = {rename.get(k.removeprefix("fsdp_"), k.removeprefix("fsdp_")): v for k, v in cfg["fsdp"].items()}
    config["reshard_after_forward"] = str(config["reshard_after_forward"]).lower()
    config["transformer_layer_cls_to_wrap"] = [cfg["layer_class"]]
    return {"fsdp": True, "fsdp_config": config}


def trainer_recomputes(cfg: dict[str, Any]) -> bool:
    """The Trainer's own activation checkpointing: off where FSDP recomputes (the Trainer raises for both at once)."""
    fsdp = fsdp_args(cfg).get("fsdp_config", {})
    return cfg["checkpointing"] != "none" and not fsdp.get("activation_checkpointing", False)


def checkpointing_args(on: bool, reentrant: bool = False) -> dict[str, Any]:
    """Activation checkpointing for TrainingArguments, by the name this transformers version has.

    ``activation_checkpointing`` in transformers 5, ``gradient_checkpointing`` before; ``reentrant``: the launch's
    use_reentrant (probe_config.json ``use_reentrant``).
    """
    import dataclasses

    import transformers

    names = {f.name for f in dataclasses.fields(transformers.TrainingArguments)}
    key = "activation_checkpointing" if "activation_checkpointing" in names else "gradient_checkpointing"
    return {key: on, f"{key}_kwargs": {"use_reentrant": reentrant} if on else None}


def _nvidia_smi_mib() -> float | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10, check=True).stdout  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    values = [float(v) for v in out.split() if v.strip().replace(".", "", 1).isdigit()]
    local = int(os.environ.get("LOCAL_RANK", "0"))
    return values[local] if local < len(values) else (max(values) if values else None)


def make_timer(cuda: bool) -> Any:
    """A TrainerCallback recording each optimizer step's wall time and the largest nvidia-smi reading."""
    import torch
    import transformers

    class StepTimer(transformers.TrainerCallback):
        def __init__(self) -> None:
            self.durations: list[float] = []
            self.smi_mib: list[float] = []
            self._start = 0.0

        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if cuda:
                torch.cuda.synchronize()
            self._start = time.perf_counter()

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if cuda:
                torch.cuda.synchronize()
                smi = _nvidia_smi_mib()
                if smi is not None:
                    self.smi_mib.append(smi)
            self.durations.append(time.perf_counter() - self._start)

    return StepTimer()


def trainer_optim(cfg: dict[str, Any], device: str) -> tuple[str, list[str]]:
    """TrainingArguments ``optim`` for the plan's optimizer on ``device``, and a note where it cannot run there.

    AdamW is fused unless the scenario's ``optimizer_kernel`` is foreach; bitsandbytes' optimizers need CUDA, so a
    CPU run steps torch AdamW instead.
    """
    optim = OPTIMIZERS[cfg["optimizer"]]
    if cfg["optimizer"] == "adamw" and cfg.get("optimizer_kernel") == "foreach":
        optim = "adamw_torch"
    if device == "cpu" and ("bnb" in optim or "8bit" in optim):
        return "adamw_torch", [f"optimizer {cfg['optimizer']} needs bitsandbytes on CUDA; adamw_torch on the CPU"]
    return optim, []


def train(cfg: dict[str, Any], device: str, warmup: int, steps: int) -> tuple[Any, dict[str, Any]]:
    """Run warm-up + measured steps with HF Trainer; return the timer and the notes on what differs from the plan."""
    import torch
    import transformers

    notes = []
    world = int(os.environ.get("WORLD_SIZE", "1"))
    n = (warmup + steps) * cfg["micro_batch"] * world
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, cfg["model"]["vocab_size"], (n, cfg["seq_len"]), generator=gen)
    data = [{"input_ids": row, "labels": row.clone()} for row in ids]
    optim, said = trainer_optim(cfg, device)
    notes += said
    if cfg["method"] == "qlora" and device == "cpu":
        notes.append("bitsandbytes NF4 needs CUDA: the CPU run keeps the base in fp32 (LoRA over an unquantised base)")
    if cfg["checkpointing"] == "selective":
        notes.append("HF Trainer has no selective checkpointing; full checkpointing ran")
    with tempfile.TemporaryDirectory(prefix="probe-run-") as out_dir:
        args = transformers.TrainingArguments(
            output_dir=out_dir, per_device_train_batch_size=cfg["micro_batch"], gradient_accumulation_steps=1,
            max_steps=warmup + steps, learning_rate=1e-5, optim=optim, report_to=[], save_strategy="no",
            logging_strategy="no", disable_tqdm=True, seed=0, dataloader_num_workers=0, use_cpu=device == "cpu",
            bf16=cfg["precision"] == "bf16" and device != "cpu", fp16=cfg["precision"] == "fp16" and device != "cpu",
            **checkpointing_args(trainer_recomputes(cfg) if device != "cpu" else cfg["checkpointing"] != "none",
                                 bool(cfg.get("use_reentrant", False))),
            deepspeed=ds_config(cfg) if device != "cpu" else None, **(fsdp_args(cfg) if device != "cpu" else {}),
        )  # fmt: skip
        model = build_model(cfg, device)  # after the arguments: ZeRO-3 then builds it partitioned (zero.Init)
        timer = make_timer(device == "cuda")
        trainer = transformers.Trainer(model=model, args=args, train_dataset=data, callbacks=[timer])
        trainer.train()
    return timer, {"notes": notes}


def _versions() -> dict[str, Any]:
    import platform

    out: dict[str, Any] = {"python": platform.python_version()}
    for name in ("torch", "transformers", "peft", "accelerate", "deepspeed", "bitsandbytes"):
        try:
            out[name] = str(__import__(name).__version__)
        except Exception:  # noqa: BLE001 - absent or broken optional library: record nothing
            continue
    return out


def measurement(cfg: dict[str, Any], run: dict[str, Any], timer: Any, device: str, warmup: int,
                steps: int) -> dict[str, Any]:  # fmt: skip
    """The measurement document (reference-case schema) of a finished run."""
    import torch

    measured_steps = timer.durations[warmup:] or timer.durations
    step = statistics.median(measured_steps)
    measured: dict[str, Any] = {"step_seconds": round(step, 6),
                                "tokens_per_second_per_gpu": round(cfg["micro_batch"] * cfg["seq_len"] / step, 3)}
    env = {"device": device, **_versions()}
    if device == "cuda":
        alloc = torch.cuda.max_memory_allocated() / GIB
        reserved = torch.cuda.max_memory_reserved() / GIB
        smi = max(timer.smi_mib) / 1024.0 if timer.smi_mib else None
        measured.update(peak=round(alloc, 4), unit="GiB", metric="allocated", per_gpu=True)
        measured["peaks"] = {"reserved": round(reserved, 4), **({"nvidia-smi": round(smi, 4)} if smi else {})}
        env.update(gpu_name=torch.cuda.get_device_name(0), gpu_count=torch.cuda.device_count())
    notes = [f"ftopt probe: {len(measured_steps)} measured steps after {warmup} warm-up steps, median step time."]
    notes += run["notes"]
    if device == "cpu":
        notes.append("--tiny CPU smoke run with a small model of the same family: not a measurement of the GPU.")
    scenario = tiny_scenario(cfg, warmup + steps) if device == "cpu" else cfg["scenario"]
    return {"cases": [{"id": cfg["id"] + ("-tiny" if device == "cpu" else ""), "source": "ftopt probe (probe.py)",
                       "kind": "measured", "scenario": scenario, "measured": measured, "notes": " ".join(notes),
                       "environment": env}]}  # fmt: skip


def write(doc: dict[str, Any], path: Path) -> None:
    """Write YAML (JSON text, which YAML reads, when PyYAML is missing), atomically."""
    try:
        import yaml

        text = yaml.safe_dump(doc, sort_keys=False)
    except ImportError:
        text = json.dumps(doc, indent=2)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _peak_rss() -> int:
    """Peak resident memory of this process so far, bytes (Linux reports KiB)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def build_report(cfg: dict[str, Any], device: str) -> dict[str, Any]:
    """Build the planned model as the run would (QLoRA quantised in place, also on the CPU); report host memory.

    The peak before building (libraries loaded) and after, and the bytes of the model's parameters and buffers.
    """
    import importlib

    quantised = ("bitsandbytes",) if cfg["method"] == "qlora" else ()
    libraries = ("torch", "transformers", "accelerate", "peft", *quantised)
    for name in libraries:
        importlib.import_module(name)  # loaded before the baseline: the figure is the model's, not the libraries'
    before = _peak_rss()
    model = build_model(cfg, device, quantise=cfg["method"] == "qlora")
    tensors = list(model.parameters()) + list(model.buffers())
    held = sum(t.numel() * t.element_size() for t in {id(t): t for t in tensors}.values())
    return {"peak_rss_before": before, "peak_rss_after": _peak_rss(), "model_bytes": held,
            "device": str(target_device(device))}  # fmt: skip


def requirements(cfg: dict[str, Any], cpu: bool, build_only: bool = False) -> tuple[list[str], list[str]]:
    """(the packages to install for this run, those of them that are missing), as pip names.

    The run needs the packages ``ftopt probe`` listed in probe_config.json (``packages``: torch, transformers, peft,
    accelerate, pyyaml, and deepspeed, bitsandbytes or flash-attn as the plan asks); a CPU run (``--tiny``,
    ``--build-only cpu``) only the first five, and bitsandbytes where a CPU ``build_only`` quantises a QLoRA model.
    PyYAML is optional (JSON text is written without it). Checked before anything is imported, so a missing package
    is one line, not a traceback.
    """
    wanted = list(cfg.get("packages") or BASE_PACKAGES)
    if cpu:
        wanted = [p for p in wanted if p in BASE_PACKAGES or (p == "bitsandbytes" and build_only)]
    missing = [p for p in wanted if p not in OPTIONAL and importlib.util.find_spec(MODULES.get(p, p)) is None]
    return wanted, missing


def main(argv: list[str] | None = None) -> int:
    """Parse the options, run the probe, write the measurement; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tiny", action="store_true", help="small model of the same family on the CPU")
    parser.add_argument("--steps", type=int, default=None, help="measured steps (default: the probe's plan)")
    parser.add_argument("--warmup", type=int, default=None, help="warm-up steps, not measured")
    parser.add_argument("--out", type=Path, default=None, help="measurement file (default: measurement.yaml here)")
    parser.add_argument("--config", type=Path, default=HERE / "probe_config.json")
    parser.add_argument("--build-only", choices=["cuda", "cpu"], default=None,
                        help="only build the planned model (on this rank's GPU, or the CPU) and print the peak host "
                        "memory it took, as JSON")  # fmt: skip
    args = parser.parse_args(argv)
    cfg = json.loads(args.config.read_text(encoding="utf-8"))
    cpu = args.build_only == "cpu" if args.build_only else args.tiny  # --build-only returns before --tiny is read
    wanted, missing = requirements(cfg, cpu, args.build_only is not None)
    if missing:
        print(f"probe.py: error: {', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not installed; install "
              f"the probe's requirements: pip install {' '.join(wanted)}", file=sys.stderr)  # fmt: skip
        return 2
    if args.build_only:
        print(json.dumps(build_report(cfg, args.build_only)))
        return 0
    steps = args.steps if args.steps is not None else cfg["steps"]
    warmup = args.warmup if args.warmup is not None else cfg["warmup"]
    if steps < 1 or warmup < 0:
        print("probe.py: error: --steps must be at least 1 and --warmup at least 0", file=sys.stderr)
        return 2
    import torch

    if not args.tiny and not torch.cuda.is_available():
        print("probe.py: error: no CUDA GPU found; run on the rented card, or use --tiny for a CPU smoke run",
              file=sys.stderr)  # fmt: skip
        return 2
    device = "cpu" if args.tiny else "cuda"
    cfg = tiny_config(cfg) if args.tiny else cfg
    timer, run = train(cfg, device, warmup, steps)
    if int(os.environ.get("RANK", "0")) == 0:
        out = args.out or HERE / "measurement.yaml"
        write(measurement(cfg, run, timer, device, warmup, steps), out)
        print(f"probe.py: wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
