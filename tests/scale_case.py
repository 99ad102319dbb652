"""A very large candidate space for the time-limit tests (issue 25): Llama-3.1-405B, full fine-tuning, up to 4,096
cards, over 300 multi-node offers of six GPU types (made-up prices; the figures only size the space)."""

from __future__ import annotations

from pathlib import Path

import yaml

GPUS = ("H100-SXM", "H200", "A100-80G", "H800", "B200", "MI300X")
OFFERS = 300
MAX_CARDS = 4096


def write_case(folder: Path) -> Path:
    """Write the offers file and the scenario into ``folder``; returns the scenario's path."""
    offers = []
    for i in range(OFFERS):
        offers.append({
            "id": f"stress-{i:03d}", "provider": f"Provider {i % 37}", "gpu": GPUS[i % len(GPUS)],
            "cards_per_node": 8, "max_nodes": MAX_CARDS // 8, "inter_node_gb_per_s": 25.0 + (i % 5) * 12.5,
            "hour_increment_s": 60 if i % 2 else 3600,
            "prices": {"hour": {"amount": round(1.5 + (i * 37 % 101) / 25.0, 2), "source": "made up for a test",
                                "as_of": "2026-12-01"}},
            "host": {"ram_gib": 2048, "source": "made up for a test", "as_of": "2026-12-01"},
        })  # fmt: skip
    catalog = folder / "stress-offers.yaml"
    catalog.write_text(yaml.safe_dump({"schema_version": 1, "currency": "USD", "offers": offers}), encoding="utf-8")
    scenario = folder / "405b-4096.yaml"
    scenario.write_text(yaml.safe_dump({
        "name": "405b-full-4096-cards", "model": "Llama-3.1-405B", "method": "full",
        "data": {"tokens": 2.0e9, "epochs": 1}, "seq_len": 4096, "global_batch": 4096,
        "catalog": str(catalog), "allow": {"max_cards": MAX_CARDS},
    }, sort_keys=False), encoding="utf-8")  # fmt: skip
    return scenario
