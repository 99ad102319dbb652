"""`ftopt catalog import skypilot`: SkyPilot vms.csv rows -> a valid offers file that the solver can use."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import pytest
import yaml

from optimizer.inputs.catalog import CATALOG_DIR, load_catalog
from optimizer.inputs.import_skypilot import import_text
from optimizer.solve.planner import prepare, solve_scenario
from optimizer.solve.validator import check_plan

from .conftest import REFERENCE, scenario_doc

HEADER = "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Price,SpotPrice,Region,AvailabilityZone"
# SkyPilot's GCP layout: a VM row (vCPUs, RAM, VM price) and an accelerator row (GPU price) per machine type
GCP_HEADER = ("InstanceType,vCPUs,MemoryGiB,AcceleratorName,AcceleratorCount,GpuInfo,Region,AvailabilityZone,Price,"
              "SpotPrice\n")
A100_40G_INFO = "{'Gpus': [{'MemoryInfo': {'SizeInMiB': 40960}}]}"  # the GpuInfo of an A100 40 GB accelerator row


def gpu_info(name: str, count: int, mib: int) -> str:
    return (f"\"{{'Gpus': [{{'Name': '{name}', 'Manufacturer': 'NVIDIA', 'Count': {count}, "
            f"'MemoryInfo': {{'SizeInMiB': {mib}}}}}], 'TotalGpuMemoryInMiB': {mib * count}}}\"")  # fmt: skip


# Synthetic rows in the catalogs/v8/aws/vms.csv layout (tests/data/reference/skypilot/README.md): instance types and
# regions that are NOT in the shipped snapshot; the prices are made up for the test, not quotes.
ROWS = [
    f"g6e.12xlarge,L40S,4.0,48.0,384.0,{gpu_info('L40S', 4, 45776)},10.4926,4.2,us-west-2,usw2-az1",
    f"p5en.48xlarge,H200,8.0,192.0,2048.0,{gpu_info('H200', 8, 143771)},63.296,27.0,us-east-2,use2-az1",
    f"p5en.48xlarge,H200,8.0,192.0,2048.0,{gpu_info('H200', 8, 143771)},63.296,25.0,us-east-2,use2-az2",
    f"p5en.48xlarge,H200,8.0,192.0,2048.0,{gpu_info('H200', 8, 143771)},63.296,70.0,us-east-2,use2-az3",
    f"p5en.48xlarge,H200,8.0,192.0,2048.0,{gpu_info('H200', 8, 143771)},66.0,30.0,ap-south-1,aps1-az1",
    f"dl1.24xlarge,Gaudi HL-205,8.0,96.0,768.0,{gpu_info('Gaudi', 8, 32768)},13.10904,4.0,us-east-1,use1-az1",
    f"p4d.24xlarge,A100,8.0,96.0,1152.0,{gpu_info('A100', 8, 40960)},,9.0,ap-northeast-2,apne2-az1",
]


def import_file(csv_paths: list, out: Path, cloud: str, **kw):
    text, result = import_text(csv_paths, out, cloud, **kw)
    out.write_text(text, encoding="utf-8")
    return result


@pytest.fixture
def aws_csv(tmp_path: Path) -> Path:
    path = tmp_path / "vms.csv"
    path.write_text("\n".join([HEADER, *ROWS]) + "\n")
    return path


def _offers(path: Path) -> dict[str, dict]:
    return {o["id"]: o for o in yaml.safe_load(path.read_text())["offers"]}


def test_imported_rows_validate_and_price_per_card(aws_csv, tmp_path):
    out = tmp_path / "aws.yaml"
    result = import_file([aws_csv], out, "aws", as_of=date(2026, 12, 1))
    assert result.offers == 3
    assert result.skipped == {"A100: no on-demand Price": 1,
                              "Gaudi HL-205: no gpus.yaml entry lists it in skypilot_names": 1}  # fmt: skip
    offers = _offers(out)
    l40s = offers["aws-g6e.12xlarge-us-west-2"]
    assert l40s["gpu"] == "L40S" and l40s["cards_per_node"] == 4
    assert (l40s["sold_as"], l40s["cards_per_instance"]) == ("instance", 4)  # SkyPilot launches the whole VM
    assert l40s["prices"]["hour"]["amount"] == pytest.approx(10.4926 / 4, abs=1e-6)
    assert l40s["host"]["ram_gib"] == 384.0 and l40s["host"]["vcpus"] == 48
    assert l40s["usable_memory_mib"] == 45776  # the API figure, below the nominal 48 GiB
    h200 = offers["aws-p5en.48xlarge-us-east-2"]
    assert h200["prices"]["hour"]["amount"] == pytest.approx(63.296 / 8, abs=1e-6)
    # zone samples 25, 27 and 70 (above on demand, dropped): median of 25 and 27 = 26, per card 3.25
    assert h200["spot"]["price"]["amount"] == pytest.approx(26.0 / 8, abs=1e-6)
    assert h200["spot"]["interruptions"] is None
    catalog = load_catalog([out])
    assert {o.id for o in catalog.offers} == set(offers)


def test_cheapest_region_keeps_one_offer_per_instance_type(aws_csv, tmp_path):
    out = tmp_path / "aws.yaml"
    import_file([aws_csv], out, "aws", cheapest_region=True, as_of=date(2026, 12, 1))
    ids = sorted(_offers(out))
    assert ids == ["aws-g6e.12xlarge-us-west-2", "aws-p5en.48xlarge-us-east-2"]


def test_an_imported_catalog_solves(aws_csv, tmp_path):
    out = tmp_path / "aws.yaml"
    import_file([aws_csv], out, "aws", as_of=date(2026, 12, 1))
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(scenario_doc(catalog=str(out))))
    result = solve_scenario(path)
    assert result.best.status.value == "optimal" and result.best.plan is not None
    assert result.best.plan.offer in _offers(out)
    sc, catalog, _ = prepare(path)
    assert check_plan(sc, catalog, result.best) == []


def test_gcp_accelerator_rows_are_priced_with_their_vm(tmp_path):
    # the VM row carries vCPUs, RAM and the VM price; the accelerator row only the GPUs' price (synthetic numbers)
    csv = tmp_path / "gcp.csv"
    csv.write_text(
        GCP_HEADER
        + "a2-highgpu-4g,48.0,340.0,,,,europe-west4,europe-west4-a,3.0,1.0\n"
        f",,,A100,4,{A100_40G_INFO},europe-west4,europe-west4-a,12.0,6.0\n"
        f",,,A100,2,{A100_40G_INFO},europe-west4,europe-west4-a,6.0,3.0\n"
    )
    out = tmp_path / "gcp.yaml"
    result = import_file([csv], out, "gcp", as_of=date(2026, 12, 1))
    offers = _offers(out)
    a100 = offers["gcp-a2-highgpu-4g-europe-west4"]
    assert a100["prices"]["hour"]["amount"] == pytest.approx((3.0 + 12.0) / 4)
    assert a100["spot"]["price"]["amount"] == pytest.approx((1.0 + 6.0) / 4)
    assert a100["host"]["ram_gib"] == 340.0
    assert result.skipped == {"A100: no VM row of the matching machine type": 1}


def test_gcp_suspect_rows_are_skipped_with_their_reason(tmp_path):
    """Spot at or above on demand, or a second price level under half another region's: not a list price."""
    gpu = A100_40G_INFO
    csv = tmp_path / "gcp.csv"
    csv.write_text(
        GCP_HEADER
        + "a2-highgpu-1g,12.0,85.0,,,,us-central1,us-central1-a,1.0,0.3\n"
        "a2-highgpu-1g,12.0,85.0,,,,us-east1,us-east1-b,1.0,0.3\n"
        "a2-highgpu-1g,12.0,85.0,,,,us-west1,us-west1-b,1.0,0.3\n"
        "a2-highgpu-2g,24.0,170.0,,,,us-west1,us-west1-b,2.0,0.6\n"
        f",,,A100,1,\"{gpu}\",us-central1,us-central1-a,2.9,1.0\n"  # the list level
        f",,,A100,1,\"{gpu}\",us-east1,us-east1-b,1.4,0.5\n"  # under half of 2.9: a second level
        f",,,A100,1,\"{gpu}\",us-west1,us-west1-b,2.5,2.6\n"  # spot above on demand
        f",,,A100,2,\"{gpu}\",us-west1,us-west1-b,5.0,2.0\n"  # another shape, its own level
    )
    out = tmp_path / "gcp.yaml"
    result = import_file([csv], out, "gcp", as_of=date(2026, 12, 1))
    assert sorted(_offers(out)) == ["gcp-a2-highgpu-1g-us-central1", "gcp-a2-highgpu-2g-us-west1"]
    assert result.skipped == {
        "A100: Price under 0.5 x another region's for the same shape (a second price level: catalogs/skypilot.yaml)": 1,
        "A100: SpotPrice not below Price (a suspect row: catalogs/skypilot.yaml)": 1}


