"""Benchmark methods: budgets, the simulation's equality with the circuit, and the runner."""

import csv
import secrets

import numpy as np
import pytest
from concrete import fhe

from feddpsyn.crypto.aggregation import compile_aggregation
from feddpsyn.crypto.masking import expand_masks, mask_counts, new_seed
from feddpsyn.fedbench.methods import METHODS
from feddpsyn.fedbench.methods.feddpsyn_sim import p1_release_model
from feddpsyn.fedbench.runner import Setting, read_results, run_utility
from feddpsyn.params.schema import Schema

SCHEMA = Schema.from_dict({"columns": [
    {"name": "a", "type": "categorical", "i2s": ["x", "y", "z"]},
    {"name": "b", "type": "continuous", "min": 0, "max": 9, "bins": 3},
    {"name": "label", "type": "categorical", "i2s": ["no", "yes"]}]})


def test_the_simulated_p1_is_the_circuit_bit_for_bit():
    k, cells, n = 16, 32, 3
    circuit = compile_aggregation(n, cells, k, 2.0 ** -40)
    client = fhe.Client(circuit.client.specs)
    client.keys.generate(secret_seed=secrets.randbits(128), encryption_seed=secrets.randbits(128))
    rng = np.random.default_rng(0)
    counts = [rng.integers(0, 2000, cells) for _ in range(n)]
    masks = [expand_masks(new_seed(), "s", f"c{i}", cells, k) for i in range(n)]
    masked = [mask_counts(c, m, k) for c, m in zip(counts, masks)]
    noise = rng.integers(-300, 300, cells)
    model, offset = p1_release_model(masked, np.sum(masks, axis=0), noise, k)
    encrypted = []
    for i, m in enumerate(masked):
        args = [None] * (n + 2)
        args[i] = m
        encrypted.append(client.encrypt(*args)[i])
    out = circuit.server.run(*encrypted, np.ones(cells, dtype=np.int64), offset,
                             evaluation_keys=client.evaluation_keys)
    assert (client.decrypt(out) == model).all()


@pytest.mark.parametrize("method", sorted(METHODS))
def test_each_method_spends_exactly_its_budget(method):
    rng = np.random.default_rng(1)
    records = np.stack([rng.integers(0, 3, 400), rng.integers(0, 3, 400),
                        rng.integers(0, 2, 400)], axis=1)
    owner = rng.integers(0, 3, 400)
    result = METHODS[method](records, owner, SCHEMA, 1.0, 1e-6, seed=0)
    assert result.rho_spent <= result.rho_budget
    if result.unspent_reason:  # says why it spends less (the runner's rule)
        if not result.notes.get("selected_pairs", True):
            # noisy-greedy's noisy scores kept no pair on this tiny table (the noise is from
            # the OS; measured for each simulated noisy-greedy method here: 0.1-0.4% of
            # runs): the 2-way share is not released, and the method says so. The method's
            # selection, not its name: the default and the top-up are noisy-greedy too.
            assert result.notes.get("selection") == "noisy-greedy", method
            assert "kept no pair" in result.unspent_reason
            return
        # A served plan (the default is one) reserves delta for its failure terms.
        assert method.startswith(("feddpsyn-served", "feddpsyn-default"))
        assert result.rho_spent >= result.rho_budget * 0.99
        return
    # Exactly, up to rounding *down* where a conversion is irrational (MST's sqrt for PF).
    assert result.rho_budget - result.rho_spent <= result.rho_budget * 1e-9
    assert result.records.shape[1] == 3 and len(result.records) > 0


