"""Linear and integer programs, solved by HiGHS through highspy:

    solve(cost, rows, row_lower, row_upper, col_lower, col_upper, integer, seconds)

minimizes cost . x subject to row_lower <= rows x <= row_upper and col_lower <= x <=
col_upper (math.inf and -math.inf: no bound), x integer where `integer`.

Not scipy.optimize, which calls the same HiGHS: importing it costs about 28 MB of
memory (numpy and scipy.sparse already loaded), and dgx2x2's constructed allgather
peaked at 179 MiB against a goal of 160. highspy's own Highs class prints HiGHS's
banner on stdout when made (a --json reader would read it), so its core class is used,
told to be silent before anything runs. Cost: HiGHS's; the matrix is handed over
column-wise without a copy where it is one already.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass
class Solution:
    status: str  # "optimal", "time" (the time limit: x may still hold a solution), or HiGHS's word
    x: np.ndarray | None  # the variables' values, None where HiGHS has none
    row_dual: np.ndarray | None  # the rows' prices (LP only): d objective / d row bound


def solve(cost, rows, row_lower, row_upper, col_lower, col_upper, integer=False,
          seconds: float = math.inf) -> Solution:
    """The program above; `rows` a scipy.sparse matrix (or a numpy array); `integer`
    True (every variable), False, or one flag per variable."""
    import highspy
    from highspy._core import _Highs
    from scipy.sparse import csc_matrix

    a = csc_matrix(rows, dtype=float)
    n_rows, n_cols = a.shape
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = n_cols, n_rows
    lp.col_cost_ = np.asarray(cost, dtype=float)
    lp.col_lower_, lp.col_upper_ = _bounds(col_lower, n_cols), _bounds(col_upper, n_cols)
    lp.row_lower_, lp.row_upper_ = _bounds(row_lower, n_rows), _bounds(row_upper, n_rows)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_, lp.a_matrix_.index_, lp.a_matrix_.value_ = a.indptr, a.indices, a.data
    flags = np.broadcast_to(np.asarray(integer, dtype=bool), (n_cols,))
    if flags.any():
        lp.integrality_ = [highspy.HighsVarType.kInteger if f else
                           highspy.HighsVarType.kContinuous for f in flags]
    h = _Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("time_limit", max(float(seconds), 0.0))  # below 0: none, to HiGHS
    if h.passModel(lp) == highspy.HighsStatus.kError:  # a bug: bounds or matrix malformed
        raise RuntimeError(f"HiGHS refused a program of {n_rows} rows, {n_cols} columns")
    h.run()
    status = h.getModelStatus()
    solution = h.getSolution()
    x = np.array(solution.col_value) if solution.value_valid else None
    dual = np.array(solution.row_dual) if solution.dual_valid else None
    word = ("optimal" if status == highspy.HighsModelStatus.kOptimal else
            "time" if status in (highspy.HighsModelStatus.kTimeLimit,
                                 highspy.HighsModelStatus.kIterationLimit) else
            h.modelStatusToString(status))
    return Solution(word, x, dual)


def _bounds(values, n: int) -> np.ndarray:
    """n bounds from a number or a sequence (HiGHS reads math.inf as no bound)."""
    return np.broadcast_to(np.asarray(values, dtype=float), (n,)).copy()