def test_vast_rows_drop_nominal_host_sizes_and_divide_total_gpu_memory(tmp_path):
    csv = tmp_path / "vast.csv"
    csv.write_text("InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Price,SpotPrice,Region\n"
                   "4x-H100_SXM-32-65536,H100,4,32,64.0,\"{'Gpus': [{'Name': 'H100', 'Count': 4, 'MemoryInfo': "
                   "{'SizeInMiB': 326236}}], 'TotalGpuMemoryInMiB': 326236}\",8.0,0.00,\"Oregon, US, NA\"\n")
    # Vast's SizeInMiB is the total over the 4 GPUs: 326,236 / 4 = 81,559 MiB each
    out = tmp_path / "vast.yaml"
    import_file([csv], out, "vast", as_of=date(2026, 12, 1))
    (o,) = _offers(out).values()
    assert "host" not in o and "spot" not in o
    assert o["usable_memory_mib"] == 81559 and o["id"] == "vast-4x-h100_sxm-32-65536-oregon-us-na"


def test_the_shipped_snapshots_are_the_import_of_the_shared_rows(tmp_path):
    sky = REFERENCE / "skypilot"
    runs = {"aws": [sky / "aws.csv", sky / "aws_v9_localdisk.csv"]}
    for cloud in ("gcp", "lambda", "runpod", "vast"):
        runs[cloud] = [sky / f"{cloud}.csv"]
    for cloud, files in runs.items():
        out = tmp_path / f"{cloud}.yaml"
        import_file(files, out, cloud, as_of=date(2026, 12, 1))
        assert out.read_text() == (CATALOG_DIR / "offers" / f"{cloud}.yaml").read_text(), cloud


