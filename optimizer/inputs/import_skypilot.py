"""SkyPilot catalog rows (skypilot-org/skypilot-catalog ``catalogs/v8|v9/<cloud>/vms.csv``) -> an ftopt offers file.

Column meanings follow SkyPilot's readers (sky/catalog/common.py) as summarised in
``tests/data/reference/skypilot/README.md``: ``Price``/``SpotPrice`` are USD per hour for the whole instance,
``MemoryGiB`` and ``vCPUs`` the host's, ``GpuInfo`` a Python literal whose ``Gpus[0].MemoryInfo.SizeInMiB`` is the
per-GPU memory the cloud API reports. Per cloud quirks live in ``catalogs/skypilot.yaml``.

For every GPU row: per-card price = Price / AcceleratorCount (spot likewise, kept only when below on demand); a row of
several GPUs is one instance type that SkyPilot launches whole, so it becomes an offer ``sold_as: instance`` of
``cards_per_instance`` = AcceleratorCount GPUs (plans rent whole instances, the bill is instances x Price); host
RAM and vCPUs per node, the v9 local disk, the usable memory per card when the API figure is below the nominal size,
the region in the id. Rows of one instance and region (AWS lists one per zone) become one offer, its spot price the
median of the zone samples; ``cheapest_region`` keeps one region per instance type. The text is validated with the
catalog loader; the command (cli_import.py) writes it atomically.
"""

from __future__ import annotations

import ast
import csv
import io
import math
import re
import statistics
import tempfile
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

import yaml

from optimizer.inputs import catalog as catalog_mod
from optimizer.inputs.errors import InputError
from optimizer.inputs.inputfile import MAX_LOG_BYTES, read_text
from optimizer.inputs.schema_catalog import Gpu
from optimizer.inputs.yamlio import read_yaml

REQUIRED = ("AcceleratorName", "AcceleratorCount", "Price", "Region")
MAX_CARDS = 1024  # cards in one instance; the largest SkyPilot rows list 16
MAX_CARD_PRICE = 1e9  # USD per card-hour: the offers file's ceiling (schema_catalog.Price.amount)
MAX_VCPUS = 100_000  # vCPUs of one node: the offers file's ceiling (schema_catalog.Host.vcpus)
HOST_COLUMNS = ("MemoryGiB", "vCPUs", "LocalDiskSize", "LocalDiskCount")  # read into an offer's host when host_facts


class _Dumper(yaml.SafeDumper):
    """Plain YAML: no anchors for repeated values (dates)."""

    def ignore_aliases(self, data: Any) -> bool:
        return True
_SLUG = re.compile(r"[^a-z0-9._-]+")


@dataclass
class ImportResult:
    """What the import wrote and what it left out (reason -> count)."""

    offers: int
    skipped: dict[str, int] = field(default_factory=dict)


def _num(text: str | None) -> float | None:
    """The cell as a finite number, or None (empty, not a number, NaN or infinite)."""
    try:
        value = float(text) if text not in (None, "") else None
    except ValueError:
        return None
    return value if value is not None and math.isfinite(value) else None


def _count(row: dict[str, str]) -> int | None:
    """AcceleratorCount as a whole number of cards from 1 to MAX_CARDS, or None (0, 0.5, inf, text)."""
    value = _num(row.get("AcceleratorCount"))
    return int(value) if value is not None and value.is_integer() and 1 <= value <= MAX_CARDS else None


def price_problem(row: dict[str, str], count: int) -> str | None:
    """Why a row's on-demand ``Price`` cannot be imported, else None.

    Rule: Price is a finite number above 0 whose share per card is at most MAX_CARD_PRICE USD/h; an empty one is
    "no on-demand Price".
    """
    text = (row.get("Price") or "").strip()
    value = _num(text)
    if not text:
        return "no on-demand Price"
    if value is None or value <= 0:
        return f"Price {text} is not a positive finite number"
    if value / count > MAX_CARD_PRICE:
        return f"Price {text} is over {MAX_CARD_PRICE:,.0f} USD/h per card"
    return None


def host_problem(row: dict[str, str]) -> str | None:
    """Why a row's host columns cannot be imported, else None.

    Rule: each of HOST_COLUMNS that the row gives is a finite number above 0, vCPUs from 1 to MAX_VCPUS, and the
    local disk (LocalDiskSize x LocalDiskCount) finite; an empty one is left out of the offer.
    """
    for col in HOST_COLUMNS:
        text = (row.get(col) or "").strip()
        value = _num(text)
        if text and (value is None or value <= 0):
            return f"{col} {text} is not a positive finite number"
    vcpus = _num(row.get("vCPUs"))
    if vcpus is not None and not 1 <= vcpus <= MAX_VCPUS:
        return f"vCPUs {row['vCPUs'].strip()} is not from 1 to {MAX_VCPUS:,}"
    disk = _disk(row)[0]
    if disk is not None and not math.isfinite(disk):
        return "LocalDiskSize x LocalDiskCount is not a finite number"
    return None


