"""Rendering of the catalog and model listings and of `catalog validate`."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from optimizer.inputs.catalog import Catalog
from optimizer.inputs.errors import InputError, did_you_mean
from optimizer.inputs.schema import Term
from optimizer.inputs.schema_catalog import Gpu, Offer
from optimizer.inputs.terminal import escape
from optimizer.solve.validator import CatalogCounts

# ------------------------------------------------------------------------------------------------ catalog and models


def _hourly_in_usd(catalog: Catalog, offer: Offer) -> float | None:
    """The offer's hourly price in USD (catalogs/fx.yaml), or None when no rate is known."""
    if offer.currency == "USD":
        return offer.prices[Term.hour].amount
    rate = catalog.rate(offer.currency, "USD")
    return offer.prices[Term.hour].amount * rate.rate if rate else None


def _rank(catalog: Catalog, offer: Offer) -> tuple[int, float, str]:
    """Cheapest first in USD; offers whose currency has no rate to USD after every one that has."""
    usd = _hourly_in_usd(catalog, offer)
    return (usd is None, usd if usd is not None else offer.prices[Term.hour].amount, offer.id)


def gpu_rows(catalog: Catalog) -> list[dict[str, Any]]:
    """One row per GPU type: memory, dense bf16 TFLOPS, offers, cheapest hourly price (in its own currency)."""
    rows = []
    for gpu in catalog.gpus.values():
        offers = [o for o in catalog.offers if o.gpu == gpu.id]
        hourly = [o for o in offers if Term.hour in o.prices]
        cheapest = min(hourly, key=lambda o: _rank(catalog, o)) if hourly else None
        usd = _hourly_in_usd(catalog, cheapest) if cheapest else None
        rows.append({
            "gpu": gpu.id, "memory_gib": gpu.memory_gib, "bf16_tflops": gpu.bf16_tflops, "offers": len(offers),
            "cheapest_hourly": cheapest.prices[Term.hour].amount if cheapest else None,
            "currency": cheapest.currency if cheapest else None,
            "cheapest_hourly_usd": round(usd, 4) if usd is not None else None,
            "cheapest_offer": cheapest.id if cheapest else None,
        })  # fmt: skip
    return rows


def gpu_table(rows: list[dict[str, Any]]) -> Table:
    """The rows of :func:`gpu_rows` as a terminal table."""
    table = Table(title="GPU types", show_edge=False)
    table.add_column("gpu", no_wrap=True, min_width=max((len(r["gpu"]) for r in rows), default=3))
    for col in ("memory GiB", "bf16 TFLOPS", "offers", "cheapest per card-hour (USD)", "offer's own price"):
        table.add_column(col, justify="right")
    table.add_column("offer", overflow="fold")
    for r in rows:
        priced = r["cheapest_hourly"] is not None
        usd = f"{r['cheapest_hourly_usd']:,.2f}" if r["cheapest_hourly_usd"] is not None else "- (no USD rate)"
        own = f"{r['cheapest_hourly']:,.4g} {r['currency']}" if priced else "-"
        tflops = f"{r['bf16_tflops']:g}" if r["bf16_tflops"] is not None else "- (no bf16)"
        table.add_row(escape(r["gpu"]), f"{r['memory_gib']:g}", tflops, str(r["offers"]), usd if priced else "-",
                      own, escape(r["cheapest_offer"] or "-"))  # fmt: skip
    return table


def catalog_entry(catalog: Catalog, ident: str) -> Gpu | Offer:
    """The GPU (id or alias, any case) or the offer (id) called ``ident``; InputError with the nearest names."""
    offers = {o.id: o for o in catalog.offers}
    if ident.lower() in offers:
        return offers[ident.lower()]
    names = {n.lower(): g for g in catalog.gpus.values() for n in [g.id, *g.aliases]}
    if ident.lower() in names:
        return names[ident.lower()]
    known = [*sorted(catalog.gpus), *sorted(offers)]
    raise InputError("catalog", "ID", f"no GPU or offer '{ident}'{did_you_mean(ident, known)}; see ftopt catalog list")