def test_cli_import_writes_nothing_on_a_bad_file(tmp_path, run_cli):
    bad = tmp_path / "bad.csv"
    bad.write_text("InstanceType,Price\nx,1.0\n")
    out = tmp_path / "out.yaml"
    result = run_cli("catalog", "import", "skypilot", bad, "--cloud", "aws", "-o", out)
    assert result.exit_code == 2 and "AcceleratorName" in result.stderr and "\n" not in result.stderr.strip()
    assert not out.exists()


def test_cli_import_reports_offers_and_skipped_rows(aws_csv, tmp_path, run_cli):
    out = tmp_path / "aws.yaml"
    result = run_cli("catalog", "import", "skypilot", aws_csv, "--cloud", "aws", "--as-of", "2026-12-01", "-o", out)
    assert result.exit_code == 0, result.stderr
    assert result.stdout.startswith(f"ok: 3 offers written to {out}; 2 rows skipped")
    assert run_cli("catalog", "validate", out).exit_code == 0


def test_pcie_boards_have_no_nvlink_domain(tmp_path):
    """RunPod's A100-80GB rows are "A100 PCIe" in GpuInfo: bridged pairs at most, so the offer is not an NVLink box
    (an NVLink A100 plan priced its ZeRO-3 collectives at 300 GB/s where the pods have PCIe)."""
    csv = tmp_path / "runpod.csv"
    csv.write_text("InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Region,SpotPrice,Price,GpuInfo\n"
                   f"2x_A100-80GB_SECURE,A100-80GB,2.0,16.0,234.0,US,2.78,2.78,{gpu_info('A100 PCIe', 2, 80)}\n"
                   f"2x_H100-SXM_SECURE,H100-SXM,2.0,16.0,234.0,US,5.0,5.0,{gpu_info('H100 SXM', 2, 80)}\n")
    out = tmp_path / "runpod.yaml"
    import_file([csv], out, "runpod", as_of=date(2026, 12, 1))
    nvlink = {o["gpu"]: o["nvlink"] for o in _offers(out).values()}
    assert nvlink == {"A100-80G": False, "H100-SXM": True}