def _slug(text: str) -> str:
    return _SLUG.sub("-", text.lower()).strip("-")


def read_rows(path: Path) -> list[dict[str, str]]:
    """The CSV rows (the file read through inputfile.read_text, at most MAX_LOG_BYTES); problems are InputErrors.

    A missing column, a field over csv's 128 KiB field limit, a NUL byte or a row that cannot be parsed is a
    one-line error naming the file and the line.
    """
    text = read_text(path, str(path), MAX_LOG_BYTES, "a SkyPilot vms.csv file")
    reader = csv.DictReader(io.StringIO(text, newline=""))
    try:
        missing = [c for c in REQUIRED if c not in (reader.fieldnames or [])]
        if missing:
            raise InputError(str(path), missing[0], f"column missing; a SkyPilot vms.csv has {', '.join(REQUIRED)}")
        return list(reader)
    except csv.Error as exc:
        raise InputError(str(path), f"line {reader.line_num + 1}", f"not a readable CSV row: {exc}") from None


def gpu_memory_mib(row: dict[str, str], rules: dict[str, Any]) -> float | None:
    """Per-GPU memory from GpuInfo (MiB), or None when absent or not in MiB (RunPod rows hold GB)."""
    text = row.get("GpuInfo") or ""
    if not text or rules.get("gpuinfo_in_gb"):
        return None
    try:
        info = ast.literal_eval(text)
        size = float(info["Gpus"][0]["MemoryInfo"]["SizeInMiB"])
    except (ValueError, SyntaxError, KeyError, IndexError, TypeError):
        return None
    count = _count(row) or 1
    return size / count if rules.get("gpuinfo_total") else size


def pcie_card(row: dict[str, str], instance: str) -> bool:
    """Whether the row's cards are PCIe boards: the instance name or GpuInfo's card name says PCIe.

    RunPod's ``A100-80GB`` rows are "A100 PCIe" in GpuInfo (their SXM rows are named ``A100-80GB-SXM``): PCIe boards
    link at most in bridged pairs, so the offer has no NVLink domain (gpus.yaml A100-80G notes).
    """
    if "pcie" in instance.lower():
        return True
    try:
        info = ast.literal_eval(row.get("GpuInfo") or "")
        return "pcie" in str(info["Gpus"][0]["Name"]).lower()
    except (ValueError, SyntaxError, KeyError, IndexError, TypeError):
        return False


def map_gpu(name: str, instance: str, gpus: dict[str, Gpu]) -> Gpu | None:
    """The gpus.yaml entry whose ``skypilot_names`` holds ``name``; a PCIe instance of an SXM name -> the PCIe id."""
    found = next((g for g in gpus.values() if name in g.skypilot_names), None)
    if found is not None and "pcie" in instance.lower() and found.id.endswith("-SXM"):
        return gpus.get(found.id[: -len("SXM")] + "PCIe")
    return found


def _gcp_vm_rows(rows: list[dict[str, str]]) -> dict[tuple[str, str], dict[str, str]]:
    return {(r["InstanceType"], r.get("AvailabilityZone", "")): r for r in rows if r.get("InstanceType")}


def _with_gcp_vm(row: dict[str, str], vms: dict, rules: dict[str, Any]) -> dict[str, str] | str:
    """A GCP accelerator row with its VM's type, price, spot, vCPUs and RAM added, or why it is skipped."""
    pattern = rules.get("vm_for", {}).get(row["AcceleratorName"])
    count = _count(row) or 0
    vm = vms.get((pattern.format(n=count), row.get("AvailabilityZone", ""))) if pattern else None
    if vm is None:
        return "no VM row of the matching machine type"
    gpu_price, gpu_spot = _num(row.get("Price")), _num(row.get("SpotPrice"))
    if rules.get("suspect_spot_at_or_above_price") and gpu_price and gpu_spot and gpu_spot >= gpu_price:
        return "SpotPrice not below Price (a suspect row: catalogs/skypilot.yaml)"
    merged = dict(row)
    merged["InstanceType"] = vm["InstanceType"]
    merged["vCPUs"], merged["MemoryGiB"] = vm.get("vCPUs", ""), vm.get("MemoryGiB", "")
    for col in ("Price", "SpotPrice"):
        a, b = _num(row.get(col)), _num(vm.get(col))
        merged[col] = "" if a is None or b is None else str(a + b)
    if gpu_price is None or gpu_spot is None or gpu_spot >= gpu_price:  # rows with spot above on demand look wrong
        merged["SpotPrice"] = ""
    return merged


