"""The session's modes as types: how it selects its 2-way marginals and how its releases are
noised.

Each member's value is the string the wire models, the CLI and the public records use
(``common.wire``'s ``Literal`` fields), and a ``StrEnum`` compares equal to it, so a mode read
from a record or a request needs no conversion to be compared, and a member written into a
record is that string.

>>> SelectionMode("noisy-greedy") is SelectionMode.NOISY_GREEDY, NoiseMode.AUTO == "auto"
(True, True)
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["SelectionMode", "NoiseMode"]


class SelectionMode(StrEnum):
    """How a session chooses its 2-way marginals (``params.selection_plan``)."""

    EM = "em"                      # FedDPSyn's private selection under encryption
    NOISY_GREEDY = "noisy-greedy"  # PrivSyn's greedy rule on noisy InDif scores
    NONE = "none"                  # every pair, or the pairs given


class NoiseMode(StrEnum):
    """How a session's releases are noised (``params.noise_rules``)."""

    AUTO = "auto"              # one joint noise wherever the rules allow, two-server elsewhere
    JOINT = "joint"            # one joint noise on every release, or refuse the session
    TWO_SERVER = "two-server"  # each server its own discrete Gaussian
