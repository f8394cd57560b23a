"""Data-parallel communication techniques: gradient compression (bf16, fp8, top-k,
PowerSGD), parameter servers (BSP and stale-synchronous) and local SGD / DiLoCo.

Scenarios are GPT-2 small (124M) or Llama-2-7B on HGX H100 servers with one 100GbE NIC
each and NCCL over TCP (``h100-tcp-100g``): a slow network where data-parallel traffic
dominates. Analytical network unless said otherwise (fast, deterministic).
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sim.cli import main
from sim.result import StepResult
from sim.scenario.load import load_scenario
from sim.training.graph.buckets import buckets_of, stage_comm
from sim.training.setup import prepare_step
from sim.training.step import simulate_step
from sim.training.techniques import OUTER_STEP_BYTES
from sim.workload.comms import rank_params
from sim.workload.models import model_preset, norm_params, param_count
from sim.workload.plan import ParallelPlan
from sim.workload.techniques import (
    INDEX_BYTES,
    CommTechniques,
    Matrix,
    compressed_bytes,
    powersgd_split,
    rank_matrices,
    topk_crossover_dp,
    wire_factor,
)

# GPT-2 small, data parallel over 2 servers (16 GPUs), 4 micro-batches per replica
GPT2 = [
    "cluster.topology=h100-tcp-100g", "cluster.nodes=2", "parallel.dp=16",
    "parallel.micro_batch=1", "training.global_batch=64", "network=analytical",
]  # fmt: skip


def run(*sets: str, base: list[str] = GPT2) -> StepResult:
    return simulate_step(load_scenario("gpt2-1gpu", [*base, *sets]))


def bucket_bytes(*sets: str) -> tuple[list[tuple[str, str, float]], float]:
    """Every collective of stage 0's buckets and the stage's plain gradient bytes."""
    setup = prepare_step(load_scenario("gpt2-1gpu", [*GPT2, *sets]))
    steps = [step for b in buckets_of(setup, 0) for step in b.steps]
    return steps, stage_comm(setup, 0).dp_grad_bytes


# --- bytes on the wire: closed forms ---------------------------------------------------


@pytest.mark.parametrize(("mode", "per_element"), [("bf16", 2), ("fp8", 1)])
def test_casts_scale_all_reduce_bytes_by_dtype(mode: str, per_element: int) -> None:
    """bf16 (fp8) sends 2/4 (1/4) of the fp32 gradient bytes, in the same all-reduces."""
    steps, grads = bucket_bytes(f"parallel.grad_compression={mode}")
    assert {op for _, op, _ in steps} == {"all_reduce"}
    assert sum(b for *_, b in steps) == pytest.approx(grads * per_element / 4, rel=1e-12)
    dp = run(f"parallel.grad_compression={mode}").techniques["dp_comm"]
    assert dp["wire_bytes_per_gpu_before"] == pytest.approx(2 * 15 / 16 * grads, rel=1e-12)
    assert dp["wire_bytes_per_gpu_after"] / dp["wire_bytes_per_gpu_before"] == pytest.approx(
        per_element / 4, rel=1e-12
    )


def test_topk_all_gathers_values_and_indices_of_every_rank() -> None:
    """Top-k: an all-gather whose output is dp * k * (fp32 value + int32 index), with
    k = ratio * n; each GPU sends (dp - 1) / dp of it."""
    ratio, dp = 0.01, 16
    steps, grads = bucket_bytes("parallel.grad_compression=topk", f"parallel.topk_ratio={ratio}")
    n = grads / 4
    assert {op for _, op, _ in steps} == {"all_gather"}
    assert sum(b for *_, b in steps) == pytest.approx(dp * ratio * n * (4 + INDEX_BYTES))
    block = run("parallel.grad_compression=topk").techniques
    want = (dp - 1) * ratio * n * (4 + INDEX_BYTES)
    assert block["dp_comm"]["wire_bytes_per_gpu_after"] == pytest.approx(want, rel=1e-12)
    assert block["topk_crossover_dp"] == pytest.approx(100.0)


@given(
    ratio=st.floats(1e-4, 0.5),
    dp=st.integers(2, 4096),
    value=st.sampled_from([2, 4]),
)
def test_topk_pays_off_only_below_the_crossover(ratio: float, dp: int, value: int) -> None:
    """Per-rank bytes of top-k's all-gather vs a ring all-reduce of the dense gradient:
    smaller exactly when dp < 2 / (ratio (1 + index / value))."""
    n = 1e9
    dense = wire_factor("all_reduce", dp) * n * value
    tech = CommTechniques("topk", topk_ratio=ratio)
    sparse = wire_factor("all_gather", dp) * dp * compressed_bytes(tech, n * value, value)
    crossover = topk_crossover_dp(ratio, value)
    if abs(dp - crossover) > 1e-6 * crossover:
        assert (sparse < dense) == (dp < crossover)


def test_topk_crossover_in_the_simulated_step() -> None:
    """ratio 0.25 with fp32 values: crossover at dp = 4; dp 2 sends fewer bytes than the
    all-reduce, dp 16 more."""
    assert topk_crossover_dp(0.25) == 4.0
    for dp, cheaper in ((2, True), (16, False)):
        r = run(f"parallel.dp={dp}", "parallel.grad_compression=topk", "parallel.topk_ratio=0.25",
                f"cluster.nodes={1 if dp < 8 else 2}", f"parallel.tp={8 // dp if dp < 8 else 1}")  # fmt: skip
        dpc = r.techniques["dp_comm"]
        assert (dpc["wire_bytes_per_gpu_after"] < dpc["wire_bytes_per_gpu_before"]) == cheaper


def test_rank_matrices_and_1d_tensors_add_up_to_the_rank_parameters() -> None:
    """GPT-2 small: the matrices (QKV, proj, fc1, fc2 per layer; word and position
    tables) plus the 1-D tensors (norms, biases) are exactly the rank's parameters."""
    m, plan = model_preset("gpt2-124m"), ParallelPlan()
    mats = rank_matrices(m, plan, 0)
    h, f, L = m.hidden, m.ffn_hidden, m.layers
    assert sum(x.elements for x in mats) == L * (4 * h * h + 2 * h * f) + (m.vocab + 1024) * h
    biases = 3 * h + h + f + h  # QKV, proj, fc1, fc2
    one_d = L * (2 * norm_params(m) + biases) + norm_params(m)
    assert sum(x.elements for x in mats) + one_d == param_count(m)


