"""Pydantic models for the three descriptions ftopt reads and the one it writes.

* scenario: what to train and the user's limits (:class:`Scenario`), read from ``scenarios/*.yaml``;
* catalog: what can be rented (:class:`ModelArch` here; GPUs, offers and rates in ``schema_catalog.py``), read
  from ``catalogs/``;
* plan and estimate: how to run it and what that costs (``schema_plan.py``), written by the CLI.

Field names are the public contract (docs/scenario-reference.md, generated from this file; docs/json-contract.md).
Every model forbids unknown keys, so a typo in a scenario is an error rather than a silently ignored setting.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationInfo,
    field_validator,
    model_validator,
)

# ---------------------------------------------------------------------------------------------------------------
# Closed choices


class Method(StrEnum):
    """How the model is adapted: every weight trained, or low-rank adapters over a 16- or 4-bit base."""

    full = "full"
    lora = "lora"
    qlora = "qlora"


class Framework(StrEnum):
    """Training stack whose defaults (dtypes, loss kernel, buffers) the memory and time models follow."""

    hf = "hf"
    torchtune = "torchtune"
    nemo = "nemo"


class Sharding(StrEnum):
    """Implementation of ZeRO-style sharding under the hf framework."""

    deepspeed = "deepspeed"
    fsdp = "fsdp"


class OptimizerName(StrEnum):
    """Optimizer; decides the bytes of state per trainable parameter."""

    adamw = "adamw"
    adamw_8bit = "adamw_8bit"
    paged_adamw_8bit = "paged_adamw_8bit"
    sgd = "sgd"
    adafactor = "adafactor"


class Attention(StrEnum):
    """Attention kernel: flash and sdpa never materialise the s x s scores, eager does."""

    flash = "flash"
    sdpa = "sdpa"
    eager = "eager"


class Loss(StrEnum):
    """Cross-entropy implementation; ``auto`` takes the framework default."""

    auto = "auto"
    standard = "standard"
    standard_16bit = "standard_16bit"  # cross-entropy on 16-bit logits, no fp32 upcast (e.g. Qwen-1 remote code)
    standard_held = "standard_held"  # fp32-upcast cross-entropy whose loop keeps the logits through backward
    standard_16bit_held = "standard_16bit_held"  # cross-entropy on 16-bit logits the loop keeps through backward
    chunked = "chunked"
    fused = "fused"


class OptimizerKernel(StrEnum):
    """How torch AdamW's step runs on the GPU (decides the memory traffic of the step)."""

    fused = "fused"  # one kernel per parameter group (torch fused=True, DeepSpeed FusedAdam, Megatron/TE)
    foreach = "foreach"  # torch's default multi-tensor path: one _foreach_* op per arithmetic step


class QuantKernel(StrEnum):
    """Library whose 4/8-bit Linear runs the frozen k-bit base (decides what its autograd function saves)."""

    bitsandbytes = "bitsandbytes"  # transformers/PEFT QLoRA, bitsandbytes >= 0.43.2: MatMul4Bit saves the packed weight
    bitsandbytes_legacy = "bitsandbytes_legacy"  # bitsandbytes < 0.43.2: MatMul4Bit also saved its 16-bit input
    torchao = "torchao"  # torchtune QLoRA: torchao linear_nf4 saves only the NF4 weight


class Offload(StrEnum):
    """What ZeRO/FSDP moves to host memory."""

    none = "none"
    optimizer = "optimizer"
    all = "all"


class Checkpointing(StrEnum):
    """Activation checkpointing (recomputation) level."""

    none = "none"
    selective = "selective"
    full = "full"


class Precision(StrEnum):
    """Compute precision of the matrix multiplies."""

    bf16 = "bf16"
    fp16 = "fp16"
    fp8 = "fp8"
    fp32 = "fp32"


class Term(StrEnum):
    """Rental term; each has a fixed length in hours (TERM_HOURS)."""

    hour = "hour"
    day = "day"
    week = "week"
    month = "month"


TERM_HOURS: dict[Term, int] = {Term.hour: 1, Term.day: 24, Term.week: 168, Term.month: 720}  # month = 30 days


class Risk(StrEnum):
    """The percentile of a model's held-out error (measured / predicted) a plan must hold at."""

    p50 = "p50"
    p90 = "p90"
    p99 = "p99"


class Objective(StrEnum):
    """What the solver minimises first; the other quantity breaks ties."""

    cost = "cost"
    time = "time"


