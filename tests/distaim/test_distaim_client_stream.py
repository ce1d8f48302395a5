"""A DistAIM client counts its CSV with the client agent's streamed counter
(``clients.counting.count_csv``, whose memory bound ``tests/clients/test_client_counting.py``
checks) in the workload's layout: bit for bit DistAIM's own vector of the whole table
(``distaim.protocol.client_vector``, 3-way blocks included); and it refuses a table with no
row before it uploads."""

from pathlib import Path

import numpy as np
import pytest

import feddpsyn.distaim.client as client
from feddpsyn.clients.counting import count_csv
from feddpsyn.distaim.protocol import Layout, client_vector
from feddpsyn.params.schema import Schema
from feddpsyn.params.table_codec import encode_csv

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT / "params" / "schemas" / "fed_heart_disease.schema.json"


def _workload(schema: Schema) -> Layout:
    # Three 3-way cliques over overlapping attributes: their completion holds 1-, 2- and
    # 3-way marginals, so every kind of block of the upload is counted.
    return Layout.for_workload(schema.domain_sizes, [(0, 1, 2), (1, 3, 4), (0, 4, 5)])


@pytest.mark.parametrize("chunk_rows", [1, 7, 1000, 10**6])
def test_chunked_vector_equals_the_whole_table_vector(data_dir, chunk_rows):
    csv = data_dir / "fed_heart_disease" / "fed_heart_disease.csv"
    schema = Schema.load(SCHEMA)
    layout = _workload(schema)
    whole = client_vector(encode_csv(csv, schema).records, layout)
    vector, tally = count_csv(csv, schema, layout, chunk_rows=chunk_rows)
    assert vector.dtype == np.int64 and np.array_equal(vector, whole)
    assert tally.rows_kept == tally.rows_read == len(encode_csv(csv, schema).records)
    assert len(vector) == layout.length


def test_an_empty_table_is_refused_before_any_upload(tmp_path, data_dir, monkeypatch):
    schema = Schema.load(SCHEMA)
    header = (data_dir / "fed_heart_disease" / "fed_heart_disease.csv").read_text().splitlines()[0]
    empty = tmp_path / "empty.csv"
    empty.write_text(header + "\n")
    layout = _workload(schema)
    vector, tally = count_csv(empty, schema, layout)
    assert tally.rows_read == 0 and not vector.any()

    # The session's description as the servers answer it; the upload itself must not run.
    info = {
        "domain_sizes": list(schema.domain_sizes),
        "modulus": 2**61 - 1,
        "workload": [[0, 1, 2], [1, 3, 4], [0, 4, 5]],
        "schema_fingerprint": schema.fingerprint(),
    }
    sent: list[np.ndarray] = []
    monkeypatch.setattr(client, "session_info", lambda *a, **k: info)
    monkeypatch.setattr(
        client,
        "upload_vector",
        lambda http, servers, sid, cid, token, vector, modulus: sent.append(vector) or 3,
    )
    servers = ["http://127.0.0.1:9", "http://127.0.0.1:9", "http://127.0.0.1:9"]
    with pytest.raises(ValueError, match="no row to count.*--allow-empty"):
        client.upload_csv(servers, "s1", "c0", ["t"] * 3, empty, SCHEMA)
    assert sent == []
    rows, _ = client.upload_csv(servers, "s1", "c0", ["t"] * 3, empty, SCHEMA, allow_empty=True)
    assert rows == 0 and len(sent) == 1 and not sent[0].any()

