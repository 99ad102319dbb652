"""The built-in catalogs are complete and consistent: sources, dates, ids, aliases, parameter counts, rates."""

from __future__ import annotations

import itertools
import re
from datetime import date
from pathlib import Path

import pytest
import yaml

from optimizer.inputs.catalog import CATALOG_DIR, default_offer_files, load_catalog
from optimizer.inputs.schema_catalog import Gpu, Offer

OFFER_FILES = default_offer_files()


def _raw_offers() -> list[dict]:
    return [o for f in OFFER_FILES for o in yaml.safe_load(f.read_text(encoding="utf-8"))["offers"]]


def test_catalog_has_at_least_16_gpus_and_10_models(catalog):
    assert len(catalog.gpus) >= 16
    assert len(catalog.models) >= 10


def test_every_gpu_has_a_source_and_a_date(catalog):
    for gpu in catalog.gpus.values():
        assert len(gpu.source.strip()) >= 10, gpu.id
        assert date(2015, 1, 1) <= gpu.as_of <= date(2030, 1, 1), gpu.id


def test_every_price_has_a_source_and_a_date(catalog):
    for offer in catalog.offers:
        for term, price in offer.prices.items():
            assert len(price.source.strip()) >= 10, (offer.id, term)
            assert date(2015, 1, 1) <= price.as_of <= date(2030, 1, 1), (offer.id, term)


def test_every_offer_names_a_canonical_gpu_id(catalog):
    for raw in _raw_offers():
        assert raw["gpu"] in catalog.gpus, f"offer {raw['id']}: gpu '{raw['gpu']}' is not a gpus.yaml id"


def test_every_catalog_file_declares_its_schema_version():
    for path in [CATALOG_DIR / "gpus.yaml", CATALOG_DIR / "models.yaml", CATALOG_DIR / "fx.yaml",
                 CATALOG_DIR / "lora_targets.yaml", *OFFER_FILES]:  # fmt: skip
        assert yaml.safe_load(path.read_text(encoding="utf-8"))["schema_version"] == 1, path.name


def test_gpu_ids_and_aliases_are_unique_ignoring_case(catalog):
    names = [n for g in catalog.gpus.values() for n in {x.lower() for x in [g.id, *g.aliases]}]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    assert duplicates == []


def test_offer_ids_are_unique(catalog):
    ids = [o["id"] for o in _raw_offers()]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize("name", ["Llama-2-7B", "Llama-3.1-8B", "Llama-3.1-70B", "Qwen2.5-72B", "Mixtral-8x7B"])
def test_the_parameter_formula_matches_the_published_count(catalog, name):
    model = catalog.model(name)
    assert model.params is not None
    assert model.model_copy(update={"params": None}).total_params == model.params


def test_the_parameter_formula_matches_every_catalog_model(catalog):
    wrong = {m.name: (m.params, m.model_copy(update={"params": None}).total_params) for m in catalog.models.values()
             if m.params is not None and m.model_copy(update={"params": None}).total_params != m.params}  # fmt: skip
    assert wrong == {}


def test_every_model_has_a_source(catalog):
    assert [m.name for m in catalog.models.values() if not (m.source or "").strip()] == []


def test_exchange_rates_connect_every_currency_used(catalog):
    currencies = sorted({o.currency for o in catalog.offers})
    assert len(currencies) >= 2  # one CNY and one USD catalog (issue 2)
    missing = [(a, b) for a, b in itertools.permutations(currencies, 2) if catalog.rate(a, b) is None]
    assert missing == []


def test_inverse_exchange_rates_multiply_to_one(catalog):
    assert catalog.rate("USD", "CNY").rate * catalog.rate("CNY", "USD").rate == pytest.approx(1.0)


def test_gcp_offers_bill_per_second_and_sell_no_month(catalog):
    """Compute Engine bills per second after a one-minute minimum and rents no month: its month-like rate is a
    1-year commitment, which a job cannot buy one month at a time (catalogs/README.md)."""
    gcp = [o for o in catalog.offers if o.provider == "GCP"]
    assert len(gcp) >= 4
    assert all(o.hour_increment_s == 1 for o in gcp), [o.id for o in gcp if o.hour_increment_s != 1]
    assert not [o.id for o in gcp if "month" in {t.value for t in o.prices}]


def test_multi_node_offers_state_their_network(catalog):
    assert [o.id for o in catalog.offers if o.max_nodes > 1 and not o.inter_node_gb_per_s] == []


@pytest.mark.parametrize("model", [Gpu, Offer], ids=["gpus", "offers"])
def test_catalog_readme_documents_every_field(model):
    readme = (CATALOG_DIR / "README.md").read_text(encoding="utf-8")
    undocumented = [f for f in model.model_fields if f != "currency" and not re.search(rf"`{f}`", readme)]
    assert undocumented == []


