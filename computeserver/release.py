"""The compute server's release on its executor: Primitive 1 over a release's chunks with
this server's noise or its half of the joint noise, one executor task per chunk (FedDPSyn
Primitive 1: ``crypto.aggregation``; the joint noise: ``crypto.joint_noise``).

Design concerns:

* **Noise drawn here, chunk by chunk, used once.** A chunk's clear operands are built in this
  server's process when its task is about to run: the offset (the clients' mask sums, this
  server's pool noise or the clear half of the joint noise, and P1's fresh bit above the k
  count bits: ``crypto.aggregation.release_offset``) and, on a joint release, the
  multipliers w_j (1 - 2 b_j) of this server's fresh bits b
  (``crypto.joint_noise.joint_operands``). The bits live in their chunk's task only and are
  never stored; the caller stores the outputs before it sends them
  (``computeserver.service``), so a retry re-sends them instead of drawing again.
* **Anywhere the executor runs it.** A chunk's task is the session's release circuit (its one
  function) on the clients' chunk ciphertexts, the key server's encrypted bits of the chunk
  (through the joint circuit) and the clear operands: ciphertexts in, ciphertexts out, so
  where it ran changes no decryption (``computeserver.executor``). A worker sees the
  operands, which are as secret as this server (docs/deployment.md, "What a worker sees").
* **One window of chunks in memory.** A chunk's ciphertexts are read from each client's
  upload file by offset (:class:`UploadChunks`), or for a packed chunk of a selected
  release fetched from the key server (``params.release_chunks``), and its coins fetched
  from the key server, only as its window comes up
  (``computeserver.executor.map_streamed``): the server holds the inputs of one chunk per
  task the executor runs at once, and the outputs, which it stores.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from feddpsyn.computeserver.executor import CallTask
from feddpsyn.crypto.aggregation import release_offset
from feddpsyn.crypto.blobs import blob_index, read_blob
from feddpsyn.crypto.joint_noise import JointNoiseShape, draw_bits, joint_operands

__all__ = ["UploadChunks", "chunk_task"]


class UploadChunks:
    """The clients' uploads as this server stores them (one container of chunk ciphertexts
    per client), read one chunk at a time: only the containers' headers are read up front."""

    def __init__(self, paths: Sequence[Path], chunks: int):
        self._paths = list(paths)
        self._index = [blob_index(path, expected=chunks) for path in self._paths]

    def chunk(self, index: int) -> list[bytes]:
        """Every client's ciphertext of chunk ``index``, in the clients' order."""
        return [read_blob(path, entries[index])
                for path, entries in zip(self._paths, self._index, strict=True)]


def chunk_task(masked: Sequence[bytes], mask_sum: np.ndarray, select: np.ndarray,
               count_bits: int, *, noise: np.ndarray | None = None,
               shapes: Sequence[JointNoiseShape | None] | None = None, columns: int = 0,
               coins: bytes | None = None) -> CallTask:
    """One chunk's task (module docstring): the clients' ``masked`` ciphertexts of the chunk,
    their mask sums and the release's ``select`` on its cells, and one of this server's
    ``noise`` per cell (a two-server release) or each cell's joint ``shapes`` (None: no noise
    on that cell), with this server's bits b drawn here.

    Through the joint circuit (``columns`` > 0: the session's releases run through it, its
    bits as wide as the widest shape) ``coins`` are the key server's encrypted bits of the
    chunk, at weight 0 on a two-server release and past each cell's own shape."""
    if noise is not None and shapes is not None:
        raise ValueError("a chunk carries this server's noise or joint shapes, not both")
    if not columns:
        if noise is None:
            raise ValueError("a chunk outside the joint circuit needs this server's noise")
        return CallTask(None, (*masked, select, release_offset(mask_sum, noise, select,
                                                               count_bits)))
    if coins is None:
        raise ValueError("a chunk through the joint circuit needs the key server's coins")
    if noise is not None:
        weights = np.zeros((len(select), columns), dtype=np.int64)
        offset = release_offset(mask_sum, noise, select, count_bits)
    elif shapes is not None:
        weights, clear = joint_operands(shapes, draw_bits(len(select), columns), select,
                                        columns)
        offset = release_offset(mask_sum, clear, select, count_bits)
    else:
        raise ValueError("a chunk carries this server's noise or joint shapes")
    return CallTask(None, (*masked, coins, weights, select, offset))
