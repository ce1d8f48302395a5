"""A release's public spec (its marginals, rho, Gaussian sigma2 and joint shape, if any) and
the noise a server draws for it.

Claim: a release of M marginals has squared L2 sensitivity M, so its two-server form (each
server an independent N_Z(0, sigma2), sigma2 = M / (2 rho)) is rho-zCDP in each server's
view and the public's (``docs/privacy-plan.md``, "Neighbours and the two-server noise"); a
selected release is charged for the pairs actually chosen, and nothing when none are
("Releases after a selection"). Every noise a server may add is known from the public plan
alone (:func:`noise_draws`), so it is drawn before any data.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from feddpsyn.dp.accounting import gaussian_sigma2
from feddpsyn.dp.joint_noise_accounting import JointNoiseShape, release_marginals
from feddpsyn.dp.noise_pool import NoiseDraw
from feddpsyn.params.layout import MarginalLayout
from feddpsyn.params.modes import NoiseMode, SelectionMode
from feddpsyn.params.noise_rules import JOINT_TAIL

__all__ = ["ReleaseSpec", "NOISE_TAIL_SIGMAS", "SCORE_NOISE", "release_count", "split_share",
           "two_way_rho", "selected_release", "noise_label", "noise_draws"]

# The label of noisy-greedy's per-pair score noise in a server's noise pool.
SCORE_NOISE = "selection_scores"

# A count plus noise must decode unambiguously from k bits: we require max_rows + 40 sigma
# < 2^(k-1). P[|N_Z(0, sigma2)| >= 40 sigma] < 2 exp(-800).
NOISE_TAIL_SIGMAS = 40


def split_share(rho_total: Fraction, fraction: float) -> Fraction:
    """One part of the session's rho: the split's fraction rounded down to 1e-12, so the parts
    never exceed the whole. The fraction is read as the decimal it prints as (0.940341631,
    not the binary float below it), so shares written to 1e-12 that add up to 1 give parts
    that add up to the whole exactly."""
    exact = Fraction(repr(float(fraction)))
    return rho_total * Fraction(math.floor(exact * 10 ** 12), 10 ** 12)


def two_way_rho(rho_total: Fraction, split: dict[str, float],
                selection_charged: Fraction) -> Fraction:
    """The 2-way release's rho after a selection: its share plus what the selection's epsilon
    grid left unspent of its own (``docs/privacy-plan.md``, "Releases after a selection");
    noisy-greedy charges exactly its share, so nothing is left over. Exact rationals, so a
    session spends exactly its rho."""
    return (split_share(rho_total, split["two_way"])
            + (split_share(rho_total, split["selection"]) - selection_charged))


@dataclass(frozen=True)
class ReleaseSpec:
    name: str
    marginal_keys: tuple[str, ...]
    rho: Fraction
    sigma2: Fraction
    # The one noise neither server knows (``docs/privacy-plan.md``, "The joint release"), or
    # None: two servers' Gaussians. A release split by PrivSyn's allocation: the widest shape
    # any of its groups may take (the envelope the circuit and the key server's bits are
    # sized for).
    joint: JointNoiseShape | None = None
    # How a selected release's rho is shared over its pairs: "even" (one noise level) or
    # "privsyn" (c^(2/3), one group per pair size, ``dp.privsyn_allocation``).
    allocation: str = "even"
    # A resolved "privsyn" release: its groups, each a release of its own pairs with its own
    # rho, sigma2 and joint shape (:func:`params.run_time.resolve`).
    parts: tuple[ReleaseSpec, ...] = ()

    @property
    def noise_kind(self) -> NoiseMode:
        return NoiseMode.TWO_SERVER if self.joint is None else NoiseMode.JOINT

    @property
    def split_pending(self) -> bool:
        """A "privsyn" release not yet resolved: its envelope, its groups chosen at run time
        (``params.run_time``)."""
        return self.allocation == "privsyn" and self.joint is not None and not self.parts

    @property
    def per_count_variance(self) -> Fraction:
        """Var(published - true) per count, by construction: the joint shape's variance, or
        the two servers' independent Gaussians (2 sigma2). An unresolved "privsyn" release:
        its envelope's, an upper bound; a resolved one: see
        :func:`params.run_time.per_count_variance` (it differs by group)."""
        if self.parts:
            raise ValueError("a split release's variance differs by group: ask the plan")
        return self.joint.variance if self.joint is not None else 2 * self.sigma2

    @property
    def key_server_noise_bound(self) -> float:
        """How far below zero an honest chunk can decode in the key server's view: the joint
        noise's hard bound (a resolved split release: its envelope's or a wider group's, a
        1-way top-up's shape may be wider: ``params.run_time``), or NOISE_TAIL_SIGMAS of the
        compute server's Gaussian."""
        if self.joint is not None:
            spans = [self.joint.span]
            for part in self.parts:  # a joint release's groups are joint
                if part.joint is None:
                    raise ValueError("a joint release's group has no joint shape")
                spans.append(part.joint.span)
            return float(max(spans) // 2)
        return NOISE_TAIL_SIGMAS * float(self.sigma2) ** 0.5

    @property
    def published_noise_bound(self) -> float:
        """The bound on |published - true| a count's width must leave room for."""
        if self.joint is not None:
            return float(self.joint.span // 2)
        return NOISE_TAIL_SIGMAS * float(2 * self.sigma2) ** 0.5

    def row_bound_noise(self) -> tuple[Fraction, int]:
        """(sub-Gaussian variance proxy per noise, number of noises) of a published count:
        N_Z(0, sigma2) has proxy sigma2 (two of them); a sum of centred uniforms on
        {0..2^w - 1} has proxy (2^w - 1)^2 / 4 each (Hoeffding), one noise."""
        if self.joint is None:
            return self.sigma2, 2
        return self.joint.hoeffding_proxy, 1

    def failure(self) -> float:
        """The joint noise's conditioning mass over the release's M marginals (a delta
        term); 0 for the two-server noise; a resolved split release's, its groups' sum."""
        if self.parts:
            return sum(part.failure() for part in self.parts)
        if self.joint is None:
            return 0.0
        return release_count(self) * self.joint.pair().failure(JOINT_TAIL)


def release_count(spec: ReleaseSpec) -> int:
    """M, the marginals a record's neighbours differ in: sigma2 = M / (2 rho)."""
    return release_marginals(spec.rho, spec.sigma2)


def selected_release(release: ReleaseSpec, keys: tuple[str, ...]) -> ReleaseSpec:
    """A selected release over the chosen marginals ``keys``: sensitivity len(keys), so
    sigma2 = len(keys) / (2 rho) (for em the plan's own sigma2: len(keys) = rounds); an
    empty selection releases nothing and costs nothing."""
    if not keys:
        return ReleaseSpec(release.name, (), Fraction(0), Fraction(0))
    # Two-server, the even split: its noise was drawn per possible m (noise_draws).
    return ReleaseSpec(release.name, keys, release.rho, gaussian_sigma2(release.rho, len(keys)))


def noise_label(spec: ReleaseSpec, selection_mode: SelectionMode | None) -> str:
    """The pool label of a (resolved) release's noise: noisy-greedy's 2-way release has one
    draw per possible number of pairs (``dp.noise_pool``)."""
    if selection_mode == SelectionMode.NOISY_GREEDY and spec.name == "two_way":
        return f"two_way@{len(spec.marginal_keys)}"
    return spec.name


def noise_draws(layout: MarginalLayout, releases: tuple[ReleaseSpec, ...],
                selection_mode: SelectionMode | None,
                score_sigma2: Fraction | None = None) -> list[NoiseDraw]:
    """Every noise vector a server may add in this session, known from the public plan alone:
    a fixed release's cells; a selected release's every pair cell (per possible number of
    pairs for noisy-greedy); noisy-greedy's per-pair score noise (``score_sigma2`` None: the
    scores are joint, nothing to draw). A joint release draws
    nothing here: its noise is the two servers' XOR-shared bits (``crypto.joint_noise``);
    a split release ("privsyn") keeps the per-m draws of the even two-server release it
    falls back to where the rule refuses a group (:func:`params.run_time.resolve`)."""
    total = layout.total_cells
    pair_cells = layout.cells_of(layout.two_way)
    draws = []
    for spec in releases:
        if spec.joint is not None and spec.allocation != "privsyn":
            continue
        if spec.marginal_keys:
            keys = set(spec.marginal_keys)
            cells = layout.cells_of([m for m in layout.marginals if m.key in keys])
            draws.append(NoiseDraw(spec.name, spec.sigma2, cells, total))
        elif selection_mode == SelectionMode.NOISY_GREEDY:
            for m in range(1, len(layout.two_way) + 1):
                draws.append(NoiseDraw(f"{spec.name}@{m}", gaussian_sigma2(spec.rho, m),
                                       pair_cells, total))
        else:
            draws.append(NoiseDraw(spec.name, spec.sigma2, pair_cells, total))
    if selection_mode == SelectionMode.NOISY_GREEDY and score_sigma2 is not None:
        pairs = len(layout.two_way)
        draws.append(NoiseDraw(SCORE_NOISE, score_sigma2, np.arange(pairs), pairs))
    return draws
