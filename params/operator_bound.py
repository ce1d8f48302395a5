"""The operator's public bound on the union's rows (``max_rows``), as the demo states it.

An operator states ``max_rows`` from what the owners declare; the demo (and the benchmark's
simulation of the servers, ``fedbench.methods.feddpsyn_served``) states it from the table's
row count with 10% room, plus, with a selection, room for the row-bound check's margin on the
noisy 1-ways (``params.selection_plan.max_rows_with_room``): a union of the declared size is
then never refused by the check. One function, so the benchmark sizes its sessions exactly as
the demo does.
"""

from __future__ import annotations

from feddpsyn.params.modes import SelectionMode
from feddpsyn.params.plan_request import PlanRequest
from feddpsyn.params.schema import Schema
from feddpsyn.params.selection_plan import max_rows_with_room
from feddpsyn.params.session_plan import SessionPlan

__all__ = ["stated_max_rows"]


def stated_max_rows(schema: Schema, rows: int, epsilon: float, delta: float, selection: str,
                    rounds: int | None, noise: str, parameter_set: str = "default",
                    split: dict[str, float] | None = None) -> int:
    """``max_rows`` for a union of ``rows`` records: rows + 10% + 10, and with a selection at
    least the row-bound check's room at the plan's 1-way noise (``split``: the plan's shares
    where not the default)."""
    max_rows = int(rows * 1.1) + 10
    if selection == SelectionMode.NONE:
        return max_rows
    # noisy-greedy's 1-way share falls as max_rows grows (params.budget_split), so its noise
    # and the room it needs grow: raise max_rows until the plan at it has room.
    for _ in range(8):  # bounded: the room needed converges in two or three steps
        draft = SessionPlan.build(PlanRequest(schema, epsilon, delta, max_rows,
                                              parameter_set=parameter_set, selection=selection,
                                              rounds=rounds, noise=noise, split=split))
        needed = max_rows_with_room(rows, [m.size for m in draft.layout.one_way],
                                    *draft.release("one_way").row_bound_noise(),
                                    draft.selection.row_bound_delta(delta, epsilon))
        if needed <= max_rows:
            return max_rows
        max_rows = needed
    raise ValueError("no max_rows gives the row-bound check room at this budget")