class Status(StrEnum):
    """Solver outcome, mapped from CP-SAT's status."""

    optimal = "optimal"
    feasible = "feasible"
    infeasible = "infeasible"


LoraTarget = Literal[
    "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "lm_head", "all-linear"
]
Currency = Annotated[str, Field(pattern=r"^[A-Z]{3}$", description="ISO 4217 code, e.g. USD or CNY")]


def _not_bool(value: Any) -> Any:
    """Reject YAML booleans where a number is expected (pydantic would read ``true`` as 1)."""
    if isinstance(value, bool):
        raise ValueError("must be a number, not a boolean")
    return value


Int = Annotated[int, BeforeValidator(_not_bool)]
Float = Annotated[float, BeforeValidator(_not_bool)]
PositiveFloat = Annotated[float, BeforeValidator(_not_bool), Field(gt=0, allow_inf_nan=False)]


MAX_TEXT = 4096  # characters in any string of a scenario, catalog or measurement; the longest shipped note has 1,321
MAX_NAME = 256  # characters in a scenario or model name (names reach terminals, tables and file names)
# C0 (newline and tab too), DEL and C1 control characters; zero-width and bidirectional formatting characters (a
# right-to-left override reorders what follows); the Unicode line and paragraph separators
_NAME_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")


def printable_name(name: str) -> str:
    """A scenario or model name without control characters (an ESC would reach the HTML report raw), else ValueError.

    Names are one line of printable text: newline, tab, ESC and every other C0/C1 control character are refused, and
    so are the Unicode line separators and the invisible formatting characters (zero-width, bidirectional).
    """
    bad = _NAME_CONTROL.search(name)
    if bad is not None:
        raise ValueError(f"control character U+{ord(bad.group()):04X} at character {bad.start() + 1} is not "
                         f"allowed; allowed: one line of printable text, up to {MAX_NAME} characters")  # fmt: skip
    return name


Name = Annotated[str, AfterValidator(printable_name)]  # a scenario or model name: printable_name's rule


