"""Plaintext synthesis (post-processing of released noisy marginals): consistency, then
Private-PGM (``mbi``) or PrivSyn's GUM, then decoding to the original columns and values."""

from synthesis.marginals import NoisyMarginal, marginals_from_release
from synthesis.synthesize import synthesize

__all__ = ["NoisyMarginal", "marginals_from_release", "synthesize"]
