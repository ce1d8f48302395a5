"""The simulation's noisy-greedy 2-way release with one joint noise and PrivSyn's allocation
takes its shapes, or its even two-server fallback, from the servers' own rule
(``fedbench.methods.feddpsyn_sim.servers_split`` calls ``SessionPlan.split_release``)."""

from feddpsyn.fedbench.methods.feddpsyn_sim import servers_split
from feddpsyn.params.plan_request import PlanRequest
from feddpsyn.params.schema import Schema
from feddpsyn.params.session_plan import SessionPlan

SCHEMA = Schema.from_dict({"name": "sim", "columns": [
    {"name": f"m{i}", "type": "categorical", "i2s": list("abcdef"[:size])}
    for i, size in enumerate((2, 3, 4, 6))]})


def test_the_simulated_split_is_the_servers_resolution():
    served = SessionPlan.build(PlanRequest(SCHEMA, 2.0, 1e-6, 2000, parameter_set="test-small",
                                           selection="noisy-greedy", noise="auto"))
    two = served.release("two_way")
    pairs = [s.attrs for s in served.layout.two_way]
    for chosen in (pairs, pairs[::2], pairs[:1]):
        parts, why = servers_split(SCHEMA, 2.0, 1e-6, 2000, chosen, two.rho, "test-small")
        resolved = served.resolve(two, chosen)
        if resolved.parts:
            assert why == "" and parts == resolved.parts
        else:  # the even two-server release, with the rule's reason
            assert why and [p.joint for p in parts] == [None]
            assert parts[0].marginal_keys == resolved.marginal_keys
            assert parts[0].sigma2 == resolved.sigma2
