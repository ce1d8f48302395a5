"""Differential privacy in clear: exact samplers, accounting and selection mechanisms.

Every module here states the privacy or exactness claim it makes, next to the code that
makes it: exact discrete Gaussian and Laplace sampling from the OS CSPRNG
(``dp.discrete_gaussian``), the one uniform shuffle (``dp.shuffle``), zCDP accounting and
its (eps, delta) conversion (``dp.accounting``), the exact accountant of binomial noise
(``dp.binomial_accounting``), the exponential mechanism and permute-and-flip
(``dp.exponential_mechanism``, ``dp.permute_and_flip``), each server's noise drawn ahead of
the data (``dp.noise_pool``) and PrivSyn's pair rule (``dp.pair_selection``). Nothing here
needs FHE; ``crypto`` builds on it.
"""