def test_powersgd_sends_r_m_plus_n_per_matrix() -> None:
    """PowerSGD rank r: P and Q all-reduces of sum r (m + n) over the compressed matrices
    plus the uncompressed 1-D tensors, in fp32."""
    r = 4
    m, plan = model_preset("gpt2-124m"), ParallelPlan()
    mats = rank_matrices(m, plan, 0)
    dense = rank_params(m, plan, 0).dense
    p, q, comp = powersgd_split(mats, dense, r)
    assert comp == sum(x.elements for x in mats)  # every GPT-2 matrix shrinks > 2x at r = 4
    assert p + q == sum(r * (x.rows + x.cols) * x.count for x in mats) + dense - comp
    steps, grads = bucket_bytes("parallel.grad_compression=powersgd", f"parallel.powersgd_rank={r}")
    assert {op for _, op, _ in steps} == {"all_reduce"}
    assert sum(b for *_, b in steps) == pytest.approx((p + q) * 4, rel=1e-12)
    assert grads == dense * 4


def test_powersgd_leaves_matrices_that_would_not_halve() -> None:
    """A 10 x 10 matrix at rank 4 (80 elements for 100) goes uncompressed with P."""
    assert powersgd_split([Matrix(10, 10, 1), Matrix(100, 100, 1)], 10_100, 4) == (
        100 + 400,
        400,
        10_000,
    )


# --- step time -------------------------------------------------------------------------


def test_every_compression_lowers_exposed_dp_comm_on_tcp() -> None:
    """On 100G TCP the gradient all-reduce is exposed; each compression shrinks it and the
    step, fp8 more than bf16."""
    base = run()
    exposed = {mode: run(f"parallel.grad_compression={mode}").breakdown["dp_comm_exposed"]
               for mode in ("bf16", "fp8", "topk", "powersgd")}  # fmt: skip
    assert base.breakdown["dp_comm_exposed"] > 0.1 * base.step_time_s
    assert all(v < base.breakdown["dp_comm_exposed"] for v in exposed.values()), exposed
    assert exposed["fp8"] < exposed["bf16"]


def test_compression_lowers_the_step_on_the_flow_network_too() -> None:
    """Flow network (max-min fair links, SimPy): PowerSGD shortens the step."""
    base = run("network=flow")
    comp = run("network=flow", "parallel.grad_compression=powersgd")
    assert comp.step_time_s < base.step_time_s
    assert comp.techniques["dp_comm"]["compute_overhead_s_per_step"] > 0