def _toy_table(tmp_path, seed: int, rows: int):
    """A CSV of SCHEMA's columns with ``rows`` random rows, for the runner's tests."""
    path = tmp_path / "t.csv"
    rng = np.random.default_rng(seed)
    lines = ["a,b,label"] + [f"{'xyz'[rng.integers(3)]},{rng.integers(10)},"
                             f"{['no', 'yes'][rng.integers(2)]}" for _ in range(rows)]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_runner_writes_results_summary_and_plots(tmp_path):
    path = _toy_table(tmp_path, seed=2, rows=600)
    out = tmp_path / "bench"
    # Three methods suffice for the runner's bookkeeping (every method has its own test).
    methods = ["central-privsyn", "concat", "feddpsyn"]
    results = run_utility(path, SCHEMA, "label", methods, [1.0, 4.0],
                          [Setting(2, "uniform", None), Setting(3, "uniform", None)], 1, out,
                          delta=1e-6, say=lambda _: None)
    assert len(results) == len(methods) * 2 * 2
    with (out / "results.csv").open() as fh:
        assert len(list(csv.DictReader(fh))) == len(results)
    summary = (out / "summary.md").read_text()
    assert "| uniform |" in summary and "Lowest two-way error per setting" in summary
    # results.csv reads back into the same rows (what `feddpsyn bench summary` re-plots from)
    again = read_results(out / "results.csv")
    assert [(r["method"], r["eps"], r["clients"], r["two_way"]) for r in again] == [
        (r["method"], r["eps"], r["clients"], r["two_way"]) for r in results]
    assert (out / "error_vs_eps.png").stat().st_size > 0
    assert (out / "error_vs_clients.png").stat().st_size > 0


def test_runner_in_worker_processes_keeps_row_order_and_plots_heterogeneity(tmp_path):
    path = _toy_table(tmp_path, seed=3, rows=400)
    out = tmp_path / "bench"
    settings = [Setting(2, "uniform", None), Setting(2, "dirichlet", 0.5)]
    results = run_utility(path, SCHEMA, "label", ["central-privsyn", "concat"], [1.0],
                          settings, 1, out, delta=1e-6, say=lambda _: None, jobs=2)
    # Same order as the sequential loop: setting-major, then method.
    assert [(r["partition"], r["method"]) for r in results] == [
        ("uniform", "central-privsyn"), ("uniform", "concat"),
        ("dirichlet", "central-privsyn"), ("dirichlet", "concat")]
    assert all(r["rho_spent"] <= r["rho_budget"] for r in results)
    assert (out / "error_vs_heterogeneity.png").stat().st_size > 0
    assert not (out / "results.partial.csv").exists()  # finished: only results.csv remains


def test_runner_refuses_a_method_that_underspends_without_saying_why():
    from fractions import Fraction

    from feddpsyn.fedbench.methods import MethodResult
    from feddpsyn.fedbench.runner import check_budget

    records = np.zeros((1, 3), dtype=np.int64)
    check_budget("m", MethodResult(records, Fraction(1, 3), Fraction(1, 3)))
    check_budget("m", MethodResult(records, 1 / 3 * (1 - 1e-12), Fraction(1, 3)))
    with pytest.raises(RuntimeError, match="claims to spend its budget"):
        check_budget("m", MethodResult(records, Fraction(1, 4), Fraction(1, 3)))
    check_budget("m", MethodResult(records, Fraction(1, 4), Fraction(1, 3),
                                   unspent_reason="greedy selected no pair"))
    with pytest.raises(RuntimeError, match="overspent"):
        check_budget("m", MethodResult(records, Fraction(1, 3) + Fraction(1, 10 ** 15),
                                       Fraction(1, 3), unspent_reason="x"))


def test_central_privsyn_selects_dependent_pairs_and_mst_compresses_rare_values():
    from feddpsyn.fedbench.methods.central_mst import compression_map, undo_compression
    from feddpsyn.fedbench.methods.central_privsyn import central_privsyn

    rng = np.random.default_rng(3)
    a = rng.integers(0, 3, 4000)
    records = np.stack([a, a, rng.integers(0, 2, 4000)], axis=1)  # b's bin = a's value
    result = METHODS["central-privsyn"](records, np.zeros(4000, dtype=int), SCHEMA, 2.0,
                                        1e-6, seed=0)
    # The dependent pair's InDif (~5,300) is far above the selection's noise, so it is always
    # chosen, first; the independent pairs' scores are noise-sized and the CSPRNG may let the
    # greedy rule keep one of them too.
    assert result.notes["selected_pairs"][0] == (0, 1)
    assert result.rho_spent == result.rho_budget
    assert central_privsyn is METHODS["central-privsyn"]
    mapping = compression_map(np.array([500, 2, -3, 400, 1]), sigma=5.0)
    assert mapping.tolist() == [0, 2, 2, 1, 2]
    back = undo_compression(np.array([2] * 3000 + [0, 1]), mapping, rng)
    assert set(back[:3000]) == {1, 2, 4} and back[-2:].tolist() == [0, 3]
    # the averaging decoder keeps a mixture's 1-way proportions (argmax kept only its mode)
    from feddpsyn.fedbench.methods.cape_dpcda import decode_mixtures
    out = decode_mixtures(np.array([[70, 30, 0]]), (3,), np.array([1]), [20000], rng)
    share = np.bincount(out[:, 0], minlength=3) / 20000
    assert abs(share[0] - 0.7) < 0.02 and share[2] == 0 and set(out[:, 1]) == {1}