def test_a_negative_or_missing_price_is_skipped_with_its_reason_not_as_a_second_price_level(tmp_path):
    # Price -5 was reported as "Price under 0 x another region's for the same shape (a second price level ...)"
    path = tmp_path / "vms.csv"
    bad = f"p4d.24xlarge,A100,8.0,96.0,1152.0,{gpu_info('A100', 8, 40960)},-5,9.0,us-east-1,use1-az1"
    path.write_text("\n".join([HEADER, ROWS[0], bad, ROWS[-1]]) + "\n")
    result = import_file([path], tmp_path / "aws.yaml", "aws", as_of=date(2026, 12, 1))
    assert result.skipped == {"A100: no on-demand Price": 1, "A100: Price -5 is not a positive finite number": 1}


@pytest.mark.parametrize(
    ("column", "value", "reason"),
    [
        ("Price", "0", "Price 0 is not a positive finite number"),
        ("Price", "nan", "Price nan is not a positive finite number"),
        ("Price", "inf", "Price inf is not a positive finite number"),
        ("Price", "1e308", "Price 1e308 is over 1,000,000,000 USD/h per card"),
        ("MemoryGiB", "-5", "MemoryGiB -5 is not a positive finite number"),
        ("MemoryGiB", "nan", "MemoryGiB nan is not a positive finite number"),
        ("vCPUs", "0.5", "vCPUs 0.5 is not from 1 to 100,000"),
    ],
)
def test_a_value_the_offers_file_cannot_hold_skips_its_row_naming_the_csv_column(tmp_path, column, value, reason):
    """It was an error against the output file in its own terms ('offers[8].host.ram_gib: must be > 0, got -5.0')."""
    path = tmp_path / "vms.csv"
    cells = dict(zip(HEADER.split(","), ["p4d.24xlarge", "A100", "8.0", "96.0", "1152.0", gpu_info("A100", 8, 40960),
                                         "32.77", "9.0", "us-east-1", "use1-az1"], strict=True))  # fmt: skip
    bad = ",".join({**cells, column: value}.values())
    path.write_text("\n".join([HEADER, ROWS[0], bad]) + "\n")
    result = import_file([path], tmp_path / "aws.yaml", "aws", as_of=date(2026, 12, 1))
    assert (result.offers, result.skipped) == (1, {f"A100: {reason}": 1})


def test_an_overflowing_price_sets_no_price_level_for_the_other_regions(tmp_path):
    gpu = A100_40G_INFO
    csv = tmp_path / "gcp.csv"
    csv.write_text(
        GCP_HEADER
        + "a2-highgpu-1g,12.0,85.0,,,,us-central1,us-central1-a,1.0,0.3\n"
        "a2-highgpu-1g,12.0,85.0,,,,us-east1,us-east1-b,1.0,0.3\n"
        f",,,A100,1,\"{gpu}\",us-central1,us-central1-a,1e308,\n"
        f",,,A100,1,\"{gpu}\",us-east1,us-east1-b,2.9,1.0\n"
    )
    result = import_file([csv], tmp_path / "gcp.yaml", "gcp", as_of=date(2026, 12, 1))
    assert (result.offers, result.skipped) == (1, {"A100: Price 1e308 is over 1,000,000,000 USD/h per card": 1})