def _disk(row: dict[str, str]) -> tuple[float | None, str | None]:
    size, count = _num(row.get("LocalDiskSize")), _num(row.get("LocalDiskCount"))
    if size is None or count is None:
        return None, None
    kind = "nvme" if str(row.get("NVMeSupported", "")).lower() == "true" else (row.get("LocalDiskType") or "ssd")
    return size * count, kind if kind in ("nvme", "ssd", "hdd") else "ssd"


def _offer(key: tuple[str, str], group: list[dict[str, str]], gpu: Gpu, cloud: str, rules: dict[str, Any],
           source: str, as_of: date) -> dict[str, Any]:  # fmt: skip
    instance, region = key
    row = next((r for r in group if _disk(r)[0] is not None), group[0])  # v9 rows carry the local disk
    count = _count(row) or 1  # build_offers keeps only rows with a valid count
    price = _num(row["Price"]) or 0.0
    where = f"{source}, row {instance} {region}" + (" (VM row + accelerator row)" if "vm_for" in rules else "")
    offer: dict[str, Any] = {
        "id": _slug(f"{cloud}-{instance}-{region}"),
        "provider": rules.get("provider", cloud),
        "gpu": gpu.id,
        "cards_per_node": count,
        **({"sold_as": "instance", "cards_per_instance": count} if count > 1 else {}),  # SkyPilot rents whole VMs
        "max_nodes": 1,
        "nvlink": gpu.nvlink_domain >= 4 and gpu.nvlink_gb_per_s > 0 and not pcie_card(row, instance),
        "hour_increment_s": int(rules.get("hour_increment_s", 3600)),
        "prices": {"hour": {"amount": round(price / count, 6), "source": f"{where}: Price {price:g} USD/h for "
                            f"{count} GPUs", "as_of": as_of}},  # fmt: skip
        "region": region,
    }
    if rules.get("host_facts"):
        ram, vcpus = _num(row.get("MemoryGiB")), _num(row.get("vCPUs"))
        disk, kind = _disk(row)
        host = {"ram_gib": ram, "vcpus": int(vcpus) if vcpus else None, "local_disk_gb": disk,
                "local_disk_kind": kind, "source": f"{where}: vCPUs, MemoryGiB, local disk columns", "as_of": as_of}
        offer["host"] = {k: v for k, v in host.items() if v is not None}  # fmt: skip
    mib = gpu_memory_mib(row, rules)
    if mib is not None and mib < gpu.memory_gib * 1024 * 0.999:
        offer["usable_memory_mib"] = round(mib, 1)
    samples = sorted(s for s in (_num(r.get("SpotPrice")) for r in group) if s is not None and 0 < s < price)
    if samples:
        spot = statistics.median(samples)
        offer["spot"] = {"price": {"amount": round(spot / count, 6), "source": f"{where}: median SpotPrice "
                                   f"{spot:g} USD/h of {len(samples)} zone sample(s) for {count} GPUs",
                                   "as_of": as_of}, "interruptions": None}  # fmt: skip
    return offer


def _level_key(row: dict[str, str]) -> tuple[str, str, str]:
    """The shape a row prices: instance type (empty on GCP accelerator rows), accelerator, count."""
    return row.get("InstanceType", ""), row.get("AcceleratorName", ""), row.get("AcceleratorCount", "")


def _dearest_prices(rows: list[dict[str, str]]) -> dict[tuple[str, str, str], float]:
    """Per shape, the highest ``Price`` over its rows (regions and zones) that price_problem passes."""
    dearest: dict[tuple[str, str, str], float] = defaultdict(float)
    for row in rows:
        if price_problem(row, _count(row) or 1) is None:  # a Price of 1e308 is no level for the other regions
            dearest[_level_key(row)] = max(dearest[_level_key(row)], _num(row.get("Price")) or 0.0)
    return dearest