def test_simulated_joint_release_carries_the_shapes_variance():
    """The simulation's joint release (both servers' bits through the circuit's integer model,
    decoded as the key server would): published - true over 20,000 cells has mean 0 and the
    shape's variance, within the 4.9-sigma bounds of a two-sided test at alpha = 1e-6 (the
    sample variance of a near-Gaussian noise has relative sd sqrt(2 / n))."""
    from feddpsyn.dp.joint_noise_accounting import JointNoiseShape
    from feddpsyn.fedbench.methods.feddpsyn_sim import joint_release_model
    k, cells, clients = 20, 20_000, 3
    shape = JointNoiseShape(uniforms=24, bits=5)
    rng = np.random.default_rng(4)
    counts = [rng.integers(0, 3000, cells) for _ in range(clients)]
    masks = [expand_masks(new_seed(), "s", f"c{i}", cells, k) for i in range(clients)]
    masked = [mask_counts(c, m, k) for c, m in zip(counts, masks)]
    error = joint_release_model(masked, np.sum(masks, axis=0), shape, k) - np.sum(counts, 0)
    assert abs(error).max() <= shape.span // 2
    sd = float(shape.variance) ** 0.5
    assert abs(error.mean()) <= 4.9 * sd / cells ** 0.5
    assert abs(error.var() / float(shape.variance) - 1) <= 4.9 * (2 / cells) ** 0.5


