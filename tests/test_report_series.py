"""The data behind each figure: scaling curves and their ideal line, link rows, labels."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sim.catalog import gpu_spec
from sim.report.records import CollectiveRecord, LinkRecord, PlanRecord, RunRecord, SweepRow
from sim.report.series import (
    collective_series,
    components,
    hbm_capacity_bytes,
    link_matrix,
    plan_labels,
    run_labels,
    scale_keys,
    scaling_series,
)
from tests.report_inputs import run_dicts, sweep_rows


def _row(gpus: int, tps: float, step: float = 1.0, fits: bool = True, **grid: object) -> SweepRow:
    return SweepRow(
        gpus=gpus, step_time_s=step, tokens_per_s=tps, tflops_per_gpu=1.0, mfu=0.5,
        memory_per_gpu_bytes=1.0, fits=fits, **grid,
    )  # fmt: skip


def test_nodes_moves_along_a_curve_topology_splits_curves() -> None:
    rows = [SweepRow.model_validate(r) for r in sweep_rows()]
    assert scale_keys([r for r in rows if r.ok]) == ["nodes"]
    labels = [s.label for s in scaling_series(rows)]
    assert labels == [
        "topology=h100-ib-ndr, zero=3",
        "topology=h100-tcp-100g, zero=3",
        "topology=dgx-h100, zero=0",
    ]


def test_failed_and_unfit_points_stay_off_the_line() -> None:
    rows = [SweepRow.model_validate(r) for r in sweep_rows()]
    ib, _, no_zero = scaling_series(rows)
    assert ib.gpus == (8, 16, 32, 64, 128)  # 24 GPUs failed: not drawn
    assert no_zero.gpus == () and no_zero.unfit_gpus == (8,)


points = st.lists(
    st.tuples(
        st.sampled_from([1, 2, 4, 8, 16, 32, 64, 128, 256]),
        st.floats(1.0, 1e7),
        st.floats(1e-3, 1e3),
    ),
    min_size=1,
    max_size=12,
)


@given(points)
def test_ideal_line_is_linear_from_the_smallest_point(pts: list[tuple[int, float, float]]) -> None:
    """Ideal throughput is T0 * g / g0; ideal step time keeps each point's tokens per step."""
    (s,) = scaling_series([_row(g, t, step) for g, t, step in pts])
    assert list(s.gpus) == sorted({g for g, _, _ in pts})
    g0, t0 = s.gpus[0], s.tokens_per_s[0]
    for g, t, step, it, istep in zip(
        s.gpus,
        s.tokens_per_s,
        s.step_time_s,
        s.ideal_tokens_per_s,
        s.ideal_step_time_s,
        strict=True,
    ):
        assert it == pytest.approx(t0 * g / g0, rel=1e-12)
        assert istep * it == pytest.approx(step * t, rel=1e-12)
        assert t == max(tt for gg, tt, _ in pts if gg == g)  # the best point per count
    assert s.ideal_tokens_per_s[0] == t0 and s.ideal_step_time_s[0] == pytest.approx(
        s.step_time_s[0]
    )


def test_strong_scaling_ideal_step_time_halves() -> None:
    """Same tokens per step: doubling GPUs halves the ideal step time."""
    (s,) = scaling_series([_row(8, 100.0, 10.0), _row(16, 150.0, 1000.0 / 150.0)])
    assert s.ideal_step_time_s == pytest.approx((10.0, 5.0))


def test_plan_grid_without_scale_key_gives_best_per_count() -> None:
    """tp x dp grid: every (tp, dp) is one point, so the curve is the best point per count."""
    rows = [_row(tp * dp, 10.0 * tp * dp + tp, tp=tp, dp=dp) for tp in (1, 2) for dp in (2, 4)]
    (s,) = scaling_series(rows)
    assert s.label == "best per GPU count"
    assert s.gpus == (2, 4, 8) and s.tokens_per_s == (21.0, 42.0, 82.0)


