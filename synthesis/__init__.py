"""Plaintext synthesis (post-processing of released noisy marginals): consistency, then
Private-PGM on a bounded junction tree or PrivSyn's GUM, then decoding to the original
columns and values.

One module here spends budget: ``synthesis.aim``, AIM's mechanism, which measures and
selects only through an oracle (in clear for central AIM, in MPC for DistAIM) and fits
``synthesis.graphical_model`` (post-processing) between rounds."""

from feddpsyn.synthesis.marginals import NoisyMarginal, combine_repeated, marginals_from_release
from feddpsyn.synthesis.synthesize import synthesize

__all__ = ["NoisyMarginal", "combine_repeated", "marginals_from_release", "synthesize"]
