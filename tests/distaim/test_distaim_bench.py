"""bench/distaim/bench_distaim.py at a tiny scale: three `feddpsyn distaim serve` processes,
its record of time, bytes and memory per party, and the demo's privacy record."""

import json
import subprocess
import sys
from pathlib import Path

from feddpsyn.distaim_demo import privacy_record

ROOT = Path(__file__).resolve().parents[2]
GREETING = 64  # at most: a connecting party's pid and PRSS keys, before any message


def test_bench_records_time_bytes_and_memory_per_party(tmp_path):
    out = tmp_path / "result.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "distaim" / "bench_distaim.py"),
         "--clients", "6", "--columns", "3", "--bins", "4", "--rounds", "2",
         "--participation", "1", "--timeout", "300", "--out", str(tmp_path / "run"),
         "--json", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(out.read_text())

    setting = result["setting"]
    assert setting["domain_sizes"] == [4, 9, 4] and setting["clients"] == 6
    assert setting["cells_per_client"] == 4 + 9 + 4 + 36 + 16 + 36
    assert result["machine"]["cores"] >= 1 and result["machine"]["cpu_model"]
    assert len(result["machine"]["load_before"]) == 3 and result["commit"]
    assert "bench/distaim/bench_distaim.py --clients 6" in result["command"]
    wall = result["wall_s"]
    assert wall["uploads"] > 0 and 0 < wall["mpc_run"] < wall["total"]

    parties = result["parties"]
    assert sorted(parties) == ["1", "2", "3"]
    for x, party in parties.items():
        assert set(party["phases_s"]) == {"connect", "load_shares", "admission",
                                          "validation", "aim"}
        assert party["phases_s"]["validation"] > 0 and party["phases_s"]["aim"] > 0
        assert party["phases_bytes_sent"]["validation"] > 0
        aim = party["aim"]
        assert [r["round"] for r in aim["rounds"]] == [1, 2]
        assert all(r["select_s"] > 0 and r["measure_s"] > 0 for r in aim["rounds"])
        assert aim["init_one_ways_s"] > 0 and aim["final_fit_s"] >= 0
        assert aim["select_s"] + aim["measure_s"] < party["phases_s"]["aim"]
        assert party["peak_rss_mb"]["mpc_party"] > 0 and party["peak_rss_mb"]["server"] > 0
        assert party["bytes_sent_total"] > 0 and party["bytes_received_total"] > 0
        assert party["bytes_sent_total"] == sum(party["phases_bytes_sent"].values())
        for y in parties:  # what x sent y is what y's connection from x delivered
            if y != x:
                sent, received = party["bytes_sent"][y], parties[y]["bytes_received"][x]
                assert sent <= received <= sent + GREETING
    assert result["bytes_between_parties"] == sum(p["bytes_sent_total"]
                                                  for p in parties.values())

    # the privacy record is the demo's, of the servers' own release
    release = result["release"]
    assert release["identical_at_the_three_servers"] and release["admitted"] == 6
    assert release["clients_read_by_round_T"] == 6
    for x in parties:
        report = json.loads(next((tmp_path / "run" / "state" / f"server{x}").glob(
            "sessions/*/result.json")).read_text())
        assert privacy_record(report, 1.0, 1e-5) == result["privacy"]
    privacy = result["privacy"]
    assert privacy["rounds"] == 2 and abs(privacy["epsilon_spent"] - 1.0) < 1e-6
    assert 0 < privacy["extra_delta"] <= privacy["delta_reserved"] == 1e-8
    utility = result["utility"]
    assert 0 <= utility["central_workload_error"]["two_way"] < 0.05
    assert 0 <= utility["workload_error"]["two_way"] < 0.05
