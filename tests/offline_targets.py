"""Tasks and a key loader for ``keyserver.offline_pool``'s tests: top-level (a spawned worker
imports them by name) and in a module that imports nothing heavy, so a worker starts in a
second."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from feddpsyn.keyserver.offline_pool import TaskRefused


class EchoKeys:
    """A stand-in key handle: its "ciphertexts" are the values themselves."""

    def encrypt_score_bits(self, bits: np.ndarray) -> bytes:
        return np.asarray(bits, dtype=np.uint8).tobytes()


def load_echo_keys(directory: Path, *args: object) -> EchoKeys:
    return EchoKeys()


@dataclass(frozen=True)
class Echo:
    """Answers its value with the worker's process id."""

    value: int

    def run(self, keys: EchoKeys) -> list[bytes]:
        return [f"{self.value}@{os.getpid()}".encode()]


@dataclass(frozen=True)
class Exit:
    """Ends its worker process mid-task, as a kill or the OOM killer would."""

    code: int

    def run(self, keys: EchoKeys) -> list[bytes]:
        os._exit(self.code)


@dataclass(frozen=True)
class Refuse:
    """Raises in its worker."""

    message: str

    def run(self, keys: EchoKeys) -> list[bytes]:
        raise ValueError(self.message)


@dataclass(frozen=True)
class Sleep:
    seconds: float

    def run(self, keys: EchoKeys) -> list[bytes]:
        time.sleep(self.seconds)
        return [b"slept"]


@dataclass(frozen=True)
class Undecryptable:
    """Refuses its input, as a decryption task refuses a ciphertext not of its keys."""

    def run(self, keys: EchoKeys) -> list[bytes]:
        raise TaskRefused("the outputs do not decrypt under this session's keys")


@dataclass(frozen=True)
class Niceness:
    """Answers its worker's niceness."""

    def run(self, keys: EchoKeys) -> list[bytes]:
        return [str(os.nice(0)).encode()]
