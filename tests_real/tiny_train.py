"""Two optimizer steps of a tiny Llama on CPU with the written launch settings (run under ``accelerate launch``).

Usage: tiny_train.py SETTINGS.json. The model and data are random and tiny (2 layers, hidden 64); the
TrainingArguments and DeepSpeed config are ftopt's, as written, except the batch arithmetic, which is rescaled to the
ranks started here, the run length (max_steps 2) and ``use_cpu``.
"""

from __future__ import annotations

import json
import sys

import torch
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments


class _Random(torch.utils.data.Dataset):
    def __init__(self, n: int, seq: int, vocab: int) -> None:
        gen = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, vocab, (n, seq), generator=gen)

    def __len__(self) -> int:
        return self.ids.shape[0]

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def main() -> None:
    settings = json.loads(open(sys.argv[1]).read())
    args = dict(settings["training_arguments"], output_dir=settings["output_dir"], max_steps=2, report_to="none",
                save_strategy="no", logging_steps=1, dataloader_num_workers=0)  # fmt: skip
    if "deepspeed" in args:
        args["deepspeed"] = settings["ds_config_path"]
    args["use_cpu"] = True  # transformers refuses bf16 on a CPU otherwise; DeepSpeed runs its CPU accelerator
    training = TrainingArguments(**args)
    config = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)  # fmt: skip
    model = LlamaForCausalLM(config)
    trainer = Trainer(model=model, args=training, train_dataset=_Random(64, 32, 128))
    out = trainer.train()
    assert trainer.state.global_step == 2, trainer.state.global_step
    if "deepspeed" in args:  # the engine DeepSpeed built runs the ZeRO stage of the written config
        stage = json.loads(open(args["deepspeed"]).read())["zero_optimization"]["stage"]
        assert trainer.is_deepspeed_enabled and trainer.model_wrapped.zero_optimization_stage() == stage
    print(f"tiny run: 2 steps, loss {out.training_loss:.4f}")


if __name__ == "__main__":
    main()
