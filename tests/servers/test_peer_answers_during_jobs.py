"""A key server answers its peer within a second while its offline job runs.

A real ``feddpsyn keyserver`` process on a joint session (one joint noise a release, the
``default`` parameter set: each release's coin bits are one chunk, seconds of
encryption each) is asked ``GET /peer/sessions`` every 0.1 s from the moment the session is
ready until its log says every chunk's coins are encrypted; every answer must come within
``ANSWER_WITHIN_S``. With the default ``--workers 1`` as with ``--workers 2`` the chunks
are encrypted in worker processes (``keyserver.offline_pool``): in the server's own process
one chunk's encryption would hold the interpreter for its 6 s, and a peer's call would wait
for it.
"""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from feddpsyn.common import wire
from feddpsyn.common.credentials import new_token
from feddpsyn.demo import ServerProcess
from tests.ports import loopback_port

ANSWER_WITHIN_S = 1.0
SCHEMA = {"name": "three", "columns": [
    {"name": f"x{i}", "type": "categorical", "i2s": [str(j) for j in range(8)]}
    for i in range(3)]}  # 24 one-way and 192 two-way cells: one chunk of coins each
COINS_DONE = "encrypted the joint noise's bits of"


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _coin_chunks(log: Path) -> int:
    """Chunks of coins the log says are encrypted (a pass may name several)."""
    return sum(line.split(COINS_DONE, 1)[1].count("chunk")
               for line in log.read_text().splitlines() if COINS_DONE in line)


@pytest.mark.parametrize("workers", [1, 2])
def test_the_peer_is_answered_within_a_second_while_coins_are_encrypted(tmp_path, workers):
    peer = new_token()
    (tmp_path / "peer.token").write_text(peer)
    port = loopback_port()
    log = tmp_path / "ks.log"
    ks = ServerProcess(["keyserver", "--host", "127.0.0.1", "--port", str(port), "--state-dir",
                        str(tmp_path / "ks"), "--peer-token-file", str(tmp_path / "peer.token"),
                        "--workers", str(workers)], log, f"http://127.0.0.1:{port}")
    try:
        ks.wait_healthy()
        operator = {**_auth((tmp_path / "ks" / "operator.token").read_text().strip()),
                    "Content-Type": "application/json"}
        request = wire.SessionCreate(schema=SCHEMA, clients=["a", "b"],
                                     parameter_set="default", noise="joint",
                                     budget=wire.BudgetSpec(epsilon=1.0, delta=1e-6),
                                     max_rows=20000, selection=wire.SelectionRequest(mode="none"))
        created = httpx.post(f"{ks.url}/sessions", headers=operator, timeout=60,
                             content=request.model_dump_json(by_alias=True))
        assert created.status_code == 202, created.text
        status_url = ks.url + created.json()["status_url"]
        deadline = time.monotonic() + 600
        while httpx.get(status_url, headers=operator, timeout=120).json()["state"] == "preparing":
            assert time.monotonic() < deadline, "the session never became ready"
            time.sleep(0.2)
        answers: list[float] = []
        deadline = time.monotonic() + 600
        while _coin_chunks(log) < 2:
            assert time.monotonic() < deadline, "the coins were never encrypted"
            started = time.perf_counter()
            answered = httpx.get(f"{ks.url}/peer/sessions", headers=_auth(peer), timeout=120)
            answers.append(time.perf_counter() - started)
            assert answered.status_code == 200, answered.text
            time.sleep(0.1)
        assert len(answers) >= 5, "the job ended before the peer could ask"
        slow = [round(s, 2) for s in answers if s >= ANSWER_WITHIN_S]
        assert not slow, (f"{len(slow)} of {len(answers)} peer calls took a second or more "
                          f"while the coins were encrypted: {slow}")
    finally:
        ks.stop()
