"""``feddpsyn demo``: four data owners, two real servers on loopback, one synthetic table.

Starts the key server and the compute server as separate processes on 127.0.0.1, splits a
bundled data set over clients, runs every client's masked upload over HTTP, waits for the
servers' encryption job, encrypted aggregation and the two noised releases, synthesizes,
and compares with a centralized run at the same budget.
"""

from __future__ import annotations

import csv
import json
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import httpx
import numpy as np

from feddpsyn.clients.agent import AgentError, ClientAgent
from feddpsyn.common.version import VERSION
from feddpsyn.common import wire
from feddpsyn.common.credentials import new_token
from feddpsyn.common.serving import write_private
from feddpsyn.params.shape_record import shape_of
from feddpsyn.operator_api import SessionError, create_session
from feddpsyn.core_seconds import CoreSeconds
from feddpsyn.peak_memory import PeakMemory
from feddpsyn.progress import ProgressDisplay, Step, session_steps, wait_for
from feddpsyn.params.layout import MarginalLayout
from feddpsyn.params.modes import SelectionMode
from feddpsyn.params.schema import Schema
from feddpsyn.params.operator_bound import stated_max_rows
from feddpsyn.params.plan_request import PlanRequest
from feddpsyn.params.budget_split import default_split
from feddpsyn.params.session_plan import SessionPlan
from feddpsyn.params.table_codec import encode_csv
from feddpsyn.synthesis.central import central_marginals
from feddpsyn.synthesis.evaluate import workload_error
from feddpsyn.synthesis.marginals import NoisyMarginal, marginals_from_release
from feddpsyn.synthesis.synthesize import resolve_method, synthesize

ROOT = Path(__file__).resolve().parents[1]


def data_dir() -> Path:
    return Path(os.environ.get("FEDDPSYN_DATA", ROOT.parent / "shared" / "data"))


@dataclass(frozen=True)
class DemoDataset:
    name: str
    csv: Path
    schema: Path
    natural_column: str | None  # a column naming the owner, if the data has one


def dataset(name: str) -> DemoDataset:
    if name == "fed_heart_disease":
        return DemoDataset(name, data_dir() / "fed_heart_disease" / "fed_heart_disease.csv",
                           Path(__file__).resolve().parent / "params" / "schemas"
                           / "fed_heart_disease.schema.json",
                           "center")
    if name == "adult":
        return DemoDataset(name, data_dir() / "adult" / "adult.csv",
                           data_dir() / "adult" / "adult.schema.json", None)
    raise ValueError(f"unknown dataset {name!r} (fed_heart_disease or adult)")


def user_table(csv_path: Path, schema_path: Path, owner_column: str | None = None
               ) -> DemoDataset:
    """A data owner's own table as a demo data set, checked whole before any server starts
    (errors name this file, its row, line and column, not a split's): the schema loads, the
    owner column (if any) is a column of the file, every row encodes."""
    from feddpsyn.params.table_codec import InvalidValueError, encode_rows, read_csv
    from feddpsyn.params.schema import normalise_text

    schema = Schema.load(schema_path)  # SchemaError (a ValueError) names every problem
    header, rows, lines = read_csv(csv_path)
    header = [normalise_text(h) for h in header]
    owner = normalise_text(owner_column) if owner_column is not None else None
    keep = list(range(len(header)))
    if owner is not None:
        if owner not in header:
            raise InvalidValueError(f"{csv_path}: header (line 1): no column {owner_column!r} "
                                    f"to split by (columns: {', '.join(header)})")
        if owner not in schema.names:
            keep.remove(header.index(owner))
    for r, (row, line) in enumerate(zip(rows, lines), start=1):
        if len(row) != len(header):
            raise InvalidValueError(f"{csv_path}: row {r} (line {line}): has {len(row)} "
                                    f"fields, header has {len(header)}")
    encode_rows([[row[k] for k in keep] for row in rows], [header[k] for k in keep], schema,
                source=str(csv_path), lines=lines)
    return DemoDataset(csv_path.stem, csv_path, schema_path, owner)


