"""A session's public plan: the layout, the releases, and the noise each release carries.

Privacy model (stated once, enforced by the key server's ledger):

* Neighbouring datasets differ by adding or removing one record of the union (so the row
  count is private too; synthesis estimates it from the noisy 1-ways).
* A release of M marginals has squared L2 sensitivity M (one record moves one cell of each
  marginal by 1). Each server adds independent N_Z(0, sigma2) with sigma2 = M / (2 rho_R),
  so **each view is rho_R-zCDP on its own**: the key server sees the compute server's noise
  only (it decrypts count + noise_CS), the compute server knows its own noise and so sees the
  published value as count + noise_KS, and the public sees the key server's output, a
  post-processing of its view. The released values therefore carry two noises (variance
  2 sigma2); merging them into one noise that protects both views is an open improvement.
* Releases compose additively in rho; the session's rho comes from its (epsilon, delta) by
  the conservative conversion of :mod:`crypto.accounting`.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from crypto.accounting import eps_delta_to_rho, gaussian_sigma2
from params.layout import MarginalLayout
from params.parameter_sets import ParameterSet, get_parameter_set
from params.schema import Schema

__all__ = ["ReleaseSpec", "SessionPlan", "NOISE_TAIL_SIGMAS"]

# A count plus noise must decode unambiguously from k bits: we require max_rows + 40 sigma
# < 2^(k-1). P[|N_Z(0, sigma2)| >= 40 sigma] < 2 exp(-800).
NOISE_TAIL_SIGMAS = 40


@dataclass(frozen=True)
class ReleaseSpec:
    name: str
    marginal_keys: tuple[str, ...]
    rho: Fraction
    sigma2: Fraction


@dataclass(frozen=True)
class SessionPlan:
    schema: Schema
    layout: MarginalLayout
    parameters: ParameterSet
    epsilon: float
    delta: float
    rho_total: Fraction
    releases: tuple[ReleaseSpec, ...]

    @classmethod
    def build(cls, schema: Schema, pairs: list[tuple[int, int]] | None, epsilon: float,
              delta: float, split: dict[str, float], parameter_set: str,
              max_rows: int) -> SessionPlan:
        params = get_parameter_set(parameter_set)
        layout = MarginalLayout.build(schema.domain_sizes, pairs)
        if not layout.two_way:
            raise ValueError("a session needs at least one 2-way marginal")
        rho_total = eps_delta_to_rho(epsilon, delta)
        releases = []
        for name, slots in (("one_way", layout.one_way), ("two_way", layout.two_way)):
            # Fractions of the split are rounded down to 1e-12 so the parts never exceed
            # the whole.
            share = Fraction(int(split[name] * 10 ** 12), 10 ** 12)
            rho = rho_total * share
            sigma2 = gaussian_sigma2(rho, sensitivity2=len(slots))
            releases.append(ReleaseSpec(name, tuple(m.key for m in slots), rho, sigma2))
        plan = cls(schema, layout, params, epsilon, delta, rho_total, tuple(releases))
        plan.check_capacity(max_rows)
        return plan

    def check_capacity(self, max_rows: int) -> None:
        room = 2 ** (self.parameters.count_bits - 1)
        worst_sigma = max(float(r.sigma2) for r in self.releases) ** 0.5
        need = max_rows + NOISE_TAIL_SIGMAS * worst_sigma
        if need >= room:
            raise ValueError(
                f"parameter set {self.parameters.name!r} holds counts below {room}; "
                f"max_rows {max_rows} plus {NOISE_TAIL_SIGMAS} noise sigmas ({need:.0f}) "
                "does not fit: choose a larger parameter set or a smaller max_rows")

    def release(self, name: str) -> ReleaseSpec:
        for r in self.releases:
            if r.name == name:
                return r
        raise KeyError(name)

    def slots_of(self, release: ReleaseSpec):
        keys = set(release.marginal_keys)
        return [m for m in self.layout.marginals if m.key in keys]
