"""Plans as rented: user-style scenarios on every built-in catalog, each plan checked against the machine it rents.

84 scenarios (Qwen2.5 7B/14B/32B and Llama-3.1-70B x LoRA/QLoRA/full x the seven built-in catalogs, spot allowed, no
deadline). For the best plan and the best plan on each other GPU type it counts the plans that bill part of an
instance (cards not a multiple of the offer's ``cards_per_instance``) or need more host RAM per node (offloaded states
+ ``host_ram_per_rank_gib`` x processes in the node) than the node has (the offer's figure, else the default rule),
and the best plans chosen on spot. Both counts should be 0; the spot count shows the priors at work.

    .venv/bin/python bench/plans_as_sold.py
    .venv/bin/python bench/plans_as_sold.py --check   # also: exit 1 on a count above 0 or where README.md quotes
                                                      # other figures (CI's figures tier); --write updates README.md
"""

from __future__ import annotations

import argparse
import itertools
import re
import sys
import tempfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench import readme_figures  # noqa: E402
from optimizer.solve.planner import prepare, solve_scenario  # noqa: E402

MODELS = [("Qwen2.5-7B", 2e8), ("Qwen2.5-14B", 1e8), ("Qwen2.5-32B", 5e7), ("Llama-3.1-70B", 5e7)]
METHODS = ["lora", "qlora", "full"]
CATALOGS = ["aws", "gcp", "lambda", "runpod", "vast", "us", "cn"]
README_SENTENCE = re.compile(  # README.md, "Plans ..." list of the solve section
    r"plans_as_sold\.py` solves (?P<scenarios>\d+) user-style scenarios over the seven built-in catalogs and counts"
    r"\s+the\s+plans that bill part of an instance or exceed their node's RAM: (?P<part_instance>\d+) and"
    r"\s+(?P<over_host_ram>\d+) of (?P<plans>\d+) today")
LORA = {"rank": 16, "alpha": 32, "targets": ["q_proj", "k_proj", "v_proj", "o_proj"]}


def scenario(model: str, tokens: float, method: str, catalog: str) -> dict:
    """One user-style scenario: cost objective, spot allowed, no budget or deadline."""
    doc = {"name": f"{model}-{method}-{catalog}", "model": model, "method": method,
           "data": {"tokens": tokens, "epochs": 1}, "seq_len": 2048, "global_batch": 64,
           "training": {"framework": "hf", "optimizer": "adamw", "attention": "flash"}, "catalog": catalog,
           "objective": "cost", "allow": {"spot": True}}  # fmt: skip
    if method != "full":
        doc["lora"] = LORA
    return doc


def main(argv: list[str] | None = None) -> None:
    """Solve the grid and print the counts (module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    readme_figures.add_arguments(parser)
    args = parser.parse_args(argv)
    counts = {"scenarios": 0, "infeasible": 0, "plans": 0, "part_instance": 0, "over_host_ram": 0, "spot": 0}
    with tempfile.TemporaryDirectory() as tmp:
        for (model, tokens), method, catalog in itertools.product(MODELS, METHODS, CATALOGS):
            doc = scenario(model, tokens, method, catalog)
            path = Path(tmp) / f"{doc['name']}.yaml"
            path.write_text(yaml.safe_dump(doc), encoding="utf-8")
            offers = {o.id: o for o in prepare(path)[1].offers}
            result = solve_scenario(path)
            counts["scenarios"] += 1
            if result.best.plan is None:
                counts["infeasible"] += 1
                print(f"no plan: {doc['name']}: {result.relaxation.message if result.relaxation else ''}"[:200])
                continue
            counts["spot"] += result.best.plan.capacity == "spot"
            for est in [result.best, *result.alternatives]:
                p, o = est.plan, offers[est.plan.offer]
                need = est.memory.cpu_offload + 4 * 2**30 * min(p.cards, o.cards_per_node)
                counts["plans"] += 1
                counts["part_instance"] += p.cards % o.unit_cards != 0
                counts["over_host_ram"] += est.offer.host_ram_bytes is None or need > est.offer.host_ram_bytes
    print(", ".join(f"{k} {v}" for k, v in counts.items()))
    if args.check or args.write:
        quoted = {k: str(counts[k]) for k in ("scenarios", "part_instance", "over_host_ram", "plans")}
        stale = readme_figures.sync(REPO / "README.md", README_SENTENCE, quoted, args.write)
        missed = [f"target: {k} {counts[k]} (must be 0)" for k in ("part_instance", "over_host_ram") if counts[k]]
        readme_figures.conclude(stale, args.check, args.write, missed)


if __name__ == "__main__":
    main()