def test_prefix_names_the_source() -> None:
    (s,) = scaling_series([_row(8, 1.0), _row(16, 2.0)], prefix="a.csv")
    assert s.label == "a.csv"


def _run(**kw: object) -> RunRecord:
    return RunRecord.model_validate({**run_dicts()[0], **kw})


def test_link_matrix_keeps_the_busiest_rows_and_marks_absent_links() -> None:
    a = _run(
        links=[LinkRecord(name=f"l{i}", kind="k", utilisation=i / 10, bytes=1.0) for i in range(10)]
    )
    b = _run(links=[LinkRecord(name="l2", kind="k", utilisation=0.95, bytes=1.0)])
    m = link_matrix([("a", a), ("b", b), ("c", _run())], max_rows=3)
    assert m is not None
    assert m.runs == ("a", "b") and m.total_links == 10
    assert m.links == ("l2", "l9", "l8")
    assert m.utilisation[0] == (0.2, 0.95)
    assert m.utilisation[1][0] == 0.9 and math.isnan(m.utilisation[1][1])


def test_link_rows_sort_naturally_within_a_kind() -> None:
    links = [LinkRecord(name=f"gpu{i}", kind="nv", utilisation=0.5, bytes=1.0) for i in (10, 2, 1)]
    m = link_matrix([("a", _run(links=links))])
    assert m is not None and m.links == ("gpu1", "gpu2", "gpu10")


def test_no_links_no_matrix() -> None:
    assert link_matrix([("a", _run())]) is None


def _coll(size: float, **kw: object) -> CollectiveRecord:
    base = {"op": "all_reduce", "n_ranks": 8, "time_s": 1e-5, "algbw_GBps": 1.0, "busbw_GBps": 2.0,
            "algorithm": "ring", "protocol": "simple", "topology": "t", "network": "flow"}  # fmt: skip
    return CollectiveRecord.model_validate({**base, "size_bytes": size, **kw})


def test_collective_series_group_and_sort() -> None:
    sets = [("a.json", [_coll(4096.0), _coll(1024.0)]), ("b.json", [_coll(1024.0, n_ranks=16)])]
    one, two = collective_series(sets)
    assert one.label == "a.json: all_reduce, 8 GPUs, t (flow)" and one.size_bytes == (
        1024.0,
        4096.0,
    )
    assert two.label == "b.json: all_reduce, 16 GPUs, t (flow)" and two.algorithms == (
        "ring/simple",
    )
    (single,) = collective_series(sets[:1])
    assert single.label == "all_reduce, 8 GPUs, t (flow)"


def test_components_drop_zeros_and_keep_the_preferred_order() -> None:
    assert components(
        [{"x": 1.0, "compute": 2.0, "bubble": 0.0}, {"a": 1.0}], ("compute", "bubble")
    ) == [
        "compute",
        "a",
        "x",
    ]


def test_hbm_capacity_from_record_then_catalog() -> None:
    assert hbm_capacity_bytes(_run(hbm_bytes=1e9)) == 1e9
    assert hbm_capacity_bytes(_run()) == gpu_spec("H100-SXM").hbm_bytes
    assert hbm_capacity_bytes(_run(gpu="NOT-A-GPU")) is None


def test_run_labels_add_the_source_only_when_needed() -> None:
    runs = [("x.json", _run()), ("y.json", RunRecord.model_validate(run_dicts()[1]))]
    assert run_labels(runs) == [
        "llama3-8b-dgx, 8 GPUs, analytical",
        "llama2-70b-256-ib, 32 GPUs, analytical",
    ]


def test_plan_labels_show_what_differs() -> None:
    plans = [
        PlanRecord.model_validate({**run_dicts()[0], "parallel": {"tp": t, "zero": 1}})
        for t in (1, 2)
    ]
    assert plan_labels(plans) == ["#1 tp=1", "#2 tp=2"]