def test_builtin_catalogs_resolve_by_name_from_any_directory(tmp_path, monkeypatch):
    from optimizer.inputs.catalog import builtin_offer_names, resolve_offer_file

    monkeypatch.chdir(tmp_path)  # no catalogs/ here
    assert builtin_offer_names() == ["aws", "cn", "gcp", "lambda", "runpod", "us", "vast"]
    assert resolve_offer_file("cn", "s.yaml", "catalog") == CATALOG_DIR / "offers" / "cn.yaml"
    # the old spelling still works from outside the checkout
    assert resolve_offer_file("catalogs/offers/us.yaml", "s.yaml", "catalog").resolve() == (
        CATALOG_DIR / "offers" / "us.yaml").resolve()


def test_unknown_catalog_name_lists_the_builtin_ones(tmp_path, monkeypatch):
    from optimizer.inputs.catalog import resolve_offer_file
    from optimizer.inputs.errors import InputError

    monkeypatch.chdir(tmp_path)
    with pytest.raises(InputError) as err:
        resolve_offer_file("eu", "s.yaml", "catalog")
    assert "built-in catalogs: aws, cn, gcp, lambda, runpod, us, vast" in str(err.value)


def test_a_user_file_is_read_by_path(tmp_path, monkeypatch):
    from optimizer.inputs.catalog import resolve_offer_file

    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine.yaml").write_text("offers: []\n")
    assert resolve_offer_file("mine.yaml", "s.yaml", "catalog").resolve() == (tmp_path / "mine.yaml").resolve()


def test_a_scenarios_relative_catalog_is_read_from_its_folder_first(tmp_path, monkeypatch):
    """The same scenario plans with the same offers file from any directory: its folder's o.yaml, not the cwd's."""
    from optimizer.inputs.catalog import load_scenario, scenario_offer_files

    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    (tmp_path / "o.yaml").write_text("offers: []\n")
    (tmp_path / "sub" / "o.yaml").write_text("offers: []\n")
    (tmp_path / "sub" / "only-here.yaml").write_text("offers: []\n")
    (tmp_path / "cwd-only.yaml").write_text("offers: []\n")
    scenario = (CATALOG_DIR.parent / "scenarios" / "7b-lora.yaml").read_text()
    mine = scenario.replace("catalog: us", "catalog: [o.yaml, only-here.yaml, cwd-only.yaml]")
    (tmp_path / "sub" / "s.yaml").write_text(mine)
    files = scenario_offer_files(load_scenario("sub/s.yaml"), "sub/s.yaml")
    assert [f.resolve() for f in files] == [(tmp_path / "sub" / "o.yaml").resolve(),
                                            (tmp_path / "sub" / "only-here.yaml").resolve(),
                                            (tmp_path / "cwd-only.yaml").resolve()]  # fmt: skip


def test_a_scenarios_calibration_and_hf_config_are_read_from_its_folder_first(tmp_path, monkeypatch):
    from optimizer.inputs.catalog import named_file

    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    for name in ("cal.yaml", "sub/cal.yaml", "cwd.yaml"):
        (tmp_path / name).write_text("{}\n")
    assert named_file("cal.yaml", "sub/s.yaml").resolve() == (tmp_path / "sub" / "cal.yaml").resolve()
    assert named_file("cwd.yaml", "sub/s.yaml").resolve() == (tmp_path / "cwd.yaml").resolve()
    assert named_file("none.yaml", "sub/s.yaml") == tmp_path.joinpath("sub", "none.yaml").relative_to(tmp_path)


def test_the_catalog_cache_follows_the_files_content(tmp_path):
    """Batch workers parse a catalog once, yet an offers file edited in place is read again, not served stale."""
    path = tmp_path / "mine.yaml"

    def write(amount: float) -> None:
        path.write_text(yaml.safe_dump({"schema_version": 1, "currency": "USD", "offers": [{
            "id": "mine", "provider": "Me", "gpu": "H100-SXM", "cards_per_node": 8,
            "prices": {"hour": {"amount": amount, "source": "a quote", "as_of": "2026-12-01"}}}]}), encoding="utf-8")

    write(2.5)
    first = load_catalog([path])
    assert load_catalog([path]) is first  # same bytes: the parsed catalog is reused
    write(3.75)
    assert load_catalog([path]).offers[0].prices["hour"].amount == 3.75
    write(2.5)
    assert load_catalog([path]).offers[0].prices["hour"].amount == 2.5


def test_a_catalog_flag_names_a_file_of_the_working_directory_not_of_the_scenarios_folder(tmp_path, monkeypatch):
    """--catalog o.yaml is the o.yaml the user sees where the command runs (resolve_offer_file without a base), even
    when the scenario's folder has one of that name; a built-in name stays a name."""
    from optimizer.solve.planner import Overrides, prepare

    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    offers = (CATALOG_DIR / "offers" / "lambda.yaml").read_text()
    (tmp_path / "o.yaml").write_text(offers)
    (tmp_path / "sub" / "o.yaml").write_text("offers: []\n")
    (tmp_path / "sub" / "s.yaml").write_text((CATALOG_DIR.parent / "scenarios" / "7b-lora.yaml").read_text())
    sc, catalog, _ = prepare("sub/s.yaml", Overrides(catalog=["o.yaml"]))
    assert [Path(f).resolve() for f in catalog.offer_files] == [(tmp_path / "o.yaml").resolve()]
    assert prepare("sub/s.yaml", Overrides(catalog=["cn"]))[0].catalog in (["cn"], "cn")