def test_noisy_greedy_joint_scores_and_releases_carry_one_noise_each_within_delta():
    """feddpsyn-noisy-greedy-joint: the scores' joint noise is matched to the selection's rho
    over every pair, the session's delta at the requested eps (conditioning rule over every
    order, failure masses included) is within the requested delta, and it spends the budget."""
    from feddpsyn.dp.joint_noise_accounting import JointNoiseShape
    from feddpsyn.fedbench.methods.feddpsyn_sim import joint_session_delta
    rng = np.random.default_rng(5)
    records = np.stack([rng.integers(0, 3, 600), rng.integers(0, 3, 600),
                        rng.integers(0, 2, 600)], axis=1)
    owner = rng.integers(0, 3, 600)
    result = METHODS["feddpsyn-noisy-greedy-joint"](records, owner, SCHEMA, 1.0, 1e-6, seed=0)
    shapes = result.notes["joint_shapes"]
    assert shapes[0][2] == 3 and shapes[1][2] == 3  # the 1-ways, then the 3 pairs' scores
    if not result.notes["selected_pairs"]:
        # The noisy scores kept no pair (about 2.5e-4 of runs on this table: the noise is from
        # the OS): no 2-way release, and the method says why it spends less; the session is
        # still within delta with exactly its two joint parts.
        assert "kept no pair" in result.unspent_reason and len(shapes) == 2
        assert result.rho_spent < result.rho_budget
        assert result.notes["session_delta"] <= 1e-6
        parts = [(JointNoiseShape(u, b), m) for u, b, m in shapes]
        assert joint_session_delta(parts, 0, 1.0) == result.notes["session_delta"]
        return
    # A kept pair's release is joint, or (one pair at a large rho) keeps its two Gaussians.
    fallbacks = result.notes.get("two_server_fallbacks", [])
    assert len(shapes) + len(fallbacks) == 2 + bool(result.notes["selected_pairs"])
    assert result.notes["session_delta"] <= 1e-6
    assert result.rho_spent == result.rho_budget
    parts = [(JointNoiseShape(u, b), m) for u, b, m in shapes]
    if not fallbacks:
        assert joint_session_delta(parts, 0, 1.0) == result.notes["session_delta"]
    # Halving the noise of every part must break the session's delta (the check has teeth).
    weak = [(JointNoiseShape(max(2, s.uniforms // 2 // 2 * 2), s.bits), m) for s, m in parts]
    assert joint_session_delta(weak, 0, 1.0) > 1e-6


def test_a_one_pair_joint_release_whose_edge_outweighs_delta_keeps_two_gaussians(monkeypatch):
    """noisy-greedy keeping a single pair gives its 2-way release the whole 2-way rho over one
    marginal: the shape matching that curve is two 4-bit uniforms, whose edge (mass 1/256)
    only one neighbour can produce. The simulation refused the session (delta 0.0039 > 1e-5)
    once in ~30 runs on a small user table; as the servers' rule, the release now keeps its
    two Gaussians, composed as zCDP, and the session is within delta."""
    import feddpsyn.fedbench.methods.feddpsyn_sim as sim
    from feddpsyn.crypto.joint_noise import choose_shape
    from feddpsyn.dp.joint_noise_accounting import release_marginals

    schema = Schema.from_dict({"columns": [
        {"name": "a", "type": "categorical", "i2s": ["x", "y", "z"]},
        {"name": "b", "type": "continuous", "min": 0, "max": 9, "bins": 10},
        {"name": "c", "type": "categorical", "i2s": ["no", "yes"]},
        {"name": "d", "type": "continuous", "min": 0, "max": 1, "bins": 8}]})
    rng = np.random.default_rng(3)
    records = np.stack([rng.integers(0, n, 320) for n in (3, 10, 2, 8)], axis=1)
    owner = np.arange(320) % 2
    monkeypatch.setattr(sim, "simulate_selection", lambda *a, **k: [(1, 2)])
    # The case needs the 2-way release's budget at PrivSyn's 80% of rho: a one-pair group
    # whose matching shape's edge is too heavy at that budget.
    from feddpsyn.params.modes import SelectionMode
    monkeypatch.setitem(sim.DEFAULT_SPLITS, SelectionMode.NOISY_GREEDY,
                        {"one_way": 0.1, "selection": 0.1, "two_way": 0.8})
    result = sim.feddpsyn_noisy_greedy_joint(records, owner, schema, 1.0, 1e-5, seed=0)
    assert result.notes["selected_pairs"] == [(1, 2)]
    [why] = result.notes["two_server_fallbacks"]
    assert why.startswith("two_way_0: the matching joint shape (2 x 4-bit): "
                           "its conditioning mass 0.0039")
    assert [m for _, _, m in result.notes["joint_shapes"]] == [4]  # the 1-ways only
    assert result.notes["session_delta"] <= 1e-5
    assert result.rho_spent == result.rho_budget
    # The refusal has teeth: the uncapped shape's edge alone is far above delta.
    plan = sim.SessionPlan.build(sim.PlanRequest(schema, 1.0, 1e-5, 320,
                                                 split={"one_way": 0.1, "two_way": 0.8},
                                                 noise="two-server", selection="none"))
    spec = sim.ReleaseSpec("two_way", ((1, 2),), plan.release("two_way").rho,
                           sim.gaussian_sigma2(plan.release("two_way").rho, 1))
    shape = choose_shape(release_marginals(spec.rho, spec.sigma2), spec.rho, plan.rho_total,
                         plan.delta_conversion, sim.JOINT_TAIL)
    assert shape.pair().failure(sim.JOINT_TAIL) > 1e-3
    assert sim.joint_shape(plan, spec)[0] is None


def test_privsyn_allocation_shares_the_two_way_rho_exactly_by_pair_size():
    """allocation_groups: one release per pair size, the groups' rho adding to exactly the
    2-way rho, each pair's sigma2 = M / (2 rho_group) equal to PrivSyn's W / (2 rho w_i)."""
    from fractions import Fraction

    from feddpsyn.dp.accounting import gaussian_sigma2
    from feddpsyn.fedbench.methods.central_privsyn import allocation_weight
    from feddpsyn.fedbench.methods.feddpsyn_sim import allocation_groups
    cells = {(0, 1): 90, (0, 2): 100, (1, 2): 90, (0, 3): 420}
    chosen = [(0, 1), (0, 3), (1, 2)]
    rho_two = Fraction(3, 1000)
    groups = allocation_groups(cells, chosen, rho_two)
    assert sum(rho for _, rho in groups) == rho_two
    assert sorted(p for pairs, _ in groups for p in pairs) == sorted(chosen)
    total = sum(allocation_weight(cells[p]) for p in chosen)
    for pairs, rho in groups:
        assert len({cells[p] for p in pairs}) == 1
        for p in pairs:
            assert gaussian_sigma2(rho, len(pairs)) == total / (2 * rho_two
                                                                 * allocation_weight(cells[p]))


def test_the_envelope_what_if_widens_the_split_release_and_restores_the_set(monkeypatch):
    """feddpsyn-default@envelope=<bits>: the session's plan is built with the wider envelope
    (its 2-way envelope may carry more encrypted bits a count, its calls at most the cap's
    bits), and the default parameter set is the same after it as before."""
    from feddpsyn.fedbench.methods import feddpsyn_served
    from feddpsyn.params.noise_rules import JOINT_MAX_BITS_PER_CALL
    from feddpsyn.params.parameter_sets import PARAMETER_SETS

    built = []
    real = feddpsyn_served.served_plan

    def spy(*args, **kwargs):
        plan = real(*args, **kwargs)
        built.append(plan)
        return plan
    monkeypatch.setattr(feddpsyn_served, "served_plan", spy)
    before = PARAMETER_SETS["default"]
    rng = np.random.default_rng(8)
    records = np.stack([rng.integers(0, 3, 900), rng.integers(0, 3, 900),
                        rng.integers(0, 2, 900)], axis=1)
    owner = rng.integers(0, 3, 900)
    result = feddpsyn_served.default_at_envelope_bits(512)(records, owner, SCHEMA, 1.0, 1e-5,
                                                           seed=1)
    assert PARAMETER_SETS["default"] is before
    assert built and all(p.parameters.envelope_bits == 512 for p in built)
    assert all(p.parameters.chunk_cells * 512 <= JOINT_MAX_BITS_PER_CALL for p in built)
    assert result.rho_spent <= result.rho_budget


def test_runner_resumes_from_an_interrupted_runs_rows(tmp_path):
    path = _toy_table(tmp_path, seed=5, rows=300)
    settings = [Setting(2, "uniform", None), Setting(2, "dirichlet", 0.5)]
    first = run_utility(path, SCHEMA, "label", ["central-privsyn"], [1.0], settings, 2,
                        tmp_path / "first", delta=1e-6, say=lambda _: None)
    # An interrupted run: its partial file holds the first three tasks only.
    partial = tmp_path / "partial.csv"
    lines = (tmp_path / "first" / "results.csv").read_text().splitlines()
    partial.write_text("\n".join(lines[:4]) + "\n")
    said: list[str] = []
    again = run_utility(path, SCHEMA, "label", ["central-privsyn", "concat"], [1.0], settings,
                        2, tmp_path / "again", delta=1e-6, say=said.append, resume=partial)
    assert any("3 of 8 tasks taken from" in s for s in said)
    assert sum(s.startswith("[bench] central-privsyn") for s in said) == 4  # 3 kept, 1 run
    # The kept rows are the earlier run's, in the new run's order and types.
    kept = [r for r in again if r["method"] == "central-privsyn"][:3]
    assert [(r["repeat"], r["partition"], r["two_way"]) for r in kept] == [
        (r["repeat"], r["partition"], r["two_way"]) for r in first[:3]]
    assert len(again) == 8 and all(isinstance(r["clients"], int) for r in again)
    with pytest.raises(ValueError, match="not a benchmark's results file"):
        bad = tmp_path / "bad.csv"
        bad.write_text("x,y\n1,2\n")
        run_utility(path, SCHEMA, "label", ["concat"], [1.0], settings, 1, tmp_path / "bad",
                    say=lambda _: None, resume=bad)
