"""tosa_jax.model.no_gc: the cyclic garbage collector is off inside, back on once the last of
nested or concurrent holders leaves (if it was on before), and left off if the caller had it off;
a model loads and traces under it, and the collector is on again afterwards."""

from __future__ import annotations

import gc
import threading
from pathlib import Path

import numpy as np

import tosa_jax
from tosa_jax.model import no_gc

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def test_nested_and_concurrent_holders() -> None:
    assert gc.isenabled()
    inside, leave = threading.Event(), threading.Event()

    def hold() -> None:
        with no_gc():
            inside.set()
            leave.wait(10)

    t = threading.Thread(target=hold)
    t.start()
    inside.wait(10)
    with no_gc():
        with no_gc():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert not gc.isenabled()  # the other thread still holds it
    leave.set()
    t.join()
    assert gc.isenabled()


def test_callers_choice_is_kept() -> None:
    gc.disable()
    try:
        with no_gc():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_model_leaves_the_collector_on() -> None:
    x = np.load(FIXTURES / "cnn_int8.input.npy")
    m = tosa_jax.load(FIXTURES / "cnn_int8.tosa", cache=False)
    m(x)
    assert gc.isenabled()