def split_csv(ds: DemoDataset, clients: int, out: Path, seed: int) -> list[Path]:
    """Natural split by the owner column when there is one, else uniform at random. An owner
    column the schema does not declare names the owner only: it is left out of the files."""
    from feddpsyn.params.table_codec import read_csv
    from feddpsyn.params.schema import normalise_text

    header, rows, _ = read_csv(ds.csv)
    header = [normalise_text(h) for h in header]
    keep = list(range(len(header)))
    if ds.natural_column is not None:
        col = header.index(ds.natural_column)
        owners = sorted({r[col].strip() for r in rows}, key=lambda v: (len(v), v))
        groups = [[r for r in rows if r[col].strip() == o] for o in owners]
        if ds.natural_column not in Schema.load(ds.schema).names:
            keep.remove(col)
    else:
        rng = np.random.default_rng(seed)
        assignment = rng.integers(0, clients, len(rows))
        groups = [[r for r, a in zip(rows, assignment) if a == i] for i in range(clients)]
    paths = []
    out.mkdir(parents=True, exist_ok=True)
    for i, group in enumerate(groups):
        path = out / f"client{i}.csv"
        with path.open("w", newline="") as fh:
            writer = csv.writer(fh)
            writer.writerow([header[k] for k in keep])
            writer.writerows([r[k] for k in keep] for r in group)
        paths.append(path)
    return paths


# Ports free_port has handed out in this process. Linux picks a bind(0) port at random in its
# ephemeral range, so two successive draws coincide about once in 14,000: the demo's two
# servers (or DistAIM's six ports) would then collide, and the second could not bind.
_PORTS_GIVEN: set[int] = set()
_PORT_TRIES = 64


def free_port() -> int:
    """A loopback port free now and not handed out before by this process."""
    for _ in range(_PORT_TRIES):  # bounded: a repeat has probability ~1e-4 a draw
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _PORTS_GIVEN:
            _PORTS_GIVEN.add(port)
            return port
    raise RuntimeError(f"no loopback port not already given out in {_PORT_TRIES} draws")


class ServerProcess:
    """A server started as its own process, stopped on exit."""

    def __init__(self, args: list[str], log_path: Path, url: str):
        self.url = url
        self.log_path = log_path
        self._log = log_path.open("ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "feddpsyn.cli", *args],
                                     stdout=self._log, stderr=subprocess.STDOUT, cwd=ROOT)

    def wait_healthy(self, timeout: float = 60, verify: bool | str = True) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited early; see {self.log_path}")
            try:
                if httpx.get(f"{self.url}/health", timeout=2,
                             verify=verify).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"server at {self.url} not healthy after {timeout} s")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._log.close()


def start_servers(state: Path,
                  workers: int | None = None) -> tuple[ServerProcess, ServerProcess]:
    """Both servers on loopback; ``workers``: the compute server's local worker processes
    (``computeserver.executor``; None: its default)."""
    state.mkdir(parents=True, exist_ok=True)
    peer_token = state / "peer.token"
    if not peer_token.exists():
        write_private(peer_token, new_token().encode())
    ks_port, cs_port = free_port(), free_port()
    started: list[ServerProcess] = []
    try:  # a server that never became healthy is stopped with the other, not left running
        ks = ServerProcess(["keyserver", "--host", "127.0.0.1", "--port", str(ks_port),
                            "--state-dir", str(state / "keyserver"),
                            "--peer-token-file", str(peer_token)],
                           state / "keyserver.log", f"http://127.0.0.1:{ks_port}")
        started.append(ks)
        ks.wait_healthy()
        cs = ServerProcess(["computeserver", "--host", "127.0.0.1", "--port", str(cs_port),
                            "--state-dir", str(state / "computeserver"), "--keyserver", ks.url,
                            "--peer-token-file", str(peer_token)]
                           + ([] if workers is None else ["--workers", str(workers)]),
                           state / "computeserver.log", f"http://127.0.0.1:{cs_port}")
        started.append(cs)
        cs.wait_healthy()
    except BaseException:
        for server in reversed(started):
            server.stop()
        raise
    return ks, cs