def test_compression_adds_error_feedback_memory() -> None:
    """Top-k and PowerSGD keep one fp32 gradient copy; casts keep none."""
    params = param_count(model_preset("gpt2-124m"))
    topk = run("parallel.grad_compression=topk")
    assert topk.memory_breakdown["error_feedback"] == 4 * params
    assert "error_feedback" not in run("parallel.grad_compression=bf16").memory_breakdown
    base = run()
    assert topk.memory_per_gpu_bytes == pytest.approx(base.memory_per_gpu_bytes + 4 * params)


# --- parameter server --------------------------------------------------------------------


def ps(*sets: str) -> StepResult:
    return run("parallel.dp_mode=ps", "parallel.overlap_dp=false", *sets)


def test_ps_time_is_the_server_nic_closed_form() -> None:
    """One server, 16 workers: push and pull take 2 * dp * model_bytes / (servers * NIC
    bandwidth) (derated NIC rate as reported), within 1% (latencies, bucket count)."""
    r = ps("parallel.ps_servers=1")
    model_bytes = 4 * param_count(model_preset("gpt2-124m"))
    want = 2 * 16 * model_bytes / (1 * r.techniques["ps_server_nic_Bps"])
    assert r.breakdown["dp_comm_exposed"] == pytest.approx(want, rel=0.01)
    assert r.techniques["dp_comm"]["wire_bytes_per_gpu_after"] == 2 * model_bytes


def test_ps_grows_with_workers_at_fixed_servers() -> None:
    """Twice the workers on the same single server: the push/pull time doubles (1%)."""
    small = ps("parallel.ps_servers=1").breakdown["dp_comm_exposed"]
    big = ps("parallel.ps_servers=1", "cluster.nodes=4", "parallel.dp=32").breakdown
    assert big["dp_comm_exposed"] == pytest.approx(2 * small, rel=0.01)


def test_ps_defaults_to_one_server_per_node() -> None:
    assert ps().techniques["ps_servers"] == 2


def test_staleness_hides_push_pull_behind_compute() -> None:
    """Stale-synchronous (s = 1): the step is max(rest, push/pull, (rest + exposed) / 2)."""
    bsp, ssp = ps(), ps("parallel.staleness=1")
    rest = bsp.step_time_s - bsp.breakdown["dp_comm_exposed"]
    comm = bsp.techniques["dp_comm"]["comm_time_per_sync_s"]
    want = max(rest, comm, bsp.step_time_s / 2)
    assert ssp.step_time_s == pytest.approx(want, rel=1e-12)
    assert ssp.step_time_s < bsp.step_time_s


@pytest.mark.parametrize("network", ["analytical", "flow"])
def test_ps_push_and_pull_are_on_the_workers_links(network: str) -> None:
    """Every worker's push and pull cross its NIC uplink once each way: the step's net
    bytes are gpus * wire_bytes_per_gpu_after (16 GPUs); the PCIe hops from each GPU to
    its NIC carry the same bytes per hop (h100-tcp-100g: one NIC per server, 1-4 hops)."""
    r = ps(f"network={network}")
    wire = r.techniques["dp_comm"]["wire_bytes_per_gpu_after"]
    assert r.link_bytes_by_scope["net"] == pytest.approx(16 * wire, rel=1e-12)
    assert 16 * wire <= r.link_bytes_by_scope["pcie"] <= 4 * 16 * wire
    assert r.link_bytes_by_scope["nvlink"] == 0.0


# --- local SGD / DiLoCo ------------------------------------------------------------------


