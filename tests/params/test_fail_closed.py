"""Privacy code fails closed: a released count whose noise shape, coin set or pool noise
cannot be found is an error, never a count with less noise.

Each lookup a release makes is forced to miss: the plan's groups of a split release
(``params.run_time.cell_noises``), the compute server's operands of a chunk
(``crypto.joint_noise.joint_operands`` and ``computeserver.release.chunk_task``), the key
server's publication of a split release (``keyserver.releases.Releases``) and the noise
pool (``dp.noise_pool.pool_noise``). Fast: plans only, no circuit.
"""

from dataclasses import replace

import numpy as np
import pytest

from feddpsyn.common.serving import ServiceError
from feddpsyn.computeserver.release import chunk_task
from feddpsyn.crypto.joint_noise import draw_bits, joint_operands
from feddpsyn.dp.noise_pool import pool_noise
from feddpsyn.keyserver.releases import Releases
from feddpsyn.params.plan_request import PlanRequest
from feddpsyn.params.run_time import MissingNoise
from feddpsyn.params.schema import Schema
from feddpsyn.params.session_plan import SessionPlan

SCHEMA = Schema.from_dict({"name": "closed", "columns": [
    {"name": "grade", "type": "categorical", "i2s": list("abcdefgh")},
    {"name": "sex", "type": "categorical", "i2s": ["F", "M"]},
    {"name": "smoker", "type": "categorical", "i2s": ["no", "yes"]}]})


@pytest.fixture(scope="module")
def split():
    """A noisy-greedy plan at eps 1 and its 2-way release resolved on every pair: a split
    release of joint groups."""
    plan = SessionPlan.build(PlanRequest(SCHEMA, 1.0, 1e-6, 1000, parameter_set="test-small",
                                         selection="noisy-greedy", noise="auto"))
    pairs = [slot.attrs for slot in plan.layout.two_way]
    resolved = plan.resolve(plan.release("two_way"), pairs)
    assert resolved.parts and resolved.joint is not None
    return plan, resolved


def test_the_resolved_release_covers_every_cell_with_a_shape(split):
    plan, resolved = split
    noises = plan.cell_noises(resolved)
    assert all(shape is not None for _, shape in noises)
    cells = np.concatenate([positions for positions, _ in noises])
    assert sorted(cells.tolist()) == plan.layout.cells_of(plan.slots_of(resolved)).tolist()


def test_a_group_without_its_shape_is_an_error(split):
    plan, resolved = split
    broken = replace(resolved, parts=(replace(resolved.parts[0], joint=None),
                                      *resolved.parts[1:]))
    with pytest.raises(MissingNoise, match="no joint noise shape"):
        plan.cell_noises(broken)


def test_a_cell_in_no_group_is_an_error(split):
    plan, resolved = split
    if len(resolved.parts) == 1:
        pytest.skip("one group only")
    broken = replace(resolved, parts=resolved.parts[1:])
    with pytest.raises(MissingNoise, match="covers"):
        plan.cell_noises(broken)


def test_a_two_server_release_with_a_shaped_group_is_an_error(split):
    plan, resolved = split
    with pytest.raises(MissingNoise, match="two-server"):
        plan.cell_noises(replace(resolved, joint=None))


def test_a_selected_cell_without_a_shape_gets_no_operands(split):
    plan, resolved = split
    shape = resolved.parts[0].joint
    columns = plan.joint_columns
    select = np.array([1, 1, 0, 1])
    # A padding cell (select 0) may have no shape; a selected one may not.
    weights, _ = joint_operands([shape, shape, None, shape], draw_bits(4, columns), select,
                                columns)
    assert not weights[2].any() and weights[0].any()
    with pytest.raises(ValueError, match="carry no joint noise shape"):
        joint_operands([shape, None, None, shape], draw_bits(4, columns), select, columns)
    with pytest.raises(ValueError, match="carry no joint noise shape"):
        chunk_task([np.zeros(4)], np.zeros(4, np.int64), select, 12,
                   shapes=[shape, shape, shape, None], columns=columns, coins=b"coins")


def test_a_chunk_without_noise_or_coins_is_an_error(split):
    plan, _ = split
    select = np.ones(4, np.int64)
    with pytest.raises(ValueError, match="needs the key server's coins"):
        chunk_task([np.zeros(4)], np.zeros(4, np.int64), select, 12,
                   shapes=[None] * 4, columns=plan.joint_columns, coins=None)
    with pytest.raises(ValueError, match="noise or joint shapes"):
        chunk_task([np.zeros(4)], np.zeros(4, np.int64), select, 12, columns=4, coins=b"c")
    with pytest.raises(ValueError, match="needs this server's noise"):
        chunk_task([np.zeros(4)], np.zeros(4, np.int64), select, 12, columns=0)


def test_the_key_server_publishes_no_marginal_outside_a_group(split):
    plan, resolved = split
    released = np.zeros(sum(s.size for s in plan.slots_of(resolved)), dtype=np.int64)
    result = Releases._result("s", plan, resolved, released)
    assert all(m.joint is not None for m in result.marginals.values())
    broken = replace(resolved, parts=(replace(resolved.parts[0], joint=None),
                                      *resolved.parts[1:]))
    with pytest.raises(ServiceError, match="nothing is released"):
        Releases._result("s", plan, broken, released)


def test_a_noise_label_never_drawn_is_an_error():
    import io

    buffer = io.BytesIO()
    np.savez(buffer, one_way=np.arange(5))
    assert pool_noise(buffer.getvalue(), "one_way", np.array([1, 3])).tolist() == [1, 3]
    with pytest.raises(KeyError, match="no noise was drawn"):
        pool_noise(buffer.getvalue(), "two_way", np.array([0]))