class Strict(BaseModel):
    """Base: unknown keys are errors, NaN and infinities are rejected, enums are stored as values, strings capped."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, use_enum_values=False, frozen=True,
                              str_max_length=MAX_TEXT)  # fmt: skip


# ---------------------------------------------------------------------------------------------------------------
# Model architecture


def _whole(value: Any) -> int | None:
    """An int, or a string of digits read as one (the field's own validation accepts both); else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


class ModelArch(Strict):
    """A decoder-only transformer in HF config.json terms (Llama/Qwen/Mistral/Mixtral family).

    ``intermediate`` is the width of one SwiGLU branch (per expert for MoE).
    """

    name: Name = Field("custom", max_length=MAX_NAME, description="display name; one line of printable text "
                       "(control characters refused)")
    layers: Int = Field(gt=0, le=1000, description="decoder blocks L")
    hidden: Int = Field(gt=0, le=200_000, description="model width h")
    intermediate: Int = Field(gt=0, le=1_000_000, description="SwiGLU branch width I")
    heads: Int = Field(gt=0, le=4096, description="attention heads a")
    kv_heads: Int = Field(gt=0, le=4096, description="key/value heads k (GQA)")
    vocab: Int = Field(gt=0, le=10_000_000, description="vocabulary size V (padded, as in config.json)")
    tied_embeddings: bool = Field(False, description="input embedding shared with the output layer")
    params: Int | None = Field(None, gt=0, le=100_000_000_000_000, description="total parameters; computed if absent")
    experts: Int = Field(1, ge=1, le=1024, description="MoE experts per layer (1 = dense)")
    experts_per_token: Int = Field(1, ge=1, le=1024, description="experts routed per token")
    expert_intermediate: Int | None = Field(
        None, gt=0, le=1_000_000, description="SwiGLU branch width of one routed expert (config.json "
        "moe_intermediate_size); default intermediate (Mixtral)"
    )
    shared_experts: Int = Field(0, ge=0, le=1024, description="always-active shared experts per MoE block")
    shared_intermediate: Int | None = Field(
        None, gt=0, le=1_000_000, description="SwiGLU branch width of one shared expert; default expert_intermediate"
    )
    dense_layers: Int = Field(
        0, ge=0, le=1000, description="MoE models: decoder blocks with one dense MLP of width intermediate instead "
        "of experts (DeepSeek first_k_dense_replace, Qwen mlp_only_layers)"
    )
    qkv_bias: bool = Field(False, description="bias on q, k, v projections (Qwen2)")
    head_dim: Int | None = Field(
        None,
        gt=0,
        le=100_000,
        description="width d of one attention head; default hidden / heads (config.json "
        "head_dim; Gemma-2 uses 256 with hidden 3584 and 16 heads)",
    )
    model_type: str | None = Field(None, description="HF config.json model_type, when the model was imported")
    torch_dtype: Literal["bfloat16", "float16", "float32"] | None = Field(
        None, description="dtype of the published weights (config.json torch_dtype): a bfloat16 model is not trained "
        "in fp16 unless allow.fp16_for_bf16 (docs/precision.md)"
    )
    torch_dtype_source: str | None = Field(None, description="where torch_dtype comes from")
    source: str | None = Field(None, description="where the architecture comes from")
    notes: str | None = None
    import_notes: tuple[str, ...] = Field((), description="what ftopt assumed or noticed when reading the model")

    @model_validator(mode="before")
    @classmethod
    def _default_head_dim(cls, data: Any) -> Any:
        """head_dim defaults to hidden / heads when that divides evenly (the Llama/Qwen/Mistral convention)."""
        if isinstance(data, dict) and data.get("head_dim") is None:
            hidden, heads = _whole(data.get("hidden")), _whole(data.get("heads"))  # "4096" validates as 4096 too
            if hidden is not None and heads is not None and heads > 0 and hidden % heads == 0:
                data = {**data, "head_dim": hidden // heads}
        return data

    @model_validator(mode="after")
    def _shapes_consistent(self) -> ModelArch:
        if self.head_dim is None:
            raise ValueError(f"hidden ({self.hidden}) must be divisible by heads ({self.heads}), or give head_dim")
        if self.heads % self.kv_heads:
            raise ValueError(f"heads ({self.heads}) must be divisible by kv_heads ({self.kv_heads})")
        if self.experts_per_token > self.experts:
            raise ValueError(f"experts_per_token ({self.experts_per_token}) must not exceed experts ({self.experts})")
        if self.dense_layers > self.layers:
            raise ValueError(f"dense_layers ({self.dense_layers}) must not exceed layers ({self.layers})")
        return self

    @property
    def moe_layers(self) -> int:
        """Decoder blocks whose MLP is the experts (0 for a dense model)."""
        return self.layers - self.dense_layers if self.experts > 1 else 0

    @property
    def expert_width(self) -> int:
        """SwiGLU branch width of one routed expert: ``expert_intermediate``, else ``intermediate``."""
        return self.expert_intermediate or self.intermediate

    @property
    def mlp_widths(self) -> tuple[tuple[int, int], ...]:
        """(SwiGLU MLPs over all blocks, branch width) for each kind of MLP: dense, routed experts, shared experts.

        Each MLP holds 3 h w weights (gate, up, down). A dense model has L MLPs of width I; an MoE model has
        experts per MoE block at ``expert_width``, its shared experts at ``shared_intermediate`` and one MLP of
        width I per dense block (HF MixtralSparseMoeBlock, Qwen2MoeSparseMoeBlock, Qwen3MoeSparseMoeBlock).
        """
        moe = self.moe_layers
        kinds = [(self.layers - moe, self.intermediate), (moe * self.experts, self.expert_width),
                 (moe * self.shared_experts, self.shared_intermediate or self.expert_width)]  # fmt: skip
        return tuple((n, w) for n, w in kinds if n > 0)

    @property
    def mlp_width_sum(self) -> int:
        """Sum of the branch widths of every MLP over all blocks (the MLP weights are 3 h times this)."""
        return sum(n * w for n, w in self.mlp_widths)

    @property
    def active_width(self) -> float:
        """Branch width a token passes through per block, averaged over blocks.

        I in a dense block; in an MoE block the routed ``experts_per_token`` x expert width plus the shared experts.
        """
        moe = self.moe_layers
        shared = self.shared_experts * (self.shared_intermediate or self.expert_width)
        routed = moe * (self.experts_per_token * self.expert_width + shared)
        return ((self.layers - moe) * self.intermediate + routed) / self.layers

    @property
    def widest_mlp(self) -> int:
        """The widest MLP branch (its projections are the largest block Linear, h x w)."""
        return max(w for _, w in self.mlp_widths)

    @property
    def kv_width(self) -> int:
        """Width of the key (or value) projection, h_kv = k x d."""
        return self.kv_heads * self.head_dim  # type: ignore[operator]  # set by _default_head_dim or given

    @property
    def q_width(self) -> int:
        """Width of the query projection and of o_proj's input, h_q = a x d (= h unless head_dim says otherwise)."""
        return self.heads * self.head_dim  # type: ignore[operator]

    @property
    def attention_params(self) -> int:
        """Attention and norms of one block.

        2 h h_q (q, o; h_q = a d, which is h unless head_dim is given) + 2 h h_kv (k, v) + qkv bias (h_q + 2 h_kv)
        + 2h (two RMSNorm weights).
        """
        h, kv, hq = self.hidden, self.kv_width, self.q_width
        return 2 * h * hq + 2 * h * kv + (hq + 2 * kv if self.qkv_bias else 0) + 2 * h

    @property
    def blocks_params(self) -> int:
        """Parameters of all decoder blocks.

        L x attention + 3 h x :attr:`mlp_width_sum` + routers h x experts per MoE block. Source: HF
        LlamaDecoderLayer / Qwen2DecoderLayer / Mixtral and Qwen-MoE sparse blocks; the totals match the published
        counts in catalogs/models.yaml (Qwen2-MoE's shared-expert gate, h per block, and Qwen3's q/k norms, 2d per
        block, are left out: under 0.001% of the total).
        """
        router = self.moe_layers * self.hidden * self.experts
        return self.layers * self.attention_params + 3 * self.hidden * self.mlp_width_sum + router

    @property
    def layer_params(self) -> int:
        """Parameters of the largest decoder block: an MoE block with every expert, or a dense one."""
        h = self.hidden
        dense = self.attention_params + 3 * h * self.intermediate
        if self.moe_layers == 0:
            return dense
        shared = self.shared_experts * (self.shared_intermediate or self.expert_width)
        moe = self.attention_params + 3 * h * (self.experts * self.expert_width + shared) + h * self.experts
        return max(moe, dense if self.dense_layers else 0)

    @property
    def embedding_params(self) -> int:
        """Input embedding plus output layer: V h (tied) or 2 V h."""
        return self.vocab * self.hidden * (1 if self.tied_embeddings else 2)

    @property
    def total_params(self) -> int:
        """``params`` when given, else L x layer_params + embeddings + final norm h."""
        if self.params is not None:
            return self.params
        return self.computed_params

    @property
    def computed_params(self) -> int:
        """Parameters the shapes imply: all blocks + embeddings + final norm h."""
        return self.blocks_params + self.embedding_params + self.hidden

    @property
    def active_params(self) -> int:
        """Parameters used per token: MoE counts experts_per_token of the experts' MLP weights."""
        if self.experts == 1:
            return self.total_params
        idle = (self.experts - self.experts_per_token) * 3 * self.hidden * self.expert_width * self.moe_layers
        return self.total_params - idle


class HfConfigRef(Strict):
    """A model given by a local HF ``config.json``.

    Dense Llama/Mistral/Qwen/Gemma-style configs and the MoE families: Mixtral (num_local_experts), Qwen2-MoE and
    Qwen3-MoE (num_experts, moe_intermediate_size, shared_expert_intermediate_size, mlp_only_layers,
    decoder_sparse_step), DeepSeek-MoE (n_routed_experts, n_shared_experts, first_k_dense_replace); DeepSeek-V2/V3
    multi-head latent attention (kv_lora_rank) is refused. Errors name the config.json key.
    """

    hf_config: str = Field(
        description="path to config.json; a relative path is read from the scenario's folder, then the working "
        "directory"
    )

    @model_validator(mode="before")
    @classmethod
    def _alone(cls, value: Any) -> Any:
        """hf_config with architecture keys beside it: the config.json is the architecture, so they would be lost."""
        if isinstance(value, dict) and len(value) > 1:
            others = ", ".join(sorted(str(k) for k in value if k != "hf_config"))
            raise ValueError(f"hf_config takes no other keys (config.json gives the architecture): remove {others}, "
                             "or drop hf_config and write the architecture inline")  # fmt: skip
        return value


def _model_kind(value: Any) -> str | None:
    """Which form a scenario's ``model`` takes: a catalog name, an inline architecture or an HF config file."""
    if isinstance(value, str):
        return "~name"
    if isinstance(value, HfConfigRef) or (isinstance(value, dict) and "hf_config" in value):
        return "~hf"
    if isinstance(value, ModelArch | dict):
        return "~arch"
    return None


ModelField = Annotated[
    Annotated[str, Tag("~name")] | Annotated[ModelArch, Tag("~arch")] | Annotated[HfConfigRef, Tag("~hf")],
    Discriminator(
        _model_kind,
        custom_error_type="model_form",
        custom_error_message="expected a catalog model name, an inline architecture mapping or {hf_config: path}",
    ),
]

# ---------------------------------------------------------------------------------------------------------------
# Scenario


class LoraSpec(Strict):
    """LoRA adapters: rank r on the listed HF module names (``all-linear`` = every linear layer of the blocks)."""

    rank: Int = Field(16, gt=0, le=65536, description="adapter rank r (trainable parameters grow linearly with it)")
    alpha: Float = Field(
        32,
        gt=0,
        allow_inf_nan=False,
        description="LoRA scaling numerator (alpha / r); no effect on memory or time, passed to the launch settings",
    )
    targets: list[LoraTarget] = Field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        min_length=1,
        description="HF module names that get adapters; default every linear layer of the decoder blocks "
        "(all-linear is the same set); lm_head adds the output layer; an MoE model's routed experts are adapted on "
        "their fused parameters (catalogs/lora_targets.yaml)",
    )
    dropout: Float = Field(
        0.0,
        ge=0,
        lt=1,
        description="adapter dropout; above 0 each adapted module also keeps "
        "its dropped-out input and mask for backward (more activation memory)",
    )


class DataSpec(Strict):
    """Training data: ``tokens`` directly, or ``samples`` x ``avg_tokens``; repeated ``epochs`` times.

    ``packing`` says how samples become rows of ``seq_len`` tokens. Packed (the default): samples are concatenated
    and cut into full rows, so the GPUs process the data's tokens and nothing else; a sample longer than seq_len
    continues in the next row. Padded (``packing: false``): each sample gets its own row, cut at seq_len and padded
    to the longest sample of its micro-batch (the launch files' collators): a micro-batch of one sample costs its
    own tokens (``sample_row_tokens``), one of more is counted padded to seq_len (an upper bound: only the mean
    length is known); models/configs.py row_tokens. Memory keeps seq_len rows either way.
    """

    tokens: PositiveFloat | None = Field(None, le=1e16, description="training tokens per epoch")
    samples: Int | None = Field(None, gt=0, le=10**13, description="training samples (sequences) per epoch")
    avg_tokens: PositiveFloat | None = Field(None, le=10_000_000, description="mean tokens per sample")
    epochs: Float = Field(1, gt=0, le=10_000, allow_inf_nan=False, description="passes over the data")
    packing: bool = Field(
        True,
        description="true: samples packed into full seq_len rows (time counts the data's tokens); false: one "
        "sample per row, cut to seq_len and padded to the micro-batch's longest (time counts a lone sample's own "
        "tokens, more samples at seq_len each); false needs samples and avg_tokens",
    )

    @model_validator(mode="after")
    def _one_size(self) -> DataSpec:
        if self.tokens is None and (self.samples is None or self.avg_tokens is None):
            raise ValueError("give either tokens, or samples and avg_tokens")
        if self.tokens is not None and self.samples is not None:
            raise ValueError("give either tokens, or samples and avg_tokens, not both")
        if not self.packing and self.samples is None:
            raise ValueError("packing: false needs samples and avg_tokens (padding is per sample)")
        return self

    def tokens_processed(self, seq_len: int) -> float:
        """Rows x seq_len over all epochs: the data's tokens when packed, samples x seq_len when padded.

        The step count's basis; what a padded row costs depends on its micro-batch (models/configs.py row_tokens).
        """
        if self.packing or self.samples is None:
            return self.total_tokens
        return float(self.samples) * seq_len * self.epochs

    def sample_row_tokens(self, seq_len: int) -> float | None:
        """Mean tokens of a row that holds one unpacked sample, min(avg_tokens, seq_len); None when rows are packed."""
        if self.packing or self.avg_tokens is None:
            return None
        return min(float(self.avg_tokens), float(seq_len))

    @property
    def total_tokens(self) -> float:
        """Tokens over all epochs."""
        per_epoch = self.tokens if self.tokens is not None else self.samples * self.avg_tokens
        return per_epoch * self.epochs


class Training(Strict):
    """Software stack: framework defaults, sharding, optimizer, attention kernel, loss, memory techniques."""

    framework: Framework = Field(
        Framework.hf,
        description="training stack whose defaults the memory and time models follow (hf = transformers Trainer / "
        "TRL); nemo runs full and lora, torchtune qlora only models with a qlora_* builder (Llama 2, 3.1, 3.2, "
        "Mistral)",
    )
    sharding: Sharding = Field(
        Sharding.deepspeed,
        description="hf only: how ZeRO-style sharding is implemented; elsewhere leave it out (torchtune may state "
        "fsdp, which it runs, and refuses deepspeed; nemo refuses either: it shards by the plan's ZeRO stage)",
    )
    optimizer: OptimizerName = Field(
        OptimizerName.adamw,
        description="decides the optimizer-state bytes per "
        "trainable parameter (adamw 8+4 B fp32 moments and master copy)",
    )
    optimizer_kernel: OptimizerKernel = Field(
        OptimizerKernel.fused,
        description="how AdamW steps on the GPU: fused (one kernel; what ftopt's launch files ask for) or foreach "
        "(torch.optim.AdamW's default without fused=True, HF optim adamw_torch: 20/7 the step's memory traffic and "
        "a copy of the second moments at the step)",
    )
    attention: Attention = Field(
        Attention.flash,
        description="attention kernel; flash runs only on compute "
        "capability 8.0+ and MI300 (elsewhere the plan runs sdpa); eager stores the s x s "
        "scores",
    )
    loss: Loss = Field(
        Loss.auto,
        description="cross-entropy implementation; auto takes the framework default (sizes the logits buffer); "
        "fused under hf is Liger's fused linear cross-entropy: model types Liger patches, no lm_head adapter",
    )
    base_bits: Literal[16, 8, 4] | None = Field(
        None, description="frozen base bits; default 16 (lora), 4 (qlora); qlora takes 4 or 8, full only 16"
    )
    quant_kernel: QuantKernel | None = Field(
        None,
        description="library of the k-bit base's Linear: bitsandbytes_legacy (before 0.43.2) saves each quantised "
        "Linear's input for backward, bitsandbytes (0.43.2 on) and torchao's linear_nf4 do not; null = the engine's "
        "default (calibration memory.quant_kernel)",
    )
    checkpoint_every_hours: Float | None = Field(
        None, gt=0, le=10_000, description="save a checkpoint this often (adds save time); default: the Young/Daly "
        "interval for the job's hardware failure rate (calibration hosts.on_demand_gpu_mtbi_hours), or spot's"
    )
    compile: bool = Field(
        False, description="torch.compile on the model: fused norms and SwiGLU save fewer activations (formulas.md 4.3)"
    )
    activation_offload: bool = Field(
        False,
        description="activation offloading (torchtune enable_activation_offloading, TRL activation_offloading): "
        "saved activations live in host RAM, one layer's on the GPU",
    )
    optimizer_in_backward: bool = Field(
        False,
        description="optimizer step fused into backward (torchtune optimizer_in_bwd): each gradient is freed once "
        "its parameter is updated; needs gradient accumulation 1",
    )
    reduce_every_micro_batch: bool | None = Field(
        None,
        description="FSDP with gradient accumulation: reduce-scatter the gradients after every micro-batch (true) or "
        "hold them unsharded until the last one (false: no_sync, as transformers' Trainer does); null = the "
        "engine's default (calibration memory.fsdp_unsharded_accumulation)",
    )
    reduce_dtype: Literal["bf16", "fp32"] | None = Field(
        None,
        description="FSDP2's MixedPrecisionPolicy reduce_dtype where it differs from the 16-bit parameters: with "
        "reduce_every_micro_batch false, FSDP2 accumulates the unsharded gradients in it (fp32: 4 B per parameter "
        "instead of 2; FSDPParam.to_accumulated_grad_if_needed). Memory only: the time model counts the "
        "reduce-scatter at 2 B per gradient. null = 16-bit",
    )
    loss_parallel: bool | None = Field(
        None,
        description="tensor parallelism: the loss runs on logits sharded over the vocabulary (true: torchtitan's "
        "loss_parallel, Megatron's vocab-parallel cross-entropy) or on logits all-gathered to the full vocabulary on "
        "every rank (false: a ColwiseParallel output with Replicate layout, torchtune's and KempnerForge's plans); "
        "null = the engine's default (calibration memory.vocab_parallel_loss)",
    )


class Budget(Strict):
    """Money the job may cost, in one currency."""

    amount: PositiveFloat = Field(le=1e12, description="most the whole job may cost (every card, every billed unit)")
    currency: Currency = Field(
        description="ISO 4217 code; offers in other currencies are converted with catalogs/fx.yaml"
    )


class Allow(Strict):
    """User allow-lists and limits on the plan."""

    gpus: list[str] | None = Field(None, min_length=1, description="GPU ids or aliases a plan may use; default any")
    providers: list[str] | None = Field(
        None, min_length=1, description="offer providers a plan may use (case-insensitive); default any"
    )
    max_cards: Int | None = Field(None, gt=0, le=100_000, description="most GPUs a plan may rent")
    max_nodes: Int | None = Field(None, gt=0, le=10_000, description="most machines a plan may span")
    max_host_memory_gib: float | None = Field(
        None, gt=0, le=1e6, allow_inf_nan=False,
        description="host RAM per node that offloading may use (GiB); also the RAM of offers that state none",
    )
    spot: bool = Field(False, description="allow interruptible (spot) capacity where the offer prices it")
    fp16_for_bf16: bool = Field(
        False, description="allow fp16 mixed precision for a model published in bfloat16 on cards without bf16 "
        "(V100, T4): overflow risk, so off unless allowed; the plan then carries a warning (docs/precision.md)"
    )


def _term_from_plan(value: Any) -> Any:
    """Read back the ``term`` that ``solve --json`` writes.

    ``second`` and ``minute`` are increments of the hourly term; a mix such as ``month+hour`` pins nothing (the
    cheapest cover of the same hours is that mix again).
    """
    if not isinstance(value, str):
        return value
    terms = {"hour" if t in ("second", "minute") else t for t in value.split("+")}
    return terms.pop() if len(terms) == 1 else None


class PlanPins(Strict):
    """Decision variables the user fixes; the keys of the JSON plan. ``solve`` optimises the rest."""

    gpu: str | None = Field(None, description="GPU id or alias")
    offer: str | None = Field(None, description="offer id (catalog list / catalog show)")
    cards: Int | None = Field(None, gt=0, le=100_000, description="GPUs rented (tp x pp x dp)")
    nodes: Int | None = Field(None, gt=0, le=10_000, description="machines")
    tp: Int | None = Field(
        None, gt=0, le=1024, description="tensor-parallel degree (divides heads and kv_heads, within one NVLink domain)"
    )
    pp: Int | None = Field(None, gt=0, le=1024, description="pipeline-parallel degree")
    dp: Int | None = Field(None, gt=0, le=100_000, description="data-parallel degree")
    zero_stage: Int | None = Field(None, ge=0, le=3,
                                   description="ZeRO stage 0-3 (FSDP: 0, 2 = SHARD_GRAD_OP, 3 = FULL_SHARD)")
    shard_group: Int | None = Field(
        None, gt=0, le=100_000,
        description="data-parallel ranks one ZeRO-3 shard spans: dp = full sharding; the ranks of one node = hybrid "
        "sharding (HSDP: sharded inside each node, replicated across nodes; engines in calibration "
        "frameworks.hybrid_shard); solver output: present only on hybrid plans",
    )
    offload: Offload | None = Field(
        None,
        description="what moves to host RAM: optimizer (ZeRO 1-3) or all (ZeRO-3), as the engine runs it "
        "(calibration frameworks.offload_modes); a pin it does not run is refused",
    )
    micro_batch: Int | None = Field(None, gt=0, le=100_000, description="sequences per GPU per forward pass")
    grad_accum: Int | None = Field(
        None,
        gt=0,
        le=1_000_000,
        description="micro-batches per optimizer step (micro_batch x grad_accum x dp = global_batch)",
    )
    precision: Precision | None = Field(None, description="compute precision")
    optimizer: OptimizerName | None = Field(None, description="as training.optimizer")
    checkpointing: Checkpointing | None = Field(None, description="activation checkpointing level")
    term: Annotated[Term | None, BeforeValidator(_term_from_plan)] = Field(
        None,
        description="rental term every billed unit uses; second and minute, which solve --json writes for an hourly "
        "price billed in those increments, are read back as hour (so a solved plan can be estimated as written); a "
        "mix such as month+hour pins nothing",
    )
    capacity: Literal["on_demand", "spot"] | None = Field(None, description="rent on-demand or spot capacity")
    billed_units: dict[str, int] | None = Field(None, description="ignored on input; present in solver output")
    virtual_pipeline: Int | None = Field(
        None, gt=0, le=1024,
        description="interleaved model chunks per pipeline stage (above 1: nemo with a pinned pp, dividing the "
        "layers per stage, with grad_accum a multiple of pp as Megatron requires; default: the engine's, nemo up to "
        "8); solver output: the chunks launched",
    )
    attention: Attention | None = Field(
        None, description="ignored on input (set training.attention); solver output: the kernel run on the GPU"
    )


class Scenario(Strict):
    """A fine-tuning job and its limits."""

    name: Name | None = Field(None, max_length=MAX_NAME, description="defaults to the file name; one line of "
                              "printable text (control characters refused)")
    model: ModelField = Field(
        description="a catalogs/models.yaml name (or an -Instruct/-Chat/-it/-hf variant of "
        "one), an inline architecture mapping, or {hf_config: path/to/config.json}"
    )
    method: Method = Field(
        description="full: every weight trains; lora: adapters over a frozen 16-bit base; "
        "qlora: adapters over a 4-bit NF4 base"
    )
    lora: LoraSpec | None = Field(None, description="adapter settings (lora and qlora); defaults apply when absent")
    data: DataSpec = Field(description="how much data: tokens, or samples and avg_tokens, times epochs")
    seq_len: Int = Field(gt=0, le=10_000_000, description="tokens per training row (sequence length)")
    global_batch: Int = Field(gt=0, le=10_000_000, description="sequences per optimizer step")
    training: Training = Field(Training(), description="software stack")
    budget: Budget | None = Field(None, description="money limit; none means no limit")
    deadline_hours: Float | None = Field(
        None, gt=0, le=1e6, allow_inf_nan=False, description="wall-clock limit including start-up and checkpoint saves"
    )
    objective: Objective = Field(Objective.cost, description="minimised first; the other breaks ties")
    tolerance: Float = Field(
        0.05, ge=0, le=1, description="fraction over the objective's optimum accepted for a better other axis: "
        "among plans within it, the fastest (objective cost) or cheapest (objective time) is chosen; 0 gives the "
        "plain optimum (docs/trade-offs.md)"
    )
    catalog: str | list[str] | None = Field(
        None, description="offer catalog file(s): a built-in name (aws, cn, gcp, lambda, runpod, us, vast) or a "
        "path; a relative path is read from the scenario's folder, then the working directory; default all built-in "
        "offers"
    )
    allow: Allow = Field(Allow(), description="allow-lists and limits on the plan")
    plan: PlanPins = Field(PlanPins(), description="decision variables to pin; solve optimises the rest")
    headroom: Float = Field(0.05, ge=0, lt=0.9, description="fraction of card memory kept free")
    risk: Risk = Field(
        Risk.p90, description="percentile of the memory model's held-out error a plan must fit at: its peak x that "
        "percentile's measured/predicted ratio within capacity less headroom (p99 is memory only)"
    )
    risk_limits: bool = Field(
        False, description="true: the deadline and the budget must also hold at the risk percentile of the time "
        "model's error (hours and bill of the slow end); p50 or p90"
    )
    calibration: str | None = Field(
        None, description="calibration overlay file (ftopt calibrate -o FILE); a relative path is read from the "
        "scenario's folder, then the working directory"
    )

    @field_validator("lora", mode="after")
    @classmethod
    def _lora_only_with_adapters(cls, lora: LoraSpec | None, info: ValidationInfo) -> LoraSpec | None:
        if lora is not None and info.data.get("method") is Method.full:
            raise ValueError("lora settings given but method is full; use method lora or qlora, or remove lora")
        return lora

    @property
    def tokens_processed(self) -> float:
        """Tokens the GPUs process over all epochs, padding included (DataSpec.packing)."""
        return self.data.tokens_processed(self.seq_len)

    @property
    def lora_spec(self) -> LoraSpec | None:
        """The adapters (defaults when the method needs them and none are given)."""
        if self.method is Method.full:
            return None
        return self.lora or LoraSpec()

    @property
    def frozen_base_bits(self) -> int:
        """Bits of the base weights: 16 for full fine-tuning, else ``training.base_bits`` (default 4 qlora, 16 lora)."""
        if self.method is Method.full:
            return 16
        return self.training.base_bits or (4 if self.method is Method.qlora else 16)

    @property
    def billing_terms(self) -> frozenset[Term] | None:
        """The rental terms a bill may use: the pinned ``plan.term`` only, or None for every term an offer prices."""
        return frozenset([self.plan.term]) if self.plan.term else None
