"""Pipeline schedules: exact bubbles with free communication, in-flight micro-batches."""

from __future__ import annotations

from collections import Counter
from fractions import Fraction

from hypothesis import given, settings
from hypothesis import strategies as st

from sim.training.schedule.ideal import simulate_ideal
from sim.training.schedule.pipeline import (
    SCHEDULES,
    gpipe,
    in_flight,
    interleaved_1f1b,
    make_schedule,
    one_f_one_b,
)

T_F, T_B = Fraction(1), Fraction(2)  # t_b = 2 t_f, exact arithmetic


def test_schedule_names() -> None:
    """Schedules are plain functions looked up by name."""
    assert set(SCHEDULES) == {"gpipe", "1f1b", "interleaved"}


@settings(max_examples=60, deadline=None)
@given(p=st.integers(1, 8), m=st.integers(1, 24), name=st.sampled_from(["gpipe", "1f1b"]))
def test_gpipe_and_1f1b_bubble_is_exact(p: int, m: int, name: str) -> None:
    """GPipe and 1F1B: bubble fraction (p-1)/(m+p-1), exactly (Huang 2019; Narayanan 2021)."""
    timeline = simulate_ideal(make_schedule(name, p, m), T_F, T_B)
    assert timeline.bubble_fraction == Fraction(p - 1, m + p - 1)
    assert timeline.makespan_s == (m + p - 1) * (T_F + T_B)


@settings(max_examples=60, deadline=None)
@given(p=st.integers(1, 6), groups=st.integers(1, 4), v=st.integers(1, 4))
def test_interleaved_bubble_is_exact(p: int, groups: int, v: int) -> None:
    """Interleaved 1F1B: bubble time (p-1)(t_f+t_b)/v (Narayanan et al. 2021, sec. 2.2.2),
    i.e. (p-1)/(v m) of the ideal time, or (p-1)/(v m + p - 1) of the makespan."""
    m = groups * p
    timeline = simulate_ideal(interleaved_1f1b(p, m, v), T_F, T_B)
    assert timeline.bubble_fraction == Fraction(p - 1, v * m + p - 1)
    ideal = m * (T_F + T_B)
    assert (timeline.makespan_s - ideal) / ideal == Fraction(p - 1, v * m)


@settings(max_examples=60, deadline=None)
@given(p=st.integers(1, 6), groups=st.integers(1, 4), v=st.integers(1, 3),
       name=st.sampled_from(["gpipe", "1f1b", "interleaved"]))  # fmt: skip
def test_every_op_runs_once_and_forward_precedes_backward(
    p: int, groups: int, v: int, name: str
) -> None:
    """Each stage runs F and B of every (micro-batch, chunk) exactly once, F first."""
    m = groups * p
    sched = make_schedule(name, p, m, v)
    chunks = v if name == "interleaved" else 1
    for ops in sched:
        assert Counter(ops) == Counter(
            (k, i, c) for k in "FB" for i in range(m) for c in range(chunks)
        )
        for i in range(m):
            for c in range(chunks):
                assert ops.index(("F", i, c)) < ops.index(("B", i, c))


@settings(max_examples=40, deadline=None)
@given(p=st.integers(1, 8), m=st.integers(1, 24))
def test_1f1b_holds_fewer_micro_batches_than_gpipe_with_the_same_bubble(p: int, m: int) -> None:
    """1F1B keeps at most p micro-batches in flight per stage, GPipe all m; same bubble."""
    assert max(in_flight(one_f_one_b(p, m))) == min(p, m)
    assert in_flight(gpipe(p, m)) == [m] * p
    b1 = simulate_ideal(one_f_one_b(p, m), T_F, T_B).bubble_fraction
    assert b1 == simulate_ideal(gpipe(p, m), T_F, T_B).bubble_fraction


def test_interleaved_first_stage_holds_megatron_count() -> None:
    """Interleaving holds p (1 + (p-1)/(p v)) micro-batches on the first stage."""
    p, v = 4, 2
    assert in_flight(interleaved_1f1b(p, 8, v))[0] == p * (1 + (p - 1) / (p * v))