# The demo's em rounds (--selection em): each round over Fed-Heart-Disease's 66 candidate
# pairs costs under two minutes on 2 cores, so it selects 4 pairs; --rounds changes it.
DEMO_ROUNDS = {"fed_heart_disease": 4}
# The demo's selection by data set: noisy-greedy, the servers' default and their most
# accurate plan in bench/accuracy/bench_served_vs_central.py, on the bundled default; Adult's 11,926
# two-way cells make any encrypted selection take most of an hour on 2 cores, so its demo
# releases every pair unless --selection says otherwise.
DEMO_SELECTION = {"fed_heart_disease": "noisy-greedy", "adult": "none"}
# Seconds per bootstrap of each selection phase on this project's 2-core machines, for the
# estimate printed before the encrypted selection. Measured by the default demo itself
# (quiet machine, P2 on base-4 digits, hidden-order P3): P2 about 275 s for its
# 30,683 planned bootstraps, P3 about 90 s a round (360 s for 48,444). Machines of this kind
# differ (up to 1.7x per bootstrap between two of them).
SECONDS_PER_BOOTSTRAP = {"p2": 0.0090, "p3": 0.0074, "noise": 0.0074}
# How long the demo waits for the release, in multiples of that estimate (machines differ
# by up to 1.7x per bootstrap, and Adult's P2 measured 1.3x the estimate's rate).
DEADLINE_FACTOR = 4


# How long the demo waits for the key server's offline job (--offline-first): Adult's
# every-pair session has 48 chunks of about 7 s each on one worker.
OFFLINE_TIMEOUT = 3600.0


def wait_offline(url: str, operator: str, session_id: str, say=print,
                 live: bool | None = None) -> None:
    """Wait until the key server has encrypted every set of the session's joint noise
    (``SessionStatus.offline``); at once if the session has none."""
    def poll() -> list[Step] | None:
        response = httpx.get(f"{url}/sessions/{session_id}/status",
                             headers={"Authorization": f"Bearer {operator}"}, timeout=30)
        response.raise_for_status()
        offline = wire.SessionStatus.model_validate(response.json()).offline
        if offline is None or offline.done >= offline.total:
            return None
        return [Step(offline.phase, offline.done, offline.total, unit=offline.unit)]

    with ProgressDisplay(prefix="[demo] offline: ", say=say, live=live) as display:
        wait_for(poll, timeout=OFFLINE_TIMEOUT, every=1.0, display=display)


