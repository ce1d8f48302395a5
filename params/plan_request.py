"""What a session's plan is asked for: the table, the budget, the bound on its rows, and how
it selects and noises its marginals.

One value, checked once, from which :meth:`params.session_plan.SessionPlan.build` derives
the whole plan: the key server builds it from a session's creation request, the CLI, the
demo and the benchmarks from their arguments. Its modes are types
(``params.modes``): a mode given as its string is read once, here.

>>> from feddpsyn.params.schema import Schema
>>> schema = Schema.from_dict({"columns": [
...     {"name": "a", "type": "categorical", "i2s": ["x", "y"]},
...     {"name": "b", "type": "categorical", "i2s": ["u", "v", "w"]}]})
>>> request = PlanRequest(schema, epsilon=1.0, delta=1e-5, max_rows=100, noise="two-server")
>>> request.selection is SelectionMode.NOISY_GREEDY, request.noise  # the servers' default
(True, <NoiseMode.TWO_SERVER: 'two-server'>)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from feddpsyn.params.modes import NoiseMode, SelectionMode
from feddpsyn.params.schema import Schema

__all__ = ["PlanRequest"]


@dataclass(frozen=True)
class PlanRequest:
    """A session's plan as asked for.

    ``pairs``: the 2-way marginals (default every pair); ``split``: the budget's shares by
    release (default ``params.budget_split.default_split``); ``parameter_set`` and
    ``selection_set``: the named cryptographic parameter sets
    (``params.parameter_sets``); ``rounds``: em's selected pairs (default half the
    candidates); ``calibrated``: spend the eps asked by the noises' composed PLD
    (``SessionPlan.build``), or keep the zCDP conversion's budget (False: the benchmark's
    what-if simulations); ``one_way_topup``: noisy-greedy's split 2-way release also tops up
    the 1-ways to their c^(2/3) share of the publication (``params.run_time``; it applies
    where that release is split under its Gaussian bound, a calibrated plan); None: on for
    noisy-greedy (its default: measured at least as accurate on every table, much more on
    small ones, ``docs/results.md``), off for the others."""

    schema: Schema
    epsilon: float
    delta: float
    max_rows: int
    pairs: Sequence[tuple[int, int]] | None = None
    split: dict[str, float] | None = None
    parameter_set: str = "default"
    # The servers' defaults (``common.wire.SessionCreate``): PrivSyn's pair selection through
    # the servers, one joint noise wherever it fits.
    selection: SelectionMode = SelectionMode.NOISY_GREEDY
    rounds: int | None = None
    selection_set: str | None = None
    noise: NoiseMode = NoiseMode.AUTO
    calibrated: bool = True
    one_way_topup: bool | None = None

    def __post_init__(self) -> None:
        if self.noise not in tuple(NoiseMode):
            modes = tuple(m.value for m in NoiseMode)
            raise ValueError(f"noise must be one of {modes}, not {self.noise!r}")
        if self.selection not in tuple(SelectionMode):
            modes = tuple(m.value for m in SelectionMode)
            raise ValueError(f"selection is one of {modes}, not {self.selection!r}")
        # A mode given as its string (a wire model's Literal, a CLI option) becomes its member.
        object.__setattr__(self, "noise", NoiseMode(self.noise))
        object.__setattr__(self, "selection", SelectionMode(self.selection))
        if self.selection == SelectionMode.NOISY_GREEDY and self.rounds is not None:
            raise ValueError("noisy-greedy chooses how many pairs to keep itself (PrivSyn's "
                             "greedy rule); rounds are for em")
        if self.one_way_topup is None:
            object.__setattr__(self, "one_way_topup",
                               self.selection == SelectionMode.NOISY_GREEDY)
        if self.one_way_topup and self.selection != SelectionMode.NOISY_GREEDY:
            raise ValueError("the 1-way top-up is noisy-greedy's: its 1-ways are released "
                             "before the pairs are chosen, the others' with their pairs' "
                             "share already")
