"""feddpsyn: federated DP synthetic tables with two non-colluding servers (FedDPSyn).

The public API, by task (``docs/api.md`` has an example of each):

* **Describe the table**: :class:`Schema` (load, check, fingerprint) and
  :func:`draft_schema` (a first schema read from a CSV, to be finished by hand: it is not DP).
* **Open a session** (the operator): the key server's request body :class:`SessionCreate`,
  with its :class:`BudgetSpec` and :class:`SelectionRequest`; ``feddpsyn session create``
  sends it.
* **Contribute a table** (a data owner): :class:`ClientAgent` encodes a CSV, uploads it
  masked to both servers and fetches the release.
* **Synthesize**: :func:`marginals_from_release` reads a release into
  :class:`NoisyMarginal` s, and :func:`synthesize` turns them into synthetic rows.
* **Plan and audit the privacy**: :class:`SessionPlan` is the public plan both servers
  follow, built from a :class:`PlanRequest`; its :class:`PrivacyRecord` lists every noise
  as a mechanism (:class:`UniformSum`, :class:`DiscreteGaussian`, :class:`PureStep`, and
  :class:`GaussianBound` for a release decided at run time), :func:`epsilon_of` re-accounts
  it and :func:`audit_record` does it all (``feddpsyn audit``).

Every name is imported on first use (PEP 562): ``import feddpsyn`` stays as cheap as the
command line needs, and only the names that need them pull pydantic, the FHE compiler
(``SessionPlan``) or the PLD accountant.

>>> from feddpsyn import BudgetSpec
>>> BudgetSpec(epsilon=1.0, delta=1e-5).split is None
True
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# The release (`feddpsyn --version`); written once, in feddpsyn.common.version, which the
# wheel's metadata reads too.
from feddpsyn.common.version import VERSION

__version__ = VERSION

# By task, in the order of the module docstring.
__all__ = [
    "Schema", "draft_schema",
    "SessionCreate", "BudgetSpec", "SelectionRequest",
    "ClientAgent",
    "marginals_from_release", "NoisyMarginal", "synthesize",
    "SessionPlan", "PlanRequest", "PrivacyRecord", "epsilon_of", "UniformSum",
    "DiscreteGaussian", "PureStep", "GaussianBound", "audit_record",
]

# Each public name -> the module it lives in. All are lazy, not only the heavy ones: the
# command line's entry point (``feddpsyn.cli``) imports this package first, and pydantic
# alone would add a few tenths of a second to every ``feddpsyn`` command.
_LAZY = {
    "Schema": "feddpsyn.params.schema",
    "draft_schema": "feddpsyn.clients.schema_draft",
    "SessionCreate": "feddpsyn.common.wire",
    "BudgetSpec": "feddpsyn.common.wire",
    "SelectionRequest": "feddpsyn.common.wire",
    "ClientAgent": "feddpsyn.clients.agent",
    "marginals_from_release": "feddpsyn.synthesis.marginals",
    "NoisyMarginal": "feddpsyn.synthesis.marginals",
    "synthesize": "feddpsyn.synthesis.synthesize",
    "SessionPlan": "feddpsyn.params.session_plan",
    "PlanRequest": "feddpsyn.params.plan_request",
    "PrivacyRecord": "feddpsyn.common.wire",
    "epsilon_of": "feddpsyn.dp.pld_accounting",
    "UniformSum": "feddpsyn.dp.pld_accounting",
    "DiscreteGaussian": "feddpsyn.dp.pld_accounting",
    "PureStep": "feddpsyn.dp.pld_accounting",
    "GaussianBound": "feddpsyn.dp.pld_accounting",
    "audit_record": "feddpsyn.dp.audit",
}

if TYPE_CHECKING:
    from feddpsyn.clients.agent import ClientAgent
    from feddpsyn.clients.schema_draft import draft_schema
    from feddpsyn.common.wire import BudgetSpec, PrivacyRecord, SelectionRequest, SessionCreate
    from feddpsyn.dp.audit import audit_record
    from feddpsyn.dp.pld_accounting import (
        DiscreteGaussian,
        GaussianBound,
        PureStep,
        UniformSum,
        epsilon_of,
    )
    from feddpsyn.params.plan_request import PlanRequest
    from feddpsyn.params.schema import Schema
    from feddpsyn.params.session_plan import SessionPlan
    from feddpsyn.synthesis.marginals import NoisyMarginal, marginals_from_release
    from feddpsyn.synthesis.synthesize import synthesize


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value  # later lookups skip this hook
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