def entry_json(entry: Gpu | Offer, catalog: Catalog | None = None) -> dict[str, Any]:
    """All fields of a catalog entry, with their sources, as JSON-ready data.

    An offer's ``nvlink`` is what the plan gets: false when its GPU has no NVLink at all, whatever the offer's
    default says (the offer field only switches NVLink off for cards that have it).
    """
    doc = {"kind": "gpu" if isinstance(entry, Gpu) else "offer", **entry.model_dump(mode="json")}
    gpu = catalog.gpus.get(entry.gpu) if isinstance(entry, Offer) and catalog is not None else None
    if gpu is not None and gpu.nvlink_gb_per_s <= 0:
        doc["nvlink"] = False
    return doc


def _nvlink_text(entry: Offer, catalog: Catalog | None) -> str:
    gpu = catalog.gpus.get(entry.gpu) if catalog is not None else None
    if gpu is not None and gpu.nvlink_gb_per_s <= 0:
        return f"no ({gpu.id} has no NVLink; cards talk over PCIe)"
    if entry.nvlink is None:
        return "not stated by the source (SXM or PCIe); planned as PCIe"
    if not entry.nvlink:
        return "no (the offer's cards are not bridged; PCIe)"
    if gpu is None:
        return "yes, where the GPU has it"
    return f"yes ({gpu.nvlink_gb_per_s:g} GB/s per direction, {gpu.nvlink_domain} cards per NVLink domain)"


def print_entry(entry: Gpu | Offer, console: Console, catalog: Catalog | None = None) -> None:
    """Every field of a GPU or an offer, one per line; prices with their source and date."""
    doc = entry_json(entry, catalog)
    console.print(f"[bold]{doc.pop('kind')} {escape(doc['id'])}[/bold]")
    prices = doc.pop("prices", None)
    for key, value in doc.items():
        if (value is not None or key == "nvlink") and value != []:
            shown = ", ".join(map(str, value)) if isinstance(value, list) else str(value)
            if key == "nvlink" and isinstance(entry, Offer):
                shown = _nvlink_text(entry, catalog)
            console.print(f"  {key}: {escape(shown)}", soft_wrap=True)
    for term, price in (prices or {}).items():
        console.print(f"  prices.{term}: {price['amount']:g} {doc['currency']} per card-{term} "
                      f"(source: {escape(price['source'])}; as_of {price['as_of']})", soft_wrap=True)  # fmt: skip


def model_rows(catalog: Catalog) -> list[dict[str, Any]]:
    """One row per catalog architecture: every field of its models.yaml entry that is set.

    As docs/json-contract.md says, "the catalog entries' fields" (experts_per_token, model_type, torch_dtype,
    head_dim, qkv_bias ...), with ``params`` the parameter count (published, else computed).
    """
    return [{**m.model_dump(mode="json", exclude_none=True), "params": m.total_params}
            for m in sorted(catalog.models.values(), key=lambda m: (m.total_params, m.name))]  # fmt: skip


def model_table(rows: list[dict[str, Any]]) -> Table:
    """The rows of :func:`model_rows` as a terminal table."""
    table = Table(title="Model architectures (L layers, h hidden, I SwiGLU width, a/kv heads, V vocabulary)",
                  show_edge=False)  # fmt: skip
    table.add_column("name", no_wrap=True, min_width=max((len(r["name"]) for r in rows), default=4))
    for col in ("params", "L", "h", "I", "a/kv", "V", "tied", "experts"):
        table.add_column(col, justify="right", no_wrap=True)
    for r in rows:
        moe = f"{r['experts']} ({r.get('experts_per_token', 1)} active)" if r.get("experts", 1) > 1 else "-"
        table.add_row(escape(r["name"]), f"{r['params'] / 1e9:,.2f} B", str(r["layers"]), str(r["hidden"]),
                      str(r["intermediate"]), f"{r['heads']}/{r['kv_heads']}", str(r["vocab"]),
                      "yes" if r["tied_embeddings"] else "no", moe)  # fmt: skip
    return table


def validate_line(counts: CatalogCounts) -> str:
    """``ftopt catalog validate``'s success line."""
    line = (f"ok: {counts.files} file{'s' if counts.files != 1 else ''}: {counts.gpus} gpus, {counts.offers} offers, "
            f"{counts.models} models, {counts.fx_rates} fx rates")  # fmt: skip
    return "\n".join([line, *(f"note: {n}" for n in counts.notes)])
