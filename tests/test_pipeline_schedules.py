"""Pipeline schedules: exact bubbles with free communication, in-flight micro-batches."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.errors import ConfigError
from sim.scenario.load import load_scenario
from sim.training.schedule.ideal import simulate_ideal
from sim.training.schedule.pipeline import (
    SCHEDULES,
    chunk_in_flight,
    gpipe,
    held,
    in_flight,
    interleaved_1f1b,
    make_schedule,
    one_f_one_b,
)
from sim.training.step import simulate_step
from sim.workload.plan_checks import group_error

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


@settings(max_examples=60, deadline=None)
@given(p=st.integers(1, 12), m=st.integers(1, 40), name=st.sampled_from(["gpipe", "1f1b"]))
def test_held_closed_forms_are_the_schedules_counts(p: int, m: int, name: str) -> None:
    """``held`` answers GPipe and 1F1B without building them: exactly what counting the
    built schedule gives, per stage and per chunk."""
    schedule = make_schedule(name, p, m)
    assert held(name, p, m) == (
        tuple(in_flight(schedule)),
        tuple(tuple(c) for c in chunk_in_flight(schedule)),
    )


def test_held_refuses_what_the_schedules_refuse() -> None:
    """The closed forms check their arguments as the schedule builders do."""
    for name in ("gpipe", "1f1b"):
        with pytest.raises(ValueError, match="must be >= 1"):
            held(name, 4, 0)


def test_interleaved_first_stage_holds_megatron_count() -> None:
    """Interleaving holds p (1 + (p-1)/(p v)) micro-batches on the first stage."""
    p, v = 4, 2
    assert in_flight(interleaved_1f1b(p, 8, v))[0] == p * (1 + (p - 1) / (p * v))


# -- Megatron-Core's micro-batch groups (``parallel.microbatch_group_size``) ----------------


def _megatron_lm_step(k: int, p: int, v: int, forward: bool) -> tuple[str, int, int]:
    """Megatron-LM's original mapping of a stage's k-th forward (backward) to (micro-batch,
    chunk): groups of exactly p micro-batches (``get_model_chunk_id`` before the tables)."""
    group, within = divmod(k, p * v)
    chunk = within // p
    return ("F" if forward else "B", group * p + within % p, chunk if forward else v - 1 - chunk)


@settings(max_examples=40, deadline=None)
@given(p=st.integers(2, 8), groups=st.integers(1, 4), v=st.integers(2, 4))
def test_groups_of_pp_are_megatron_lms_original_schedule(p: int, groups: int, v: int) -> None:
    """The default group (n = pp) orders every stage's ops as the original interleaved
    schedule did, with its warm-up of 2 (p - s - 1) + (v - 1) p chunk forwards."""
    m, total = groups * p, groups * p * v
    for s, ops in enumerate(interleaved_1f1b(p, m, v)):
        warm = min(2 * (p - s - 1) + (v - 1) * p, total)
        fwd = [_megatron_lm_step(k, p, v, True) for k in range(total)]
        bwd = [_megatron_lm_step(k, p, v, False) for k in range(total)]
        want = fwd[:warm] + [x for k in range(total - warm) for x in (fwd[warm + k], bwd[k])]
        assert ops == [*want, *bwd[total - warm :]]
        assert ops == interleaved_1f1b(p, m, v, p)[s]


def test_groups_follow_megatron_cores_schedule_table() -> None:
    """p 2, v 2, 6 micro-batches in groups of 3 (get_schedule_table): chunk 0 of 0-2, chunk
    1 of 0-2, then 3-5; stage 0 warms up with 2 (p - 1) + (v - 1) n = 5 chunk forwards,
    then alternates: the 6th forward, the 1st backward (chunk reversed), the 7th..."""
    ops = interleaved_1f1b(2, 6, 2, 3)[0]
    assert [f"{k}{mb}.{c}" for k, mb, c in ops[:8]] == [
        "F0.0",
        "F1.0",
        "F2.0",
        "F0.1",
        "F1.1",
        "F2.1",
        "B0.1",
        "F3.0",
    ]
    # the last group takes every micro-batch left: 7 in groups of 4 on 3 stages = 4 + 3
    fwd = [f"{mb}.{c}" for k, mb, c in interleaved_1f1b(3, 7, 2, 4)[2] if k == "F"]
    assert fwd == ["0.0", "1.0", "2.0", "3.0", "0.1", "1.1", "2.1", "3.1",
                   "4.0", "5.0", "6.0", "4.1", "5.1", "6.1"]  # fmt: skip


@st.composite
def _grouped(draw: st.DrawFn) -> tuple[int, int, int, int]:
    p, v = draw(st.integers(2, 6)), draw(st.integers(2, 3))
    m = draw(st.integers(p, 5 * p))
    n = draw(st.integers(p, m).filter(lambda n: group_error(p, m, n) is None))
    return p, m, v, n


@settings(max_examples=60, deadline=None)
@given(case=_grouped())
def test_any_allowed_group_runs_every_op_once_without_deadlock(
    case: tuple[int, int, int, int],
) -> None:
    """Each stage runs F and B of every (micro-batch, chunk) once, F first, and the
    schedule completes with free communication (no stage waits forever)."""
    p, m, v, n = case
    sched = interleaved_1f1b(p, m, v, n)
    for ops in sched:
        assert Counter(ops) == Counter((k, i, c) for k in "FB" for i in range(m) for c in range(v))
        for i in range(m):
            for c in range(v):
                assert ops.index(("F", i, c)) < ops.index(("B", i, c))
    ideal = m * (T_F + T_B)
    assert simulate_ideal(sched, T_F, T_B).makespan_s >= ideal


@settings(max_examples=30, deadline=None)
@given(p=st.integers(2, 6), v=st.integers(2, 3), groups=st.integers(2, 4))
def test_longer_groups_hold_more_on_the_first_stage(p: int, v: int, groups: int) -> None:
    """Stage 0 warms up with (v - 1) n chunk forwards more than 2 (p - 1): a longer group
    holds more activations (why Megatron-Core defaults to n = pp)."""
    m = groups * p
    held = [in_flight(interleaved_1f1b(p, m, v, n))[0] for n in range(p, m + 1) if m % n == 0]
    assert held == sorted(held)


def test_groups_megatron_core_refuses_are_refused() -> None:
    assert group_error(4, 12, 3) == "3 is outside [pp, micro-batches] = [4, 12]"
    assert group_error(4, 10, 4) is not None and group_error(4, 10, 5) is None
    with pytest.raises(ValueError, match="last group has 2"):
        interleaved_1f1b(4, 10, 2)


def test_the_scenario_key_reaches_the_step_and_bad_values_are_config_errors() -> None:
    """100 micro-batches on 8 stages: interleaving needs groups (100 % 8 != 0); groups of
    10 run, with the key in the result's plan; a group Megatron-Core refuses, or the key
    without interleaving, is a ConfigError naming it."""
    base = ["training.global_batch=1600", "parallel.schedule=interleaved",
            "parallel.virtual_stages=2"]  # fmt: skip
    with pytest.raises(ConfigError, match="microbatch_group_size set"):
        simulate_step(load_scenario("gpt3-175b-1024", base), "analytical")
    r = simulate_step(load_scenario("gpt3-175b-1024", [*base, "parallel.microbatch_group_size=10"]))
    assert r.plan["micro_batches"] == 100 and r.plan["microbatch_group_size"] == 10
    for bad, match in (("12", "last group has 4"), ("6", r"outside \[pp")):
        sc = load_scenario("gpt3-175b-1024", [*base, f"parallel.microbatch_group_size={bad}"])
        with pytest.raises(ConfigError, match=match):
            simulate_step(sc, "analytical")
    with pytest.raises(ConfigError, match=r"needs parallel\.schedule=interleaved"):
        simulate_step(load_scenario("gpt3-175b-1024", ["parallel.microbatch_group_size=8"]))


def test_a_refused_group_exits_2_with_one_line() -> None:
    """The CLI's bad-input contract: exit status 2, the key named, no traceback."""
    cmd = [sys.executable, "-m", "sim", "run", "gpt3-175b-1024", "--network", "analytical",
           "--set", "parallel.schedule=interleaved", "--set", "parallel.virtual_stages=2",
           "--set", "parallel.microbatch_group_size=100"]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert (
        "parallel.microbatch_group_size: 100 is outside [pp, micro-batches] = [8, 96]" in out.stderr
    )