@pytest.mark.parametrize("h", [2, 8])
def test_local_sgd_amortises_the_synchronisation(h: int) -> None:
    """sync_every = H: exposed synchronisation and wire bytes per step / H; the outer
    state adds 8 bytes per parameter; the outer step counts 1/H."""
    one = run("parallel.sync_every=1", "parallel.overlap_dp=false")
    loc = run(f"parallel.sync_every={h}")
    assert loc.breakdown["dp_comm_exposed"] == pytest.approx(
        one.breakdown["dp_comm_exposed"] / h, rel=1e-12
    )
    dpc = loc.techniques["dp_comm"]
    assert dpc["wire_bytes_per_gpu_after"] == pytest.approx(dpc["wire_bytes_per_gpu_before"] / h)
    params = param_count(model_preset("gpt2-124m"))
    assert loc.memory_breakdown["outer_optimizer"] == 8 * params
    setup = prepare_step(load_scenario("gpt2-1gpu", GPT2))
    stream_Bps = setup.topology.gpu.hbm_Bps * setup.compute.stream_eff
    outer = params * OUTER_STEP_BYTES / stream_Bps
    assert loc.breakdown["outer_optimizer"] == pytest.approx(outer / h, rel=1e-12)
    assert loc.step_time_s < one.step_time_s
    for scope, b in one.link_bytes_by_scope.items():  # the synchronisation's bytes / H
        assert loc.link_bytes_by_scope[scope] == pytest.approx(b / h, rel=1e-12)


# --- defaults, outputs, errors ----------------------------------------------------------


def test_defaults_written_out_change_nothing() -> None:
    """Every technique key at its default gives the same result as leaving them out."""
    explicit = run(
        "parallel.grad_compression=none", "parallel.dp_mode=allreduce", "parallel.sync_every=1",
        "parallel.staleness=0", "parallel.topk_ratio=0.01", "parallel.powersgd_rank=4",
    )  # fmt: skip
    assert explicit.to_dict() == run().to_dict()
    assert "techniques" not in run().to_dict()


def test_same_inputs_same_bytes() -> None:
    a = run("parallel.grad_compression=powersgd").to_dict()
    b = run("parallel.grad_compression=powersgd").to_dict()
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def test_json_and_text_show_the_techniques(capsys: pytest.CaptureFixture[str]) -> None:
    sets = [a for s in [*GPT2, "parallel.grad_compression=bf16"] for a in ("--set", s)]
    assert main(["run", "gpt2-1gpu", *sets, "--json"]) == 0
    block = json.loads(capsys.readouterr().out)["techniques"]
    assert block["grad_compression"] == "bf16" and block["dp_comm"]["ratio"] == 0.5
    assert main(["run", "gpt2-1gpu", *sets]) == 0
    assert "DP techniques    compression bf16" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("sets", "named"),
    [
        (
            ["parallel.grad_compression=powersgd", "parallel.powersgd_rank=0"],
            "parallel.powersgd_rank",
        ),
        (["parallel.grad_compression=topk", "parallel.topk_ratio=1.5"], "parallel.topk_ratio"),
        (["parallel.grad_compression=zip"], "parallel.grad_compression"),
        (["parallel.dp_mode=gossip"], "parallel.dp_mode"),
        (["parallel.grad_compression=bf16", "parallel.zero=2"], "parallel.zero"),
        (["parallel.dp_mode=ps", "parallel.zero=1"], "parallel.zero"),
        (["parallel.staleness=2"], "parallel.dp_mode"),
        (["parallel.sync_every=0"], "parallel.sync_every"),
        (["parallel.dp_mode=ps", "parallel.sync_every=4"], "parallel.sync_every"),
    ],
)
def test_bad_settings_exit_2_with_one_line(
    sets: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    args = [a for s in [*GPT2, *sets] for a in ("--set", s)]
    assert main(["run", "gpt2-1gpu", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and named in err, err


def test_layer_list_models_refuse_the_techniques(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """CNN (layer-list) steps do not model the techniques: refused, not ignored."""
    path = tmp_path / "cnn.yaml"
    path.write_text(
        "model: {preset: resnet50}\ncluster: {topology: h100-ib-ndr, nodes: 1}\n"
        "parallel: {micro_batch: 128, grad_compression: bf16}\n"
        "training: {global_batch: 1024, seq_len: 1}\nnetwork: analytical\n"
    )
    assert main(["run", str(path)]) == 2
    assert "parallel.grad_compression" in capsys.readouterr().err


def test_readme_commands_run(capsys: pytest.CaptureFixture[str]) -> None:
    """The README's technique commands (``$S`` expanded) run and report the block."""
    text = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    section = text.split(
        "## Data-parallel techniques: compression, parameter servers, local SGD", 1
    )[1]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0].splitlines()
    sets = shlex.split(block[0])[0].split("=", 1)[1]  # S="--set ..." -> --set ...
    for line in block[1:]:
        argv = shlex.split(line.replace("$S", sets))
        assert argv[0] == "clustersim"
        assert main(argv[1:]) == 0, line
        assert "techniques" in capsys.readouterr().out.lower()
