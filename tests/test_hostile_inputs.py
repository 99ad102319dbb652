"""Hostile input files: special files, unbounded reads, content that must not be echoed, pathological JSON and CSV.

Each case checks the one-line error names the file and what is allowed, and that nothing hangs (an alarm fails a
read that would block on a pipe) or prints what the file holds.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from optimizer.inputs.errors import InputError
from optimizer.inputs.import_skypilot import import_text
from optimizer.inputs.importers import from_trainer_state
from optimizer.inputs.inputfile import MAX_JSON_DEPTH, read_bytes, read_json
from optimizer.inputs.yamlio import read_yaml

from .conftest import REPO, scenario_doc
from .test_import_skypilot import HEADER, ROWS

SECRET = "root:$6$hunter2secret$abcdef:19000:0:99999:7:::"


@pytest.fixture
def alarm() -> Iterator[None]:
    """Fail instead of hanging: any read that blocks for 5 s raises."""

    def _hang(*_: object) -> None:
        raise TimeoutError("read blocked")

    old = signal.signal(signal.SIGALRM, _hang)
    signal.alarm(5)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "pipe.yaml"
    os.mkfifo(path)
    return path


def _one_line_exit_2(result, *needles: str) -> str:
    assert result.exit_code == 2, (result.exit_code, result.stdout, result.stderr)
    line = result.stderr.strip()
    assert "\n" not in line and line.startswith("ftopt: error: "), result.stderr
    for needle in needles:
        assert needle in line, line
    return line


@pytest.mark.parametrize("special", ["fifo", "/dev/zero", "dir"])
def test_special_files_are_refused_before_reading(special, fifo, tmp_path, alarm):
    path = fifo if special == "fifo" else tmp_path if special == "dir" else Path(special)
    kind = {"fifo": "named pipe", "/dev/zero": "device", "dir": "directory"}[special]
    with pytest.raises(InputError, match=kind):
        read_yaml(path)
    with pytest.raises(InputError, match=kind):
        read_json(path, str(path))


@pytest.mark.parametrize("where", ["scenario", "--catalog", "catalog:"])
def test_a_pipe_or_device_named_anywhere_gives_one_line(where, fifo, run_cli, write_scenario, alarm):
    for special, kind in ((fifo, "named pipe"), (Path("/dev/zero"), "device")):
        if where == "scenario":
            result = run_cli("solve", special)
        elif where == "--catalog":
            result = run_cli("solve", REPO / "scenarios/7b-lora.yaml", "--catalog", special)
        else:
            result = run_cli("solve", write_scenario(catalog=str(special)))
        _one_line_exit_2(result, str(special), kind)


def test_a_portfolio_catalog_that_is_a_device_gives_one_line(run_cli, tmp_path, alarm):
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(scenario_doc()))
    job = {"name": "j", "scenario": "job.yaml", "release_day": 0, "due_day": 5}
    doc = {"name": "p", "currency": "USD", "horizon_days": 10, "jobs": [job], "catalog": "/dev/zero"}
    path = tmp_path / "pf.yaml"
    path.write_text(yaml.safe_dump(doc))
    _one_line_exit_2(run_cli("portfolio", path), "/dev/zero", "device")


def test_reads_stop_at_the_limit_even_when_size_lies(tmp_path):
    path = tmp_path / "big.json"
    path.write_bytes(b" " * 1001)
    assert read_bytes(path, "x", 1001) == b" " * 1001
    with pytest.raises(InputError, match="larger than the 1,000-byte limit"):
        read_bytes(path, "x", 1000)


def test_a_file_that_is_not_yaml_keys_is_never_echoed(run_cli, write_scenario, tmp_path):
    shadow = tmp_path / "shadow"
    shadow.write_text(SECRET + "\ndaemon:*:19000:0:99999:7:::\n")
    line = _one_line_exit_2(run_cli("solve", write_scenario(catalog=str(shadow))), str(shadow),
                            "-character key that is not a field name): unknown key")  # the line ends in ':'
    assert "hunter2" not in line and "root" not in line.replace(str(tmp_path), "")
    line = _one_line_exit_2(run_cli("solve", shadow))
    assert "hunter2" not in line and "daemon" not in line
    shadow.write_text("root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1:daemon:/usr/sbin\n")
    line = _one_line_exit_2(run_cli("solve", write_scenario(catalog=str(shadow))), "got plain text (not YAML keys)")
    assert "root" not in line.replace(str(shadow), "")


def test_batch_rows_do_not_store_a_non_yaml_file(run_cli, tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "s.yaml").write_text(SECRET + "\n")
    out = tmp_path / "rows.jsonl"
    run_cli("batch", folder, "-o", out, "--workers", "1")
    text = out.read_text()
    assert '"status": "error"' in text and "hunter2" not in text and "root" not in text.replace(str(tmp_path), "")


@pytest.mark.parametrize("body, says", [
    ('{"hidden_size": ' + "9" * 5000 + "}", "not valid JSON: Exceeds the limit"),
    ("[" * 50_000 + "]" * 50_000, "nested too deeply"),
    ("[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1), f"nested deeper than {MAX_JSON_DEPTH} levels"),
    ('{"a": 1,}', "line 1, column 9: not valid JSON"),
])  # fmt: skip
def test_pathological_json_is_one_error(body, says, tmp_path):
    path = tmp_path / "config.json"
    path.write_text(body)
    with pytest.raises(InputError, match=says.replace("(", r"\(")):
        read_json(path, str(path))


def test_a_huge_config_field_is_a_capped_string_error(tmp_path, run_cli, write_scenario):
    cfg = {
        "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_hidden_layers": 2,
        "vocab_size": 1000, "_name_or_path": "n" * 300_000}  # fmt: skip
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    line = _one_line_exit_2(run_cli("solve", write_scenario(model={"hf_config": str(path)})), "_name_or_path",
                            "at most 256 characters, got 300,000")
    assert len(line) < 400


def test_trainer_state_with_a_huge_integer_names_the_field(tmp_path):
    path = tmp_path / "trainer_state.json"
    path.write_text('{"log_history": [{"train_runtime": 1, "train_samples_per_second": ' + "7" * 4000 + "}]}")
    run = yaml.safe_load((REPO / "tests/data/measurements/run_scenario.yaml").read_text())
    with pytest.raises(InputError, match=r"train_samples_per_second: expected a positive finite number, got 7777"):
        from_trainer_state(path, run)


@pytest.mark.parametrize("count", ["0.5", "0", "inf", "-8", "nan", "1e400"])
def test_skypilot_rows_with_an_impossible_accelerator_count_are_skipped(count, tmp_path):
    bad = ROWS[0].replace("L40S,4.0,", f"L40S,{count},", 1)
    path = tmp_path / "vms.csv"
    path.write_text("\n".join([HEADER, bad, ROWS[1]]) + "\n")
    text, result = import_text([path], tmp_path / "out.yaml", "aws")
    offers = yaml.safe_load(text)["offers"]
    assert [o["gpu"] for o in offers] == ["H200"] and offers[0]["cards_per_node"] == 8
    assert result.skipped == {"L40S: AcceleratorCount is not a whole number of cards from 1 to 1024": 1}


@pytest.mark.parametrize("content, says", [
    (HEADER.encode() + b"\n" + ROWS[0].encode().replace(b"us-west-2", b"us-\xff"), "not UTF-8 text"),
    (HEADER.encode() + b"\n" + ROWS[0].encode().replace(b"us-west-2", b"x" * (129 * 1024)),
     "line 2: not a readable CSV row: field larger than field limit"),
])  # fmt: skip
def test_skypilot_files_that_cannot_be_read_are_one_error(content, says, tmp_path, run_cli):
    path = tmp_path / "vms.csv"
    path.write_bytes(content)
    out = tmp_path / "out.yaml"
    _one_line_exit_2(run_cli("catalog", "import", "skypilot", path, "--cloud", "aws", "-o", out), says)
    assert not out.exists()


@pytest.mark.parametrize("name", ["[/x]", "[bold]x", "a\\"])
def test_markup_in_names_prints_as_data(name, run_cli, write_scenario):
    doc = scenario_doc(name=name, plan={"gpu": "A100-80G", "cards": 1})
    result = run_cli("solve", write_scenario(doc=doc))
    assert result.exit_code == 0, result.stdout
    assert result.stdout.splitlines()[0].startswith(name + ":")


@pytest.mark.parametrize("name,char,at", [("a\x1b[2Jb", "001B", 2), ("two\nlines", "000A", 4), ("tab\tx", "0009", 4),
                                          ("c1\x9b31m", "009B", 3), ("del\x7f", "007F", 4), ("rl\u202eo", "202E", 3),
                                          ("ls\u2028x", "2028", 3), ("zw\u200bj", "200B", 3)])  # fmt: skip
@pytest.mark.parametrize("where", ["name", "model.name"])
def test_control_characters_in_a_name_are_refused_with_one_line(name, char, at, where, run_cli, write_scenario,
                                                                tmp_path):  # fmt: skip
    # an ESC in the name was escaped on the terminal but reached the HTML report raw
    model = {"name": name, "layers": 2, "hidden": 64, "intermediate": 128, "heads": 4, "kv_heads": 4, "vocab": 1000}
    doc = scenario_doc(name=name) if where == "name" else scenario_doc(model=model)
    path = write_scenario(doc=doc)
    result = run_cli("solve", path, "--html", tmp_path / "r.html")
    line = _one_line_exit_2(result, f"{where}: control character U+{char} at character {at} is not allowed; allowed: "
                            "one line of printable text, up to 256 characters")  # fmt: skip
    assert line.startswith(f"ftopt: error: {path}: ") and "\x1b" not in line and not (tmp_path / "r.html").exists()


def test_a_file_name_that_names_the_scenario_is_held_to_the_same_rule(run_cli, write_scenario, tmp_path):
    """Without name: the file's stem names the scenario (in the HTML title too): an ESC there is refused, one line."""
    doc = scenario_doc(name=None)
    result = run_cli("solve", write_scenario("x\x1b[31my.yaml", doc=doc), "--html", tmp_path / "r.html")
    line = _one_line_exit_2(result, "name: the file name names the scenario (the file sets no name:): control "
                            "character U+001B at character 2 is not allowed")  # fmt: skip
    assert "\x1b" not in line and not (tmp_path / "r.html").exists()
    assert run_cli("solve", write_scenario("plain-7b.yaml", doc=doc)).exit_code == 0
    cjk = run_cli("solve", write_scenario("cjk.yaml", doc=scenario_doc(name="微调\u3000任务")))
    assert cjk.exit_code == 0  # a full-width space (Zs) is printable text, not a control character


def test_control_characters_in_an_error_are_shown_escaped(run_cli, write_scenario):
    doc = {**scenario_doc(), "bogus": 1}
    line = _one_line_exit_2(run_cli("solve", write_scenario("a\x1b[2Jb.yaml", doc=doc)), "a\\x1b[2Jb.yaml: bogus")
    assert "\x1b" not in line
