"""The built-in tasks' data: `digits` reads scikit-learn's bundled CSV itself (importing scikit-learn cost
each training process ~3 s), and must hold exactly what `load_digits()` returns."""

from __future__ import annotations

import numpy as np


def test_digits_table_is_load_digits_exactly():
    from sklearn.datasets import load_digits

    from hdet_ray.tasks import _digits_table

    table, ref = _digits_table(), load_digits()
    assert table.shape == (1797, 65)
    np.testing.assert_array_equal(table[:, :-1], ref.data)
    np.testing.assert_array_equal(table[:, -1].astype(int), ref.target)


def test_the_task_registry_names_every_builtin():
    from hdet_ray.task_names import BUILTIN
    from hdet_ray.tasks import TASKS, registered_names

    assert sorted(TASKS) == sorted(BUILTIN) and set(BUILTIN) <= set(registered_names())
