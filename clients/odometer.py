"""An owner's lifetime privacy budget for one table, kept by its own agent.

The odometer is a JSON file beside the agent's seeds (``STATE_DIR/odometer/TABLE.json``,
mode 0600): the owner's cap (epsilon, delta), if set, and every session the table joined
with the privacy record that session published. Before the agent sends anything of a new
session (``clients.agent.ClientAgent.upload``) it composes that session's record with every
earlier one (``dp.lifetime``: PLD composition of the records, not a sum of eps) and refuses
if the result passes the cap. The session is written to the odometer *before* the upload:
an upload cut short still counts, so the odometer never under-states what may have been
spent. A session already on it is not counted twice (a retried upload).

Composing needs Google's dp-accounting (the ``accounting`` extra); an odometer without a
cap only records, and needs nothing more.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from feddpsyn.common import wire
from feddpsyn.common.files import write_private

__all__ = ["Odometer", "OdometerRefusal", "Spend", "odometer_path"]


class OdometerRefusal(RuntimeError):
    """A session the owner's cap does not allow, or an odometer that cannot be kept."""


@dataclass(frozen=True)
class Spend:
    """What the table has spent over ``sessions`` sessions: eps at the cap's delta (or at
    ``delta`` without a cap), and the cap."""

    sessions: int
    epsilon: float
    delta: float
    cap_epsilon: float | None

    @property
    def left(self) -> float | None:
        return None if self.cap_epsilon is None else max(0.0, self.cap_epsilon - self.epsilon)


def odometer_path(state_dir: Path, table: str) -> Path:
    if not table or "/" in table or table.startswith("."):
        raise OdometerRefusal(f"{table!r} is not a table name for the odometer")
    return state_dir / "odometer" / f"{table}.json"


class Odometer:
    """One table's odometer (module docstring)."""

    def __init__(self, path: Path):
        self.path = path
        self.table = path.stem
        self._doc: dict[str, Any] = {"table": self.table, "cap": None, "sessions": []}
        if path.exists():
            try:
                doc = json.loads(path.read_text())
                for entry in doc["sessions"]:
                    wire.PrivacyRecord.model_validate(entry["record"])
            except (ValueError, KeyError, TypeError) as exc:
                # Fail closed: a budget that cannot be read is not taken as empty.
                raise OdometerRefusal(f"{path}: the odometer cannot be read ({exc}); restore "
                                      "it before this table joins another session") from None
            self._doc = doc

    @property
    def cap(self) -> tuple[float, float] | None:
        cap = self._doc.get("cap")
        return None if cap is None else (float(cap["epsilon"]), float(cap["delta"]))

    def set_cap(self, epsilon: float, delta: float) -> None:
        if not (epsilon > 0 and 0 < delta < 1):
            raise OdometerRefusal("a lifetime cap is an epsilon > 0 and a delta in (0, 1)")
        self._doc["cap"] = {"epsilon": epsilon, "delta": delta}
        self._save()

    def sessions(self) -> list[dict[str, Any]]:
        return list(self._doc["sessions"])

    def records(self) -> list[wire.PrivacyRecord]:
        return [wire.PrivacyRecord.model_validate(e["record"]) for e in self._doc["sessions"]]

    def spend(self, delta: float | None = None,
              extra: wire.PrivacyRecord | None = None) -> Spend:
        """The composed spend of every session on the odometer (and ``extra``), at the
        cap's delta, or at ``delta``."""
        from feddpsyn.dp.lifetime import composed_epsilon

        cap = self.cap
        at = cap[1] if cap is not None else delta
        if at is None:
            raise OdometerRefusal("no delta to state the spend at: set a cap, or give one")
        records = self.records() + ([extra] if extra is not None else [])
        return Spend(len(records), composed_epsilon(records, at), at,
                     None if cap is None else cap[0])

    def admit(self, public: wire.SessionPublic, keyserver: str) -> Spend | None:
        """Record ``public`` as joined, after checking the cap (module docstring); None
        without a cap. A session already recorded passes as it is."""
        if any(e["session_id"] == public.session_id and e["keyserver"] == keyserver
               for e in self._doc["sessions"]):
            return self.spend() if self.cap is not None else None
        if public.privacy is None:
            raise OdometerRefusal(f"session {public.session_id} publishes no privacy record: "
                                  "its spend cannot be kept on the odometer")
        spend = None
        if self.cap is not None:
            spend = self.spend(extra=public.privacy)
            cap_eps, cap_delta = self.cap
            if not spend.epsilon <= cap_eps:
                before = self.spend()
                raise OdometerRefusal(
                    f"table {self.table!r}: joining session {public.session_id} would bring its "
                    f"privacy loss to eps {_text(spend.epsilon)} at delta {cap_delta:g} over "
                    f"{spend.sessions} sessions, past its lifetime cap of eps {cap_eps:g} "
                    f"(spent so far: eps {_text(before.epsilon)} over {before.sessions} "
                    "sessions); nothing was sent")
        self._doc["sessions"].append({
            "session_id": public.session_id, "keyserver": keyserver, "joined": time.time(),
            "epsilon": public.epsilon, "delta": public.delta,
            "record": public.privacy.model_dump(mode="json")})
        self._save()
        return spend

    def _save(self) -> None:
        write_private(self.path, json.dumps(self._doc, indent=1).encode())


def _text(epsilon: float) -> str:
    return "inf" if math.isinf(epsilon) else f"{epsilon:.4f}"
