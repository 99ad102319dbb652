"""Synthetic scenario files for batch benchmarks and tests: sizes 1B-405B, every method, random limits.

Deterministic for a seed. Models are catalog names (3B-405B) plus an inline 1B architecture (Llama-3.2-1B
shapes, from its HF config.json); budgets and deadlines are log-uniform so that some scenarios bind on each and a
few are infeasible, as in a real portfolio.

    python bench/gen_scenarios.py 1000 /tmp/scenarios --seed 0
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path
from typing import Any

import yaml

LLAMA_3_2_1B = {"name": "Llama-3.2-1B", "layers": 16, "hidden": 2048, "intermediate": 8192, "heads": 32,
                "kv_heads": 8, "vocab": 128256, "tied_embeddings": True}  # fmt: skip
MODELS: list[Any] = [LLAMA_3_2_1B, "Llama-3.2-3B", "Llama-3.1-8B", "Qwen2.5-7B", "Qwen2.5-14B", "Qwen2.5-32B",
                     "Llama-3.1-70B", "Qwen2.5-72B", "Mixtral-8x7B", "Llama-3.1-405B"]  # fmt: skip
METHODS = ("full", "lora", "qlora")
CATALOGS = (None, "catalogs/offers/cn.yaml", "catalogs/offers/us.yaml")  # None: every built-in offer


def scenario_doc(rng: random.Random, i: int) -> dict[str, Any]:
    """One random scenario document (valid against schema.Scenario)."""
    model = rng.choice(MODELS)
    method = rng.choice(METHODS)
    catalog = rng.choice(CATALOGS)
    currency = "CNY" if catalog == "catalogs/offers/cn.yaml" else "USD"
    doc: dict[str, Any] = {
        "name": f"synthetic-{i:05d}",
        "model": model,
        "method": method,
        "data": {"tokens": float(f"{10 ** rng.uniform(6.5, 9):.3g}"), "epochs": rng.choice([1, 2, 3])},
        "seq_len": rng.choice([1024, 2048, 4096, 8192]),
        "global_batch": rng.choice([16, 32, 64, 128, 256]),
        "budget": {"amount": float(f"{10 ** rng.uniform(1.5, 5.5):.3g}"), "currency": currency},
        "deadline_hours": float(f"{10 ** rng.uniform(0, 3):.3g}"),
        "objective": rng.choice(["cost", "cost", "time"]),
    }
    if catalog is not None:
        doc["catalog"] = catalog
    if rng.random() < 0.3:
        doc["allow"] = {"max_cards": rng.choice([8, 16, 64])}
    return doc


def write_scenarios(n: int, folder: str | Path, seed: int = 0) -> list[Path]:
    """Write ``n`` scenario files ``synthetic-00000.yaml``... into ``folder``; returns their paths."""
    rng = random.Random(seed)
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(n):
        path = out / f"synthetic-{i:05d}.yaml"
        path.write_text(yaml.safe_dump(scenario_doc(rng, i), sort_keys=False), encoding="utf-8")
        paths.append(path)
    return paths


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("n", type=int)
    parser.add_argument("folder")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(len(write_scenarios(args.n, args.folder, args.seed)), "scenarios in", args.folder)