def run_demo(dataset_name: str | DemoDataset, clients: int, out: Path, epsilon: float,
             delta: float, method: str, rows: int | None, seed: int, say=print,
             timeout: float | None = None, selection: str = "none",
             rounds: int | None = None, workers: int | None = None,
             noise: str = "auto", offline_first: bool = False, absent: int = 0,
             close_by: str = "close") -> dict:
    """The demo on a bundled data set (by name) or on a user's table (``user_table``).
    ``offline_first``: wait for the key server's offline job before the uploads (its time
    is the report's ``offline_wait`` phase). ``absent``: the last owners never upload; the
    session runs on the others' tables, its uploads closed without the absent ones by the
    operator (``close_by="close"``) or by its deadline (``"deadline"``), and an absent
    owner's late upload is shown refused."""
    if not 0 <= absent < clients:
        raise ValueError("--absent leaves at least one owner present")
    if close_by not in ("close", "deadline"):
        raise ValueError(f"--close-by is close or deadline, not {close_by!r}")
    phases: dict[str, float] = {}
    ds = dataset_name if isinstance(dataset_name, DemoDataset) else dataset(dataset_name)
    schema = Schema.load(ds.schema)
    out.mkdir(parents=True, exist_ok=True)
    t = time.time()
    csvs = split_csv(ds, clients, out / "clients", seed)
    phases["split"] = time.time() - t
    say(f"[demo] {ds.name}: {len(csvs)} data owners "
        f"({'natural split by ' + ds.natural_column if ds.natural_column else 'uniform split'})")
    t = time.time()
    ks, cs = start_servers(out / "state", workers)
    phases["start_servers"] = time.time() - t
    memory = PeakMemory({"keyserver": ks.proc.pid, "computeserver": cs.proc.pid}).start()
    cores = CoreSeconds({"keyserver": ks.proc.pid, "computeserver": cs.proc.pid}).start()
    steps: list[wire.StepCost] = []
    try:
        say(f"[demo] key server {ks.url}, compute server {cs.url}")
        operator = (out / "state" / "keyserver" / "operator.token").read_text().strip()
        client_ids = [f"owner{i}" for i in range(len(csvs))]
        # The operator's public bound on the union's size: the table's row count with 10%
        # room (a real operator states it from what the owners declare); with a selection,
        # also room for the row-bound check's margin on the noisy 1-ways, so a union of this
        # size is never refused (params.selection_plan.max_rows_with_room).
        rows = sum(len(p.read_text().splitlines()) - 1 for p in csvs)
        max_rows = stated_max_rows(schema, rows, epsilon, delta, selection, rounds, noise)
        present = client_ids[:len(client_ids) - absent]
        # Absent owners: the session runs with the others (its quorum); by deadline, one
        # that has passed once they have uploaded (the key server then closes at once).
        request = wire.SessionCreate(schema=schema.to_dict(), clients=client_ids,
                                     budget=wire.BudgetSpec(epsilon=epsilon, delta=delta),
                                     max_rows=max_rows,
                                     selection=wire.SelectionRequest(mode=selection,
                                                                     rounds=rounds),
                                     noise=noise, quorum=len(present) if absent else None,
                                     upload_deadline=time.time() + 1
                                     if absent and close_by == "deadline" else None)
        plan = SessionPlan.build(PlanRequest(schema, epsilon, delta, max_rows,
                                             selection=selection, rounds=rounds, noise=noise))
        estimate = 0.0
        if plan.selection is not None:
            cells = plan.pair_cells()
            bootstraps = plan.selection.bootstraps_by_phase(cells)
            estimate = sum(SECONDS_PER_BOOTSTRAP[k] * n for k, n in bootstraps.items())
            rounds_text = (f"{plan.selection.rounds} rounds" if plan.selection.mode == SelectionMode.EM
                           else "noisy scores and greedy choice")
            say(f"[demo] private selection ({plan.selection.mode}): {rounds_text} over "
                f"{len(plan.layout.two_way)} pairs, {plan.selection.bootstraps(cells):,} "
                f"bootstraps: about {estimate / 60:.0f} min of encrypted computation after the "
                "uploads (compiling the selection module and its keys first: under a minute)")
        t = time.time()
        # A bar per phase on a terminal; plain lines through `say` otherwise (and always
        # when the caller collects them).
        live = None if say is print else False
        with ProgressDisplay(prefix="[demo] preparing the session: ", say=say,
                             live=live) as display:
            try:
                created = create_session(
                    ks.url, operator, request, poll=0.5,
                    progress=lambda status: display.show(session_steps(status)))
            except SessionError as exc:
                raise RuntimeError(f"session creation failed: {exc}") from None
            display.finish()
        session_id = created.session.session_id
        phases["session_keygen"] = time.time() - t
        cores.mark("session_keygen")
        say(f"[demo] session {session_id}: circuits compiled, keys generated "
            f"({created.session.total_cells} cells per client)")
        if offline_first:
            t = time.time()
            wait_offline(ks.url, operator, session_id, say, live)
            phases["offline_wait"] = time.time() - t
            cores.mark("offline_wait")
        t = time.time()
        upload_bytes = []
        for cid, path in zip(present, csvs):
            with ClientAgent(ks.url, cs.url, session_id, cid, created.client_tokens[cid],
                             out / "client-state") as agent:
                result = agent.upload(path)
            upload_bytes.append(result.bytes_sent)
            say(f"[demo]   {cid}: {result.rows} rows, {result.cells} masked counts uploaded "
                f"in {result.seconds:.2f} s")
        if absent and close_by == "close":
            response = httpx.post(f"{ks.url}/sessions/{session_id}/uploads/close",
                                  timeout=60, headers={"Authorization": f"Bearer {operator}"},
                                  json={"without": client_ids[len(present):]})
            if response.status_code != 200:
                raise RuntimeError(f"closing the uploads failed: {response.status_code} "
                                   f"{wire.error_detail(response, 300)}")
        if absent:
            how = "by the operator" if close_by == "close" else "at the deadline"
            say(f"[demo]   {', '.join(client_ids[len(present):])}: never uploaded; the "
                f"uploads close without them ({how})")
        phases["client_uploads"] = time.time() - t
        cores.mark("client_uploads")
        t = time.time()
        with ClientAgent(ks.url, cs.url, session_id, client_ids[0],
                         created.client_tokens[client_ids[0]], out / "client-state") as agent:
            if timeout is None:
                # The wait bounds the loop, not the work: a fixed hour stopped Adult's em
                # demo (estimated 84 min, P2 alone took 54) with the servers mid-round.
                timeout = max(3600.0, DEADLINE_FACTOR * estimate)
            planned = len(created.session.releases)

            def poll() -> list[Step] | None:
                status = agent.status()
                if status.state == "released":
                    return None
                compute = agent.compute_status() if status.state == "computing" else None
                return session_steps(status, compute, planned)

            with ProgressDisplay(prefix="[demo] ", say=say, live=live) as display:
                try:
                    wait_for(poll, timeout=timeout, display=display)
                except TimeoutError:
                    raise RuntimeError(f"session not released after {timeout:.0f} s (the "
                                       "servers' state is kept); see "
                                       f"{out / 'state'}/*.log") from None
            document = agent.release()
            steps = agent.compute_status().costs or []
        phases["encrypt_aggregate_release"] = time.time() - t
        cores.mark("encrypt_aggregate_release")
        late_refusal = None
        if absent:  # an absent owner shows up after the close: refused by the servers
            late = client_ids[-1]
            try:
                with ClientAgent(ks.url, cs.url, session_id, late, created.client_tokens[late],
                                 out / "late-client-state") as agent:
                    agent.upload(csvs[-1])
            except AgentError as exc:
                late_refusal = str(exc)
                say(f"[demo]   {late}'s late upload: refused ({late_refusal[:90]}...)")
            else:
                raise RuntimeError(f"{late}'s late upload was accepted after the close")
        (out / "release.json").write_text(document.model_dump_json(by_alias=True, indent=1))
    finally:
        memory.stop()  # its last look needs the servers running
        cores.stop()
        # The compute server first: its job loop polls the key server, and would log a
        # refused connection for every poll after the key server is gone.
        cs.stop()
        ks.stop()
    t = time.time()
    _, noisy = marginals_from_release(document)
    method = resolve_method(method, noisy, schema.domain_sizes)  # the report names the one used
    records, rows_out = synthesize(schema, noisy, method, rows, seed)
    with (out / "synthetic.csv").open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(schema.names)
        writer.writerows(rows_out)
    phases["synthesis"] = time.time() - t
    # The released union is the present owners' tables only.
    union = np.concatenate([encode_csv(p, schema).records for p in csvs[:len(present)]])
    error = workload_error(union, records, schema.domain_sizes)
    t = time.time()
    accounting = document.accounting
    chosen = getattr(accounting.selection, "selected_pairs", None)
    central = central_reference(schema, union, chosen, epsilon, delta, selection,
                                request.max_rows)
    central_records, _ = synthesize(schema, central, method, rows, seed)
    central_error = workload_error(union, central_records, schema.domain_sizes)
    phases["central_baseline"] = time.time() - t
    report = {
        "version": VERSION,
        "dataset": ds.name,
        "clients": len(csvs),
        "contributors": document.contributors,
        "absent": document.absent,
        "late_upload_refused": late_refusal,
        "rows_union": int(len(union)),
        "rows_synthetic": int(len(records)),
        "method": method,
        "epsilon_budget": epsilon,
        "epsilon_spent": accounting.epsilon_spent,
        "delta": delta,
        "delta_total": delta if accounting.delta_total is None else accounting.delta_total,
        "delta_conversion": accounting.delta_conversion,
        "selected_pairs": [[schema.names[a] for a in p] for p in chosen] if chosen else None,
        "selection": _selection_summary(accounting.selection),
        "rho_spent": accounting.rho_spent,
        "privacy": (None if created.session.privacy is None
                    else created.session.privacy.model_dump(mode="json")),
        "noise": document.noise,
        "phases": {k: round(v, 3) for k, v in phases.items()},
        "upload_bytes_per_client": upload_bytes,
        "peak_memory_mb": memory.report(),
        "core_seconds": {**cores.report(), "compute_server_steps": step_costs(steps)},
        "workload_error": error,
        "central_workload_error": central_error,
        "session_id": session_id,
    }
    (out / "report.json").write_text(json.dumps(report, indent=1))
    return report


