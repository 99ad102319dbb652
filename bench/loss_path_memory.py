"""Count the bytes per logit the loss path holds, with real torch and transformers on the CPU.

Usage: ``python bench/loss_path_memory.py`` in an environment with torch (and transformers for the HF row), e.g.
``python3 -m venv /tmp/v && /tmp/v/bin/pip install torch==2.13.0 numpy transformers``. Not part of the test suite
(the project does not depend on torch).

A TorchDispatchMode sees every tensor an operator creates (forward and backward) and a weak reference to its storage
says when it is freed, so the mode knows the bytes alive at every moment (CPU tensors: the allocator has no cache, so
this is what ``torch.cuda.max_memory_allocated`` would count, kernel workspaces aside). For each loss path it prints
the peak of tensors created after the hidden states, in bytes per logit (T x V), at the end of the forward pass
(the loss computed, the training loop's references as it keeps them) and over the backward pass, against the counts
of ``catalogs/calibration.yaml`` ``logits_bytes_per_vocab_token`` (optimizer/models/activations.py logits_bytes);
then the bytes autograd saves for backward in transformers' loss, eager and compiled (needs a C++ compiler for
Inductor; a few minutes on two cores).
"""

from __future__ import annotations

import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

B, S, H, V = 2, 1024, 256, 32_000  # sequences, tokens each, hidden, vocabulary: 65.5M logits
T = B * S


class LiveBytes(TorchDispatchMode):
    """Bytes of the storages created inside the mode and still alive; ``peak`` since the last ``reset``."""

    def __init__(self) -> None:
        super().__init__()
        self.live = 0
        self.peak = 0
        self._seen: set[int] = set()

    def reset(self) -> None:
        self.peak = self.live

    def _track(self, t: torch.Tensor) -> None:
        storage = t.untyped_storage()
        key = storage.data_ptr()
        if key in self._seen or storage.nbytes() == 0:
            return
        self._seen.add(key)
        size = storage.nbytes()
        self.live += size
        self.peak = max(self.peak, self.live)

        def free(k: int = key, n: int = size) -> None:
            self.live -= n
            self._seen.discard(k)

        weakref.finalize(storage, free)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                self._track(t)
        return out


def hf_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """transformers' ForCausalLMLoss (the installed version)."""
    from transformers.loss.loss_utils import ForCausalLMLoss

    return ForCausalLMLoss(logits, labels, vocab_size=V)


def torchtune_2024_loss(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """torchtune recipes of April 2024: model returns output(h).float(); the loop shifts and keeps ``logits``."""
    logits = logits.float()
    logits = logits[..., :-1, :].contiguous()
    labels = labels[..., 1:].contiguous()
    logits = logits.transpose(1, 2)
    return torch.nn.functional.cross_entropy(logits, labels), logits


def qwen1_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Qwen-1 modeling_qwen.py: cross-entropy of the 16-bit logits with a shifted copy."""
    shift_logits = logits[..., :-1, :].contiguous()
    shift_labels = labels[..., 1:].contiguous()
    return torch.nn.functional.cross_entropy(shift_logits.view(-1, V), shift_labels.view(-1))


def measure(kind: str) -> tuple[float, float]:
    """(forward-end peak, backward peak) in bytes per logit for one loss path."""
    torch.manual_seed(0)
    hidden = torch.randn(B, S, H, dtype=torch.bfloat16, requires_grad=True)
    weight = torch.randn(V, H, dtype=torch.bfloat16) / H**0.5
    labels = torch.randint(0, V, (B, S))
    mode = LiveBytes()
    with mode:
        logits = hidden @ weight.t()  # the lm_head's bf16 output
        held = None
        if kind == "hf":
            loss = hf_loss(logits, labels)
        elif kind == "torchtune_2024":
            loss, held = torchtune_2024_loss(logits, labels)
        else:
            loss = qwen1_loss(logits, labels)
        forward_peak = mode.peak
        del logits  # HF Trainer's compute_loss returns the loss only; the model output goes with it
        mode.reset()
        loss.backward()
        backward_peak = mode.peak
        del held
    n = T * V
    return forward_peak / n, backward_peak / n


def saved_per_logit(compiled: bool) -> float:
    """Bytes per logit that autograd saves for backward in transformers' loss, eager or under torch.compile (the
    compiled graph's saved tensors pass the same saved-tensor hooks; a dispatch mode cannot see inside it)."""
    fn = torch.compile(hf_loss) if compiled else hf_loss
    torch.manual_seed(0)
    hidden = torch.randn(B, S, H, dtype=torch.bfloat16, requires_grad=True)
    weight = torch.randn(V, H, dtype=torch.bfloat16) / H**0.5
    labels = torch.randint(0, V, (B, S))
    logits = hidden @ weight.t()
    saved: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = fn(logits, labels)
    del logits
    loss.backward()
    return sum(saved.values()) / (T * V)


def main() -> None:
    print(f"T x V = {B} x {S} x {V}; bytes per logit alive (tensors created after the hidden states)")
    print("| loss path | forward end | backward | model's c_loss |")
    print("|---|---|---|---|")
    for kind, model in (("hf", "standard 12"), ("torchtune_2024", "standard_held 16"), ("qwen1", "standard_16bit 6")):
        fwd, bwd = measure(kind)
        print(f"| {kind} | {fwd:.2f} | {bwd:.2f} | {model} |")
    print()
    print(f"saved for backward by transformers' loss: eager {saved_per_logit(False):.2f} B per logit, torch.compile "
          f"{saved_per_logit(True):.2f} (standard_compiled 4 = 2 saved + the bf16 gradient 2)")  # fmt: skip


if __name__ == "__main__":
    main()
