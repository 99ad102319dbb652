"""Tiny stand-ins for what a torchtune recipe loads from disk: a 2-layer Llama 3.2, a tokenizer and a dataset.

The recipes instantiate these through ``_component_`` paths (tests_real.tt_tiny.*), so the recipe code runs
unchanged around them: FSDP sharding, the optimizer, the loss, accumulation, checkpointing and the training loop.
"""

from __future__ import annotations

import torch
from torchtune import training
from torchtune.models.llama3_2 import llama3_2

VOCAB = 128
SEQ = 32


def tiny_llama() -> torch.nn.Module:
    """A 2-layer Llama 3.2 (hidden 64, 4 heads, 2 KV heads, vocabulary 128).

    The distributed recipes log device memory on rank 0 after loading the model and empty the device cache before
    training, both of which torchtune 0.6.1 cannot do on a CPU ("Logging memory stats is not supported on CPU
    devices"; torch.cpu has no empty_cache); built on a CPU, the model turns that housekeeping off.
    """
    if not torch.cuda.is_available():
        training.get_memory_stats = lambda device, reset_stats=True: {}
        training.log_memory_stats = lambda stats, message="": None
        training.cleanup_before_training = lambda: None
    return llama3_2(vocab_size=VOCAB, num_layers=2, num_heads=4, num_kv_heads=2, embed_dim=64, max_seq_len=SEQ * 2,
                    intermediate_dim=128)  # fmt: skip


class TinyTokenizer:
    """The attributes the recipes read from a tokenizer (pad and end ids, maximum length)."""

    pad_id = 0
    eos_id = 1
    bos_id = 2
    max_seq_len = SEQ


def tiny_tokenizer(**_: object) -> TinyTokenizer:
    """The tokenizer component (the recipe passes the config's tokenizer keys)."""
    return TinyTokenizer()


class _Random(torch.utils.data.Dataset):
    def __init__(self, n: int) -> None:
        gen = torch.Generator().manual_seed(0)
        self.ids = torch.randint(3, VOCAB, (n, SEQ), generator=gen)

    def __len__(self) -> int:
        return self.ids.shape[0]

    def __getitem__(self, i: int) -> dict:
        tokens = self.ids[i].tolist()
        return {"tokens": tokens, "labels": tokens}


def tiny_dataset(tokenizer: TinyTokenizer, packed: bool = False, **_: object) -> torch.utils.data.Dataset:
    """64 random sequences of 32 tokens (labels = tokens); packed into rows of the tokenizer's max_seq_len when the
    launch settings ask for packing, as torchtune's own dataset builders do (PackedDataset)."""
    if packed:
        from torchtune.datasets import PackedDataset

        return PackedDataset(_Random(64), max_seq_len=tokenizer.max_seq_len, padding_idx=tokenizer.pad_id)
    return _Random(64)