def step_costs(steps: list[wire.StepCost]) -> list[dict]:
    """The compute server's encrypted steps (``computeserver.metering``) as the report gives
    them: with each step's CPU milliseconds a bootstrap where its bootstraps are known."""
    out = []
    for step in steps:
        row = step.model_dump()
        if step.bootstraps:
            row["cpu_ms_per_bootstrap"] = round(1000 * step.cpu_seconds / step.bootstraps, 2)
        out.append(row)
    return out


def central_reference(schema: Schema, union: np.ndarray, chosen: list | None, epsilon: float,
                      delta: float, selection: str, max_rows: int) -> list[NoisyMarginal]:
    """The demo's central reference: the same released marginals on the union with one
    discrete Gaussian a count, at the session's split (it reuses the federated selection's
    pairs, so it pays nothing for selecting them). ``chosen``: the selected pairs, None
    where every pair was released."""
    layout = MarginalLayout.build(schema.domain_sizes)
    split = default_split(selection, [m.size for m in layout.one_way],
                          [m.size for m in layout.two_way], epsilon, delta, max_rows)
    if chosen == []:  # noisy-greedy kept no pair: the reference releases the 1-ways alone
        plan = SessionPlan.build(PlanRequest(
            schema, epsilon, delta, max_rows,
            split={"one_way": split["one_way"], "two_way": 0.5}, selection="none", noise="two-server"))
        return [m for m in central_marginals(plan, union) if len(m.attrs) == 1]
    plan = SessionPlan.build(PlanRequest(
        schema, epsilon, delta, max_rows, pairs=chosen,
        split={"one_way": split["one_way"], "two_way": split["two_way"]}, selection="none", noise="two-server"))
    return central_marginals(plan, union)


