"""The served-against-central summary's ratios: each served entry is divided by its own
table and eps's central references, gathered from several reference files, and those
references travel with it; a central cell given twice is refused; a run of served and
central methods together is its own reference."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.accuracy.bench_served_vs_central import against  # noqa: E402


def _entry(table, method, eps, mean):
    return {"table": table, "method": method, "eps": eps, "mean": mean, "sd": 0.0,
            "repeats": 5}


def test_ratios_use_each_tables_own_references_and_carry_them():
    summary = {"command": "served run", "results": [_entry("a", "feddpsyn-default", 1.0, 0.11),
                                                    _entry("b", "feddpsyn-default", 1.0, 0.30)]}
    refs_a = {"command": "run a", "results": [_entry("a", "central-privsyn-pgm", 1.0, 0.10),
                                              _entry("a", "central-aim", 1.0, 0.12),
                                              _entry("c", "central-aim", 1.0, 9.0)]}
    refs_b = {"command": "run b", "results": [{**_entry("b", "central-aim", 1.0, 0.25),
                                               "source": "first.json"},
                                              _entry("b", "feddpsyn-other", 1.0, 0.01)]}
    out = against(summary, [("ra.json", refs_a), ("rb.json", refs_b)])
    by = {(e["table"], e["method"]): e for e in out["results"]}
    assert by["a", "feddpsyn-default"]["ratio_to_best_central"] == pytest.approx(1.1)
    assert by["a", "feddpsyn-default"]["ratio_to_central_privsyn_pgm"] == pytest.approx(1.1)
    assert by["b", "feddpsyn-default"]["ratio_to_best_central"] == pytest.approx(1.2)
    assert "ratio_to_central_privsyn_pgm" not in by["b", "feddpsyn-default"]
    assert by["a", "feddpsyn-default"]["command"] == "served run"
    # The references' central entries are carried with their source; served entries of a
    # reference file and tables the summary does not hold are not.
    assert by["a", "central-aim"]["source"] == "ra.json"
    assert by["a", "central-aim"]["command"] == "run a"
    assert by["a", "central-aim"]["ratio_to_best_central"] == pytest.approx(1.2)
    assert by["b", "central-aim"]["source"] == "first.json"
    assert ("b", "feddpsyn-other") not in by and ("c", "central-aim") not in by
    assert out["references"] == ["ra.json", "rb.json"]


def test_a_central_cell_in_two_references_is_refused():
    summary = {"results": [_entry("a", "feddpsyn-default", 1.0, 0.11)]}
    ref = {"results": [_entry("a", "central-aim", 1.0, 0.10)]}
    with pytest.raises(SystemExit, match="two references"):
        against(summary, [("one.json", ref), ("two.json", ref)])


def test_a_run_of_served_and_central_methods_is_its_own_reference():
    run = {"command": "both", "results": [_entry("a", "feddpsyn-default", 0.3, 0.0756),
                                          _entry("a", "central-privsyn-pgm", 0.3, 0.0725)]}
    aim = {"command": "aim", "results": [_entry("a", "central-aim", 0.3, 0.0791)]}
    out = against(run, [("run.json", run), ("aim.json", aim)])
    by = {e["method"]: e for e in out["results"]}
    assert len(out["results"]) == 3  # the central cell once, from the references
    assert by["feddpsyn-default"]["ratio_to_central_privsyn_pgm"] == pytest.approx(0.0756 / 0.0725)
    assert by["feddpsyn-default"]["ratio_to_best_central"] == pytest.approx(0.0756 / 0.0725)
    assert by["central-privsyn-pgm"]["source"] == "run.json"
    assert by["central-aim"]["ratio_to_best_central"] == pytest.approx(0.0791 / 0.0725)
