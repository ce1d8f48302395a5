"""``feddpsyn params`` reports each selection set's plan with its accounted privacy."""

import json

from typer.testing import CliRunner

from feddpsyn.cli import app


def test_params_reports_the_plans_pld_figure_for_em_and_noisy_greedy():
    runner = CliRunner()
    em = runner.invoke(app, ["params", "--selection", "em", "--rounds", "4", "--json"])
    assert em.exit_code == 0, em.output
    for row in json.loads(em.output):
        assert row["accounting"] == "pld"
        assert 0.97 <= row["epsilon_accounted"] <= 1.0
    greedy = runner.invoke(app, ["params", "--selection", "noisy-greedy"])
    assert greedy.exit_code == 0, greedy.output
    # Its split release enters as its Gaussian bound: the plan is calibrated like em's.
    assert "by the exact PLD of every noise" in greedy.output
    assert "split at run time over the kept pairs" in greedy.output


def test_params_defaults_to_the_sessions_selection_and_names_a_wrong_one():
    runner = CliRunner()
    default = runner.invoke(app, ["params", "--json"])
    assert default.exit_code == 0, default.output
    assert {row["mode"] for row in json.loads(default.output)} == {"noisy-greedy"}
    wrong = runner.invoke(app, ["params", "--selection", "greedy"])
    assert wrong.exit_code != 0
    assert "noisy-greedy" in wrong.output and "greedy'" in wrong.output