def _selection_summary(selection: wire.SelectionAccounting) -> dict:
    """The selection's spent budget for the report, the numerical extra loss included."""
    if selection.mode == SelectionMode.NONE:
        return {"mode": "none"}
    if selection.mode == SelectionMode.NOISY_GREEDY:
        # The scores' noise: one joint noise (its shape and exact variance) or each server's
        # discrete Gaussian (2 sigma2 in the greedy rule's scores).
        joint = selection.joint
        score_noise = ({"kind": "joint", "uniforms": joint.uniforms, "bits": joint.bits,
                        "per_score_variance": float(shape_of(joint).variance)}
                       if joint is not None else
                       {"kind": "two-server",
                        "sigma2_per_server": float(Fraction(selection.noise_sigma2)),
                        "per_score_variance": 2 * float(Fraction(selection.noise_sigma2))})
        return {"mode": "noisy-greedy", "pairs_selected": len(selection.selected_pairs),
                "rho_charged": float(Fraction(selection.rho_charged)),
                "score_noise": score_noise,
                "noise_bits": selection.noise_bits, "fhe_delta": selection.fhe_delta,
                "noise_tail_delta": selection.noise_tail_delta,
                "bootstraps": selection.bootstraps, "delta_terms": selection.delta_terms}
    return {"mode": selection.mode, "rounds": selection.rounds,
            "rho_charged": float(Fraction(selection.rho_charged)),
            "epsilon_per_round": float(Fraction(selection.epsilon_round)),
            "numerical_extra_epsilon_per_round": selection.numerical_extra_epsilon_per_round,
            "epsilon_per_round_charged": float(Fraction(selection.epsilon_round))
            + selection.numerical_extra_epsilon_per_round,
            # per round: pure DP (delta 0: the hidden order has no ties); the session's
            # delta terms (bootstrap failures, the row bound) are reserved out of delta.
            "delta_per_round": 0.0,
            "bootstraps": selection.bootstraps,
            "fhe_delta": selection.fhe_delta,
            "delta_terms": selection.delta_terms}