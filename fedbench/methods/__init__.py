"""The synthesis methods the utility benchmark compares, one module each.

A method takes the clients' encoded records (``owner`` says which client holds each record),
the schema and a budget, and returns synthetic encoded records with its own accounting.
"""

from feddpsyn.fedbench.methods.adafedprivsyn import adafedprivsyn
from feddpsyn.fedbench.methods.augflaim_private import augflaim_private
from feddpsyn.fedbench.methods.base import MethodResult, budget_rho
from feddpsyn.fedbench.methods.cape_dpcda import cape_dpcda
from feddpsyn.fedbench.methods.central_aim import central_aim, central_aim_4mb
from feddpsyn.fedbench.methods.central_mst import central_mst
from feddpsyn.fedbench.methods.central_privsyn import central_privsyn, central_privsyn_pgm
from feddpsyn.fedbench.methods.central_privsyn_all import central_privsyn_all
from feddpsyn.fedbench.methods.concat import concat
from feddpsyn.fedbench.methods.distaim_method import distaim
from feddpsyn.fedbench.methods.dpdsyn import dpdsyn, dpdsyn_dp
from feddpsyn.fedbench.methods.feddpsyn_sim import (feddpsyn_all_pairs, feddpsyn_all_pairs_joint,
                                                    feddpsyn_joint, feddpsyn_noisy_greedy,
                                                    feddpsyn_noisy_greedy_joint,
                                                    feddpsyn_noisy_greedy_joint_privsyn,
                                                    simulated_session)
from feddpsyn.fedbench.methods.feddpsyn_served import (feddpsyn_default, feddpsyn_served_all,
                                                       feddpsyn_served_all_pgm, feddpsyn_served_em,
                                                       feddpsyn_served_em_pgm,
                                                       feddpsyn_served_noisy_greedy,
                                                       feddpsyn_served_noisy_greedy_pgm,
                                                       feddpsyn_served_no_topup)
from feddpsyn.fedbench.methods.fedprivsyn import fedprivsyn
from feddpsyn.fedbench.methods.naive_flaim import naive_flaim

METHODS = {
    "augflaim-private": augflaim_private,
    "central-aim": central_aim,
    "central-aim-4mb": central_aim_4mb,
    "naive-flaim": naive_flaim,
    "central-mst": central_mst,
    "central-privsyn": central_privsyn,
    "central-privsyn-all": central_privsyn_all,
    "central-privsyn-pgm": central_privsyn_pgm,
    "concat": concat,
    "feddpsyn": simulated_session,
    "feddpsyn-noisy-greedy": feddpsyn_noisy_greedy,
    "feddpsyn-noisy-greedy-joint": feddpsyn_noisy_greedy_joint,
    "feddpsyn-noisy-greedy-joint-privsyn": feddpsyn_noisy_greedy_joint_privsyn,
    "feddpsyn-all": feddpsyn_all_pairs,
    "feddpsyn-joint": feddpsyn_joint,
    "feddpsyn-all-joint": feddpsyn_all_pairs_joint,
    "feddpsyn-served": feddpsyn_served_em,
    "feddpsyn-served-all": feddpsyn_served_all,
    "feddpsyn-served-noisy-greedy": feddpsyn_served_noisy_greedy,
    "feddpsyn-served-all-pgm": feddpsyn_served_all_pgm,
    "feddpsyn-served-pgm": feddpsyn_served_em_pgm,
    "feddpsyn-served-noisy-greedy-pgm": feddpsyn_served_noisy_greedy_pgm,
    "feddpsyn-served-no-topup": feddpsyn_served_no_topup,
    # What the servers do by default (plan, noise, selection, synthesis).
    "feddpsyn-default": feddpsyn_default,
    "fedprivsyn": fedprivsyn,
    "adafedprivsyn": adafedprivsyn,
    "dpdsyn": dpdsyn,
    "dpdsyn-dp": dpdsyn_dp,
    "cape-dpcda": cape_dpcda,
    "distaim": distaim,
}

# What each method is, for a reader of the results (``docs/benchmarks.md``'s methods table is
# checked against it): the servers' own plans, the central references a curator would run,
# the federated methods of the seed papers, and what-if simulations of plans the servers do
# not serve (kept to measure one choice at a time).
SERVED, CENTRAL, FEDERATED, WHAT_IF = ("served plan", "central reference",
                                       "federated (seed papers)", "what-if")
KINDS = {
    "feddpsyn-default": SERVED,
    "feddpsyn-served": SERVED,
    "feddpsyn-served-all": SERVED,
    "feddpsyn-served-noisy-greedy": SERVED,
    "feddpsyn-served-all-pgm": SERVED,
    "feddpsyn-served-pgm": SERVED,
    "feddpsyn-served-noisy-greedy-pgm": SERVED,
    "feddpsyn-served-no-topup": SERVED,
    "central-aim": CENTRAL,
    "central-aim-4mb": CENTRAL,
    "central-mst": CENTRAL,
    "central-privsyn": CENTRAL,
    "central-privsyn-all": CENTRAL,
    "central-privsyn-pgm": CENTRAL,
    "concat": FEDERATED,
    "fedprivsyn": FEDERATED,
    "adafedprivsyn": FEDERATED,
    "dpdsyn": FEDERATED,
    "dpdsyn-dp": FEDERATED,
    "cape-dpcda": FEDERATED,
    "distaim": FEDERATED,
    "naive-flaim": FEDERATED,
    "augflaim-private": FEDERATED,
    "feddpsyn": WHAT_IF,
    "feddpsyn-noisy-greedy": WHAT_IF,
    "feddpsyn-noisy-greedy-joint": WHAT_IF,
    "feddpsyn-noisy-greedy-joint-privsyn": WHAT_IF,
    "feddpsyn-all": WHAT_IF,
    "feddpsyn-joint": WHAT_IF,
    "feddpsyn-all-joint": WHAT_IF,
}

__all__ = ["METHODS", "KINDS", "MethodResult", "budget_rho"]
