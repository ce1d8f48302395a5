"""Shared fixtures, the tests' tiers, and the fast tier's guard.

Data: the bundled data sets beside the project (../shared/data, or ``FEDDPSYN_DATA``).

Ports: the servers the tests start in-process take their ports from
:func:`tests.ports.loopback_port` (distinct within a process and between workers, outside the
kernel's ephemeral range) in place of ``feddpsyn.demo.free_port``, whose bind(0) draws share
the kernel's range with the other worker and with outgoing connections (see
``tests/ports.py``). Set here, before any test module imports the name. Servers started by a
``feddpsyn`` subprocess still draw their own.

Tiers: :data:`TIERS` marks the tests that compile an FHE circuit or generate keys (``fhe``),
start a server (``served``) or take more than about 10 s otherwise (``slow``); the markers
are registered in pyproject.toml. ``./dev test-fast`` runs the rest. It sets
``FEDDPSYN_TEST_TIER=fast``, under which compiling a circuit, generating keys, starting a
server process or listening on a socket fails the test at once with the marker it needs, so a
new heavy test cannot slip into the fast tier unmarked.
"""

from __future__ import annotations

import functools
import os
import socket
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

import feddpsyn.demo
from tests.ports import loopback_port

feddpsyn.demo.free_port = loopback_port

# The suite's two workers share the machine's cores as equals: key servers started here (in
# process or as server processes, which inherit this) give their offline workers the
# scheduler's fair share, not the deployed niceness, so a test that waits for the offline job
# is not starved by the other worker's circuits. tests/servers/test_offline_pool.py checks
# the niceness itself.
os.environ.setdefault("FEDDPSYN_OFFLINE_NICENESS", "0")

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("FEDDPSYN_DATA", ROOT.parent / "shared" / "data"))

