"""Column arrays that the pure models evaluate: the job (fixed per scenario), the configurations and the hardware.

The memory, time and cost models take these and return arrays of shape ``(n,)``, one value per candidate
configuration; a single estimate is the case ``n == 1``. Closed choices are stored as integer codes, the index
of the value in its enum (``OFFLOAD.index(Offload.optimizer) == 1``).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from optimizer.inputs.schema import (
    Attention,
    Checkpointing,
    Framework,
    LoraSpec,
    Loss,
    Method,
    ModelArch,
    Offload,
    OptimizerName,
    Precision,
    Sharding,
)

OFFLOAD: list[Offload] = list(Offload)  # none 0, optimizer 1, all 2
CHECKPOINTING: list[Checkpointing] = list(Checkpointing)  # none 0, selective 1, full 2
PRECISION: list[Precision] = list(Precision)  # bf16 0, fp16 1, fp8 2, fp32 3
OPTIMIZER: list[OptimizerName] = list(OptimizerName)


@dataclass(frozen=True)
class Job:
    """What is trained, independent of the hardware: one per scenario."""

    arch: ModelArch
    method: Method
    lora: LoraSpec | None
    framework: Framework
    sharding: Sharding
    attention: Attention
    loss: Loss
    base_bits: int  # frozen base weights: 16, 8 or 4 (full fine-tuning: 16)
    seq_len: int  # tokens per sequence s
    global_batch: int  # sequences per optimizer step
    total_tokens: float  # tokens over all epochs
    # rows of one unpacked sample each (data.packing false): their mean length, min(avg_tokens, seq_len); None when
    # rows are packed full. A micro-batch of one such row is padded to nothing (row_tokens below).
    sample_row_tokens: float | None = None
    checkpoint_every_hours: float | None = None
    compile: bool = False  # torch.compile (fused kernels save fewer activations)
    activation_offload: bool = False  # saved activations in host RAM
    optimizer_in_backward: bool = False  # gradients freed per parameter during backward
    reduce_every_micro_batch: bool | None = None  # FSDP accumulation: reduce each micro-batch (None: engine default)
    reduce_dtype: str | None = None  # FSDP2 reduce_dtype: "fp32" accumulates held unsharded gradients at 4 B
    loss_parallel: bool | None = None  # TP: loss on vocabulary-sharded logits (None: engine default)
    quant_kernel: str | None = None  # k-bit base's Linear library (None: engine default)
    optimizer_kernel: str = "fused"  # AdamW's GPU step: fused | foreach (training.optimizer_kernel)
    pipeline_chunks: int = 1  # most interleaved chunks per pipeline stage the engine launches (models/pipeline.py)
    # what the engine's selective checkpointing recomputes: every_other_matmul | attention_core (calibration timing
    # selective_recompute); the time model prices it, the memory model keeps the rest
    selective_recompute: str = "every_other_matmul"

    @property
    def steps(self) -> int:
        """Optimizer steps: ceil(total tokens / (seq_len x global_batch))."""
        return max(1, int(np.ceil(self.total_tokens / (self.seq_len * self.global_batch))))


@dataclass(frozen=True)
class Configs:
    """Parallel layout and training knobs, each an int64 array of shape (n,)."""

    tp: np.ndarray
    pp: np.ndarray
    dp: np.ndarray
    zero_stage: np.ndarray
    offload: np.ndarray  # code into OFFLOAD
    micro_batch: np.ndarray
    grad_accum: np.ndarray
    checkpointing: np.ndarray  # code into CHECKPOINTING
    precision: np.ndarray  # code into PRECISION
    optimizer: np.ndarray  # code into OPTIMIZER
    # ranks one ZeRO shard spans: dp (full sharding), or the ranks of one node under hybrid sharding (HSDP: sharded
    # inside each node, replicated across nodes); None means dp on every row
    shard: np.ndarray | None = None

    @property
    def cards(self) -> np.ndarray:
        """GPUs in the job: tp x pp x dp."""
        return self.tp * self.pp * self.dp

    @property
    def shard_ranks(self) -> np.ndarray:
        """Data-parallel ranks a ZeRO partition is split over, (n,): dp, or the shard group under hybrid sharding."""
        return self.dp if self.shard is None else self.shard

    @property
    def hybrid(self) -> np.ndarray:
        """Rows sharded inside a group smaller than dp and replicated across groups (HSDP), bool (n,)."""
        return self.shard_ranks < self.dp

    def __len__(self) -> int:
        return int(self.tp.shape[0])

    def take(self, index: np.ndarray) -> Configs:
        """The rows selected by a boolean mask or an index array."""
        return Configs(**{f.name: None if getattr(self, f.name) is None else getattr(self, f.name)[index]
                          for f in fields(self)})  # fmt: skip


@dataclass(frozen=True)
class Hardware:
    """The GPU and network behind each configuration, each a float64 array of shape (n,)."""

    capacity_bytes: np.ndarray  # card memory
    peak_flops: np.ndarray  # dense FLOP/s of the configuration's precision
    bf16_flops: np.ndarray  # dense bf16 (or fp16) FLOP/s, the reference for MFU
    hbm_bytes_per_s: np.ndarray
    intra_bytes_per_s: np.ndarray  # data-parallel GPU-GPU inside a node, per direction (NVLink, PCIe or host)
    tp_bytes_per_s: np.ndarray  # tensor-parallel link inside the NVLink domain, per direction
    inter_bytes_per_s: np.ndarray  # per GPU between nodes, per direction (inf when single node)
    pcie_bytes_per_s: np.ndarray  # host link per direction
    nodes: np.ndarray  # int
    cards_per_node: np.ndarray  # int
    efficiency: np.ndarray  # calibrated fraction of peak reached by large GEMM-bound training steps
    arch_code: np.ndarray  # int, index into the catalog's list of architectures (for per-family constants)
    attention_efficiency: np.ndarray  # share of the bf16 peak of FlashAttention-2-class kernels; NaN: no figure
    fused_attention_efficiency: np.ndarray  # the same for cuDNN / FlashAttention-3-class fused attention; NaN: none

    def take(self, index: np.ndarray) -> Hardware:
        """The rows selected by a boolean mask or an index array."""
        return Hardware(**{f.name: getattr(self, f.name)[index] for f in fields(self)})


def column(values: object, dtype: type = np.int64) -> np.ndarray:
    """A 1-D array from a scalar or a sequence."""
    return np.atleast_1d(np.asarray(values, dtype=dtype))


def row_tokens(job: Job, cfg: Configs) -> np.ndarray:
    """Tokens one row of a micro-batch costs, (n,): seq_len, except a micro-batch of a single unpacked sample.

    Unpacked rows (``job.sample_row_tokens``) are padded only to the longest sample of their micro-batch by the
    collators the launch files use (TRL's and transformers' language-modelling collators, torchtune's padded
    collate, NeMo's SFT dataset without pad_to_max_length): a micro-batch of one sample is padded to nothing and
    costs its mean length; of more, at most seq_len, which is counted (an upper bound: the longest of b samples is
    not known from their mean). Memory keeps seq_len: some micro-batch holds the longest sample.
    """
    full = np.full(cfg.micro_batch.shape, float(job.seq_len))
    if job.sample_row_tokens is None:
        return full
    return np.where(cfg.micro_batch == 1, float(job.sample_row_tokens), full)
