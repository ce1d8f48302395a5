"""computeserver.executor_choice: the executor a compute server starts with, from its flags."""

import pytest

from feddpsyn.computeserver.executor import InProcessExecutor, LocalPoolExecutor
from feddpsyn.computeserver.executor_choice import make_executor


def test_the_flags_choose_the_executor():
    assert isinstance(make_executor(), InProcessExecutor)
    assert isinstance(make_executor(0), InProcessExecutor)
    pool = make_executor(2)
    try:
        assert isinstance(pool, LocalPoolExecutor)
    finally:
        pool.close()
    with pytest.raises(ValueError, match="workers: 0"):
        make_executor(-1)