# Marker -> module under tests/ -> its tests with that marker: a test's name (all its
# parameters) or name[parameters] (that one), or ALL. Measured with
# ``pytest -n 2 --durations=0``, and checked by the fast tier's guard (module docstring).
ALL = ["*"]
TIERS: dict[str, dict[str, list[str]]] = {
    "fhe": {
        "test_walkthrough": ALL,
        "test_tls": ALL,
        "test_absent_owner": ALL,
        "test_aggregation": ALL,
        "test_api_fuzz": ALL,
        "test_bench_joint_noise": ALL,
        "test_bench_joint_scores": ALL,
        "test_dask_executor": ALL,
        "test_executor_releases": ALL,
        "test_fedbench_methods": ["test_the_simulated_p1_is_the_circuit_bit_for_bit"],
        "test_indif": ALL,
        "test_joint_noise": [
            "test_release_decrypts_to_count_plus_joint_noise",
            "test_extreme_bits_and_negative_results",
            "test_cells_of_one_chunk_carry_different_shapes_exactly",
            "test_circuit_is_leveled_at_the_count_width",
            "test_encrypted_noise_given_the_compute_servers_bits",
        ],
        "test_joint_release_servers": ALL,
        "test_load_and_faults": ALL,
        "test_noisy_scores": ALL,
        "test_noisy_scores_joint": ALL,
        "test_offline_pool": [
            "test_two_workers_store_what_one_worker_stores",
            "test_every_stored_ciphertext_decrypts_to_the_uploads_and_to_bits",
            "test_a_worker_that_dies_fails_the_pass_and_the_next_pass_recovers",
            "test_only_the_key_files_place_crosses_to_a_worker",
            "test_a_request_for_a_chunk_being_encrypted_waits_for_it_instead_of_redoing_it",
            "test_the_status_counts_the_offline_jobs_sets",
        ],
        "test_peer_answers_during_jobs": ALL,
        "test_private_selection": ALL,
        "test_selection": [
            "test_bootstrap_count_bounds_the_compiled_count",
            "test_circuit_is_bit_identical_to_the_model_and_samples_the_fixed_point_pf",
            "test_inactive_candidates_are_never_chosen_and_random_scores_agree",
        ],
        "test_selection_batches": [
            "test_batched_bootstrap_count_bounds_the_compiled_counts",
            "test_batched_round_equals_the_single_call_and_the_model",
        ],
        "test_selection_views": ALL,
        "test_servers": ALL,
        "test_servers_replace": ALL,
        "test_servers_noisy_greedy": ALL,
        "test_servers_selection": ALL,
        "test_session_preparation": [
            "test_post_answers_202_before_the_preparation_and_uploads_wait_for_ready",
            "test_a_peer_request_is_answered_while_a_preparation_runs",
            "test_session_create_waits_with_progress_or_returns_at_once",
            "test_a_real_compile_does_not_stall_the_server",
            "test_a_saturated_server_answers_202_within_a_second_stops_on_sigterm_and_resumes",
            "test_the_joint_noise_sets_are_made_while_the_module_compiles",
            "test_a_failed_preparation_drops_the_sets_it_made",
        ],
    },
    "served": {
        "test_walkthrough": ALL,
        "test_tls": ALL,
        "test_absent_owner": ALL,
        "test_versions": [
            "test_an_agent_refuses_a_key_server_of_another_version",
            "test_a_compute_server_of_another_version_is_refused_at_its_first_peer_call",
        ],
        "test_session_limits": [
            "test_a_million_categories_are_refused_at_once_by_a_real_server",
        ],
        "test_api_fuzz": ALL,
        "test_dask_executor": ALL,
        "test_executor_releases": ALL,
        "test_demo_and_cli": [
            "test_start_servers_stops_the_key_server_when_the_compute_server_never_comes_up",
        ],
        "test_distaim_bench": ALL,
        "test_distaim_loopback": ALL,
        "test_distaim_malicious": ALL,
        "test_distaim_operator": ALL,
        "test_joint_release_servers": ALL,
        "test_load_and_faults": ALL,
        "test_peer_answers_during_jobs": ALL,
        "test_servers": ALL,
        "test_servers_replace": ALL,
        "test_servers_noisy_greedy": ALL,
        "test_servers_selection": ALL,
        "test_session_preparation": [
            "test_post_answers_202_before_the_preparation_and_uploads_wait_for_ready",
            "test_a_peer_request_is_answered_while_a_preparation_runs",
            "test_session_create_waits_with_progress_or_returns_at_once",
            "test_a_real_compile_does_not_stall_the_server",
            "test_a_saturated_server_answers_202_within_a_second_stops_on_sigterm_and_resumes",
        ],
    },
    "slow": {
        "test_aim": ["test_fast_answers_equal_mbi_projection"],
        "test_binomial_accounting": [
            "test_mixed_composition_and_truncation_stay_pessimistic",
            "test_smallest_n_is_the_smallest_even_n",
        ],
        "test_demo_and_cli": [
            "test_adult_as_a_user_table_is_the_bundled_adult_demo",
            "test_bench_runs_every_method_on_a_user_table",
            "test_demo_and_bench_refuse_bad_user_tables_by_name_row_and_column",
            "test_demo_on_a_table_written_by_the_test",
            "test_demo_writes_the_report_and_a_synthetic_table",
            "test_demo_refuses_a_non_empty_output_directory",
            "test_synthesize_command_on_the_demo_release",
            "test_synthesize_refuses_a_mismatched_schema_and_bad_files",
        ],
        "test_discrete_gaussian": ["test_log_ratio_of_neighbouring_outputs_is_the_gaussian_one"],
        "test_distaim_app": ["test_demo_end_to_end"],
        "test_distaim_noise": ["test_in_mpc_gaussian_matches_distribution_and_std"],
        "test_distaim_selection": ["test_em_frequencies_match_softmax"],
        "test_feddpsyn_sim_split": ALL,
        "test_fedbench_aim_flaim": ["test_method_spends_exactly_its_budget_and_stays_in_domain"],
        "test_fedbench_methods": [
            "test_each_method_spends_exactly_its_budget[feddpsyn-served]",
            "test_each_method_spends_exactly_its_budget[feddpsyn-served-all]",
            "test_each_method_spends_exactly_its_budget[feddpsyn-served-all-pgm]",
            "test_each_method_spends_exactly_its_budget[feddpsyn-served-noisy-greedy]",
            "test_each_method_spends_exactly_its_budget[feddpsyn-served-pgm]",
            "test_runner_in_worker_processes_keeps_row_order_and_plots_heterogeneity",
            "test_runner_writes_results_summary_and_plots",
        ],
        "test_cli_parameters": ALL,
        "test_free_port": ALL,
        # The exact enumerations: minutes on a loaded machine, so in the full suite only.
        "test_gaussian_bound": [
            "test_every_selection_is_within_the_bound_by_enumeration",
            "test_the_bounded_plan_spends_the_eps_asked",
        ],
        "test_joint_noise_accounting": [
            "test_fed_heart_demo_session_keeps_its_epsilon_with_joint_noise",
        ],
        "test_mirror_descent": ["test_converged_fit_matches_mbi_run_long"],
        "test_offline_pool": [
            "test_noise_bits_are_drawn_in_each_worker_and_never_twice",
            "test_a_stuck_task_and_a_stopping_server_end_the_map",
        ],
        "test_noise_plan": [
            "test_auto_at_eps_1_gives_every_release_one_joint_noise_of_lower_variance",
            "test_every_selection_gets_privsyns_split_with_matched_shapes_by_enumeration",
            "test_large_eps_stays_two_server_and_strict_joint_refuses_with_the_reason",
            "test_noisy_greedys_two_way_is_split_with_an_envelope_and_the_worst_case_reserve",
        ],
        "test_preprocess": ["test_the_whole_adult_file_encodes_without_errors"],
        "test_privacy_record": [
            "test_an_auditor_finds_the_plan_spends_the_eps_asked",
            "test_the_ledger_reports_the_records_eps_once_everything_is_charged",
        ],
        "test_selection": ["test_model_frequencies_match_the_exact_distribution"],
        "test_session_preparation": ["test_a_real_compile_does_not_stall_the_server"],
    },
}


