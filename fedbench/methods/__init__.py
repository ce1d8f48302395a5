"""The synthesis methods the utility benchmark compares, one module each.

A method takes the clients' encoded records (``owner`` says which client holds each record),
the schema and a budget, and returns synthetic encoded records with its own accounting.
"""

from fedbench.methods.base import MethodResult, budget_rho
from fedbench.methods.central_mst import central_mst
from fedbench.methods.central_privsyn import central_privsyn
from fedbench.methods.concat import concat
from fedbench.methods.feddpsyn_sim import feddpsyn_sim

METHODS = {
    "central-mst": central_mst,
    "central-privsyn": central_privsyn,
    "concat": concat,
    "feddpsyn": feddpsyn_sim,
}

__all__ = ["METHODS", "MethodResult", "budget_rho"]
