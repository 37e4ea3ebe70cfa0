"""synth.lp: HiGHS's answers, as worked out by hand, with nothing on stdout."""

import math

import numpy as np
import pytest
from scipy.sparse import csr_matrix

from synth.lp import solve


def test_a_linear_program_and_its_prices(capfd):
    # max x + y with x + 2y <= 4, 3x + y <= 6: both rows bind, x = 8/5, y = 6/5; the
    # prices p solve p1 + 3 p2 = 1, 2 p1 + p2 = 1: p = (2/5, 1/5), negative for a minimum
    result = solve([-1.0, -1.0], csr_matrix([[1.0, 2.0], [3.0, 1.0]]), -math.inf, [4.0, 6.0],
                   0.0, math.inf)
    assert result.status == "optimal"
    assert result.x == pytest.approx([1.6, 1.2])
    assert result.row_dual == pytest.approx([-0.4, -0.2])
    assert capfd.readouterr() == ("", "")  # HiGHS's banner would break --json


def test_an_integer_program_and_equal_rows():
    # max x + y, x + y <= 3.5, x - y = 1, integers: x = 2, y = 1 (x = 2.25 in the LP)
    rows = np.array([[1.0, 1.0], [1.0, -1.0]])
    result = solve([-1.0, -1.0], rows, [-math.inf, 1.0], [3.5, 1.0], 0.0, math.inf,
                   integer=True)
    assert result.status == "optimal" and list(result.x) == [2.0, 1.0]
    relaxed = solve([-1.0, -1.0], rows, [-math.inf, 1.0], [3.5, 1.0], 0.0, math.inf)
    assert relaxed.x == pytest.approx([2.25, 1.25])


def test_column_bounds_and_an_infeasible_program():
    # max x with x <= 2 (a column bound) and x >= 3 (a row): no solution
    bounded = solve([-1.0], np.zeros((0, 1)), [], [], 0.0, 2.0)
    assert bounded.status == "optimal" and bounded.x == pytest.approx([2.0])
    none = solve([-1.0], np.array([[1.0]]), 3.0, math.inf, 0.0, 2.0)
    assert none.status not in ("optimal", "time")


def test_no_time_is_the_time_limit_not_an_answer():
    rows = np.array([[1.0, 2.0], [3.0, 1.0]])
    for integer in (False, True):
        result = solve([-1.0, -1.0], rows, -math.inf, [4.0, 6.0], 0.0, math.inf, integer,
                       seconds=0.0)
        assert result.status == "time"


def test_integer_flags_per_variable():
    # max x + y with x + y <= 3.5 and y <= 0.5: x whole and y free reach 3.5 (x = 3,
    # y = 0.5); both whole stop at 3 (x = 3, y = 0)
    rows = np.array([[1.0, 1.0]])
    mixed = solve([-1.0, -1.0], rows, -math.inf, 3.5, 0.0, [math.inf, 0.5],
                  integer=[True, False])
    assert mixed.status == "optimal" and list(mixed.x) == pytest.approx([3.0, 0.5])
    whole = solve([-1.0, -1.0], rows, -math.inf, 3.5, 0.0, [math.inf, 0.5], integer=True)
    assert whole.status == "optimal" and list(whole.x) == pytest.approx([3.0, 0.0])