# The modules whose tests take the longest in all (fixtures included), longest first, as
# measured with ``./dev test --durations=0`` (every module above 10 s; re-measure when a
# served or compiled test is added: an unlisted 100 s module runs last, alone). loadscope
# hands a worker a whole module at a time; its default order (the modules with the most
# tests first) left the served and compiled ones, a few tests and minutes each, to the end,
# where one worker ran the last of them while the other had nothing left. Here the longest
# go first and the many short ones fill in at the end (pytest_configure turns that
# reordering off; pytest_collection_modifyitems sorts). A module not listed runs after
# these, in file order.
LONGEST_FIRST = [
    "test_servers_selection",
    "test_load_and_faults",
    "test_dask_executor",
    "test_demo_and_cli",
    "test_servers_noisy_greedy",
    "test_selection",
    "test_joint_release_servers",
    "test_indif",
    "test_noisy_scores",
    "test_session_preparation",
    "test_absent_owner",
    "test_walkthrough",
    "test_servers",
    "test_offline_pool",
    "test_private_selection",
    "test_api_fuzz",
    "test_selection_batches",
    "test_executor_releases",
    "test_gaussian_bound",
    "test_tls",
    "test_peer_answers_during_jobs",
    "test_fedbench_methods",
    "test_noisy_scores_joint",
    "test_bench_joint_scores",
    "test_selection_views",
    "test_distaim_app",
    "test_servers_replace",
    "test_privacy_record",
    "test_distaim_loopback",
    "test_distaim_bench",
]


TESTS = Path(__file__).resolve().parent


def _in_tests(item: pytest.Item) -> bool:
    """A test of a module under tests/ (its folders by package), not a package's doctest.
    TIERS and LONGEST_FIRST name such modules by their file's stem, unique under tests/."""
    return TESTS in item.path.resolve().parents


