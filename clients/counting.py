"""A data owner's table -> its count vector, in memory that does not grow with the table.

The CSV is read a line at a time and encoded in chunks of rows
(``params.table_codec.encode_csv_chunks``: the header is checked before any row is read,
every bad value is the same one-line error naming file, row, line and column); each chunk is
counted into the session's marginal layout and dropped. Counts are integers summed exactly,
so the vector is bit for bit the one of the whole table counted at once
(``MarginalLayout.counts`` of ``encode_csv``'s records); ``tests/clients/test_client_counting.py``
checks both on the bundled tables, and ``bench/scale/bench_client_stream.py`` measures the memory
on a 1 GB table.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from feddpsyn.params.layout import MarginalLayout
from feddpsyn.params.schema import Schema
from feddpsyn.params.table_codec import CHUNK_ROWS, EncodingTally, InvalidPolicy, encode_csv_chunks

__all__ = ["count_csv"]


def count_csv(csv_path: Path, schema: Schema, layout: MarginalLayout, *,
              on_invalid: InvalidPolicy = "error",
              chunk_rows: int = CHUNK_ROWS) -> tuple[np.ndarray, EncodingTally]:
    """(the table's count vector in ``layout``, what the encoding read, kept, dropped and
    clamped)."""
    tally = EncodingTally()
    counts = np.zeros(layout.total_cells, dtype=np.int64)
    for records in encode_csv_chunks(csv_path, schema, on_invalid=on_invalid, tally=tally,
                                     chunk_rows=chunk_rows):
        counts += layout.counts(records)
    return counts, tally