def build_offers(rows: list[dict[str, str]], cloud: str, gpus: dict[str, Gpu], rules: dict[str, Any],
                 source: str, as_of: date, cheapest_region: bool = False,
                 ) -> tuple[list[dict[str, Any]], dict[str, int]]:  # fmt: skip
    """Offer mappings (sorted by id) and the skipped rows by reason."""
    skipped: dict[str, int] = defaultdict(int)
    vms = _gcp_vm_rows(rows) if "vm_for" in rules else {}
    groups: dict[tuple[str, str], list[dict[str, str]]] = defaultdict(list)
    mapped: dict[tuple[str, str], Gpu] = {}
    levels = _dearest_prices(rows)
    floor = float(rules.get("price_level_floor") or 0.0)
    for row in rows:
        name = row.get("AcceleratorName") or ""
        if not name:
            continue  # a VM row (GCP) or a CPU instance
        if _count(row) is None:
            skipped[f"{name[:60]}: AcceleratorCount is not a whole number of cards from 1 to {MAX_CARDS}"] += 1
            continue
        problem = price_problem(row, _count(row) or 1)  # before the price-level rule, which a bad price also fails
        if problem is not None:
            skipped[f"{name}: {problem}"] += 1
            continue
        if (_num(row.get("Price")) or 0.0) < floor * levels[_level_key(row)]:
            skipped[f"{name}: Price under {floor:g} x another region's for the same shape (a second price level: "
                    "catalogs/skypilot.yaml)"] += 1  # fmt: skip
            continue
        if vms:
            merged = _with_gcp_vm(row, vms, rules)
            if isinstance(merged, str):
                skipped[f"{name}: {merged}"] += 1
                continue
            row = merged
        problem = price_problem(row, _count(row) or 1) or (host_problem(row) if rules.get("host_facts") else None)
        if problem is not None:  # the GCP VM row's price and host columns, every cloud's host columns
            skipped[f"{name}: {problem}"] += 1
            continue
        gpu = map_gpu(name, row.get("InstanceType", ""), gpus)
        if gpu is None:
            skipped[f"{name}: no gpus.yaml entry lists it in skypilot_names"] += 1
            continue
        mib = gpu_memory_mib(row, rules)
        if mib is not None and abs(mib - gpu.memory_gib * 1024) > 0.1 * gpu.memory_gib * 1024:
            skipped[f"{name}: {mib:.0f} MiB per GPU does not match {gpu.id}"] += 1
            continue
        key = (row.get("InstanceType") or name, row["Region"])
        groups[key].append(row)
        mapped[key] = gpu
    offers = [_offer(k, g, mapped[k], cloud, rules, source, as_of) for k, g in groups.items()]
    if cheapest_region:
        best: dict[str, dict[str, Any]] = {}
        for o, k in zip(offers, groups, strict=True):
            cur = best.get(k[0])
            if cur is None or (o["prices"]["hour"]["amount"], o["id"]) < (cur["prices"]["hour"]["amount"], cur["id"]):
                best[k[0]] = o
        offers = list(best.values())
    return sorted(offers, key=lambda o: o["id"]), dict(sorted(skipped.items()))


def import_text(csv_paths: list[str | Path], out_path: str | Path, cloud: str | None = None,
                cheapest_region: bool = False, as_of: date | None = None,
                root: Path = catalog_mod.CATALOG_DIR) -> tuple[str, ImportResult]:  # fmt: skip
    """Read SkyPilot vms.csv files of one cloud, build offers and return the offers file's text, validated.

    Validation is the catalog loader's, on the exact text (errors name ``out_path``); the caller writes it.
    """
    paths = [Path(p) for p in csv_paths]
    if not paths:
        raise InputError("command line", "CSV_FILE", "give at least one SkyPilot vms.csv file")
    path = paths[0]
    name = (cloud or path.stem).lower()
    table = read_yaml(root / "skypilot.yaml").get("clouds", {})
    if name not in table:
        raise InputError("command line", "--cloud", f"unknown cloud '{name}'; known: {', '.join(sorted(table))}")
    gpus = catalog_mod._load_gpus(root / "gpus.yaml")
    rows = [row for p in paths for row in read_rows(p)]
    names = " + ".join(p.name for p in paths)
    offers, skipped = build_offers(rows, name, gpus, table[name], f"SkyPilot catalog {names}",
                                   as_of or date.today(), cheapest_region)  # fmt: skip
    if not offers:
        raise InputError(str(path), "", f"no GPU rows could be imported ({'; '.join(skipped) or 'no rows'})")
    header = (f"# Imported by `ftopt catalog import skypilot {' '.join(p.name for p in paths)} --cloud {name}`\n"
              "# from SkyPilot catalog rows (skypilot-org/skypilot-catalog vms.csv), dated "
              f"{as_of or date.today()} (the --as-of date).\n"
              "# Prices are point-in-time samples; spot.interruptions stays null until a source gives it.\n"
              "# Field meanings: catalogs/README.md.\n")  # fmt: skip
    doc = {"schema_version": 1, "currency": "USD", "offers": offers}
    text = header + yaml.dump(doc, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=1000)
    with tempfile.TemporaryDirectory() as tmp:  # validate exactly the text that will be written
        check = Path(tmp) / Path(out_path).name
        check.write_text(text, encoding="utf-8")
        try:
            catalog_mod._load_offers([check], catalog_mod._gpu_name_index(gpus), gpus)
        except InputError as exc:
            raise InputError(str(out_path), exc.field, exc.problem) from None
    return text, ImportResult(len(offers), skipped)