def _tiers_of(item: pytest.Item) -> list[str]:
    if not _in_tests(item):
        return []  # a doctest in a package: always quick
    module = item.path.stem
    test = getattr(item, "originalname", None) or item.name.split("[")[0]
    return [mark for mark, modules in TIERS.items()
            if modules.get(module) == ALL or {test, item.name} & set(modules.get(module, []))]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    modules = {}
    for item in items:
        for mark in _tiers_of(item):
            item.add_marker(mark)
        if _in_tests(item) and isinstance(item, pytest.Function):
            modules[item.path.stem] = item.module
    # A renamed or removed test must not leave its tier silently: every test TIERS lists for
    # a collected module is defined in it.
    stale = [f"{name}::{test}" for listed in TIERS.values()
             for name, tests in listed.items() if name in modules and tests != ALL
             for test in tests if not hasattr(modules[name], test.split("[")[0])]
    if stale:
        raise pytest.UsageError(f"tests/conftest.py's TIERS names no such test: {stale}")
    # LONGEST_FIRST's order (a stable sort: each module's tests keep theirs).
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.stem, len(rank))
               if _in_tests(item) else len(rank))


# The fast tier's guard (module docstring): what each forbidden call is, and the marker a
# test that makes it needs.
_TRIPPED: list[str] = []


def _forbid(owner: Any, name: str, what: str, mark: str) -> None:
    original = getattr(owner, name)

    @functools.wraps(original)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        test = os.environ.get("PYTEST_CURRENT_TEST", "?").split(" ")[0]
        message = (f"{test} {what}, which the fast tier does not: mark it {mark!r} in "
                   "tests/conftest.py's TIERS")
        _TRIPPED.append(message)
        pytest.fail(message, pytrace=False)

    setattr(owner, name, guarded)


def pytest_configure(config: pytest.Config) -> None:
    # pytest-xdist's loadscope keeps the collection's order of modules (LONGEST_FIRST).
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False
    if os.environ.get("FEDDPSYN_TEST_TIER") != "fast":
        return
    from concrete import fhe

    _forbid(fhe.Compiler, "compile", "compiles an FHE circuit", "fhe")
    _forbid(fhe.Circuit, "keygen", "generates FHE keys", "fhe")
    _forbid(fhe.Client, "keygen", "generates FHE keys", "fhe")
    _forbid(feddpsyn.demo.ServerProcess, "__init__", "starts a server process", "served")
    _forbid(socket.socket, "listen", "listens on a socket (starts a server)", "served")


@pytest.fixture(autouse=True)
def _fast_tier_guard() -> Any:
    """Fails a test whose forbidden call was made in another thread (a server's worker), where
    the guard's own failure does not reach the test."""
    before = len(_TRIPPED)
    yield
    if len(_TRIPPED) > before:
        pytest.fail(_TRIPPED[before], pytrace=False)


@pytest.fixture(scope="session")
def data_dir() -> Path:
    if not DATA.exists():
        pytest.fail(f"bundled data not found at {DATA} (set FEDDPSYN_DATA)")
    return DATA


def start_cluster():
    """A local Dask cluster of two worker processes on loopback, and its client."""
    from distributed import Client, LocalCluster

    # concrete preloaded: each worker imports it while the test process compiles.
    cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                           host="127.0.0.1", scheduler_port=0, dashboard_address=None,
                           silence_logs=40, preload=["concrete.fhe"])
    return cluster, Client(cluster)


@pytest.fixture(scope="module")
def booting_cluster():
    """The cluster's start (one per module that asks), under way in a thread while the
    module compiles its circuits; joined by ``dask_cluster``."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        future = pool.submit(start_cluster)
        yield future
        cluster, client = future.result()
        client.close()
        cluster.close()


@pytest.fixture(scope="module")
def dask_cluster(booting_cluster):
    return booting_cluster.result(timeout=120)[1]
