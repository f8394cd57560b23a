"""One data-parallel training step of a layer-list model (Horovod/DDP style).

Every GPU holds the whole model and ``global_batch / dp`` samples per step, in
micro-batches of ``parallel.micro_batch`` (gradient accumulation). Per micro-batch the
layers run forward in order, then backward in reverse at twice the forward FLOPs; each
layer is one roofline op (:func:`sim.training.compute.kernels.roofline_time_s`: FLOPs at
the GPU's peak for ``training.precision`` times its catalog GEMM efficiency, bytes at its
catalog HBM efficiency) reading its weights, its input and writing its output; a layer
with a convolution shape (the CNN presets) runs as its kernels instead
(:mod:`sim.training.compute.conv`). During the last backward pass the
gradients fill a contiguous buffer in reverse layer order, cut into buckets of exactly
``parallel.bucket_bytes`` (Megatron-LM's DDP buffer; Horovod's Tensor Fusion and PyTorch
DDP close a bucket at whole tensors, so theirs vary in size around that); a bucket is
all-reduced over the data-parallel group as soon as it is full, while the backward goes
on (``overlap_dp``), or after it, one bucket after another. The step is a task graph
(:func:`layer_graph`: one replica stands for its peers, each bucket's all-reduce a
collective task over every GPU) run by the executor its network calls for
(:func:`sim.training.graph.execute.execute`), as a transformer's step is. Then a
momentum-SGD update, memory-bound: 5 accesses per parameter to fp32 weights, gradients and
momentum (4 bytes each, whatever the precision: see the memory below).

Memory per GPU, as PyTorch's automatic mixed precision and TensorFlow's mixed-precision
training hold it: weights, gradients and momentum in fp32 (the parameters stay fp32; the
gradients of fp32 parameters are fp32), and under fp16/bf16 the half-precision copy of the
weights the forward casts (autocast's cast cache; TensorFlow's ``Cast`` outputs, which the
backward reads); the activations of one micro-batch stored at the precision's element size
(a CNN preset's ``activation_bytes`` are counted at 4 bytes an element,
:attr:`~sim.workload.layer_model.LayerModel.activation_element_bytes`; a user's list is
taken as given); the input batch as the data loader wrote it; and a 2 GiB workspace margin
(an assumption, as for transformers). Gradients are all-reduced at the precision's element
size (TensorFlow's ``tf_cnn_benchmarks`` sends fp16 gradients; PyTorch DDP under autocast
would send fp32). Tensor, pipeline and expert parallelism and ZeRO are not modelled for
layer lists: asking for them is a ConfigError.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from sim.catalog import GpuSpec
from sim.errors import ConfigError
from sim.network import backend
from sim.profile_select import describe
from sim.result import StepResult
from sim.scenario.layer_list import LayerScenario
from sim.training.compute.conv import conv_kernels, conv_layer_s, tensor_cores
from sim.training.compute.conv_stacks import conv_stack_eff
from sim.training.compute.host import host_bound_s
from sim.training.compute.kernels import eager_mem_eff, roofline_time_s
from sim.training.compute.params import ComputeParams, compute_params
from sim.training.compute.passes import timer_for
from sim.training.graph.execute import execute
from sim.training.graph.task import COLLECTIVE, COMPUTE, Comm, PassInfo, StepGraph
from sim.training.setup import cached_topology, resolve_step_profile
from sim.workload.layer_model import LayerModel
from sim.workload.plan import DEFAULT_BUCKET_BYTES
from sim.workload.techniques import techniques_of

__all__ = [
    "ELEMENT_BYTES",
    "OPTIMIZER_ACCESSES",
    "STATE_ELEMENT_BYTES",
    "WORKSPACE_BYTES",
    "activation_bytes",
    "layer_graph",
    "simulate_layer_step",
    "state_bytes",
]

ELEMENT_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2}
OPTIMIZER_ACCESSES = 5  # momentum SGD: read weight, grad, momentum; write weight, momentum
#: Bytes of an element of the weights, gradients and momentum (fp32 at any precision).
STATE_ELEMENT_BYTES = 4
WORKSPACE_BYTES = 2 * 2**30


@dataclass(frozen=True)
class _Times:
    forward_s: list[float]
    backward_s: list[float]


def _check_plan(sc: LayerScenario, gpus: int) -> int:
    par = sc.parallel
    for key in ("tp", "pp", "ep", "virtual_stages"):
        if getattr(par, key) != 1:
            raise ConfigError(
                f"parallel.{key}: layer-list models run data-parallel only (must be 1)"
            )
    if par.microbatch_group_size is not None:
        raise ConfigError(
            "parallel.microbatch_group_size: layer-list models have no pipeline (leave it unset)"
        )
    if par.zero:
        raise ConfigError("parallel.zero: ZeRO is not modelled for layer-list models (use 0)")
    if techniques_of(par).active:
        raise ConfigError(
            "parallel.grad_compression/dp_mode/sync_every: not modelled for layer-list "
            "models (use none, allreduce, 1)"
        )
    dp = par.dp or gpus
    if dp != gpus:
        raise ConfigError(
            f"parallel.dp: {dp}, but the cluster has {gpus} GPUs (data-parallel only)"
        )
    batch = sc.training.global_batch
    if batch % (par.micro_batch * dp):
        raise ConfigError(
            f"training.global_batch: {batch} must be a multiple of parallel.micro_batch x "
            f"parallel.dp = {par.micro_batch} x {dp} = {par.micro_batch * dp}"
        )
    return dp


def state_bytes(params: int, precision: str) -> dict[str, float]:
    """Bytes of the model's weights, gradients and momentum (``"optimizer"``) for
    ``params`` parameters trained in ``precision`` (see the module docstring: fp32 master
    weights, gradients and momentum, plus the half-precision weight copy under fp16/bf16).

    >>> state_bytes(10, "bf16"), state_bytes(10, "fp32")["weights"]
    ({'weights': 60.0, 'grads': 40.0, 'optimizer': 40.0}, 40.0)
    """
    half = ELEMENT_BYTES[precision] if precision != "fp32" else 0
    state = float(STATE_ELEMENT_BYTES * params)
    return {"weights": state + half * params, "grads": state, "optimizer": state}


def activation_bytes(model: LayerModel, el: int, micro_batch: int) -> float:
    """Bytes kept for backward by a micro-batch of ``micro_batch`` samples whose
    activations are stored at ``el`` bytes an element, and the input batch (see the module
    docstring)."""
    per_sample = model.activation_bytes_per_sample
    if model.activation_element_bytes:
        per_sample *= el / model.activation_element_bytes
    return (per_sample + model.input_bytes) * micro_batch


def _layer_times(sc: LayerScenario, gpu: GpuSpec, params: ComputeParams) -> _Times:
    """Per layer: its convolution's kernels where the shape is known
    (:func:`sim.training.compute.conv.conv_layer_s`), else one roofline op (one kernel);
    then the forward and backward of a micro-batch no faster than the host launches their
    kernels (:func:`sim.training.compute.host.host_bound_s`, ``host_dispatch_s``)."""
    el = ELEMENT_BYTES[sc.training.precision]
    dtype, mb, fused = sc.training.precision, sc.parallel.micro_batch, sc.training.fused_kernels
    stack = conv_stack_eff(sc.training.conv_stack)
    fwd, bwd, kf, kb = [], [], [], []
    prev = sc.model.input_bytes
    for i, lay in enumerate(sc.model.layers):
        out = lay.activation_bytes
        if lay.conv is not None:
            fwd.append(conv_layer_s(lay.conv, mb, dtype, gpu, params, False, i == 0, fused, stack))
            bwd.append(conv_layer_s(lay.conv, mb, dtype, gpu, params, True, i == 0, fused, stack))
            kf.append(conv_kernels(lay.conv, False, i == 0))
            kb.append(conv_kernels(lay.conv, True, i == 0))
        else:
            flops, nbytes = lay.flops * mb, el * lay.params + (prev + out) * mb
            fwd.append(roofline_time_s(flops, nbytes, dtype, gpu, params))
            bwd.append(roofline_time_s(2 * flops, 2 * nbytes, dtype, gpu, params))
            kf.append(1)
            kb.append(1)
        prev = out
    n = len(fwd)
    timed = host_bound_s(fwd + bwd[::-1], kf + kb[::-1], params.host_dispatch_s)
    return _Times(timed[:n], timed[n:][::-1])


def _buckets(sc: LayerScenario, times: _Times) -> list[tuple[float, float]]:
    """(ready offset into the backward pass in s, bytes) of each gradient bucket.

    The gradients form one contiguous buffer in reverse layer order, cut into buckets of
    exactly ``bucket_bytes`` (the last one smaller), as Megatron-LM's DDP buffer is; a
    bucket is ready when the layer holding its last byte has finished its backward.
    """
    el = ELEMENT_BYTES[sc.training.precision]
    size = float(sc.parallel.bucket_bytes or DEFAULT_BUCKET_BYTES)
    out: list[tuple[float, float]] = []
    t = filled = 0.0
    for lay, dt in zip(reversed(sc.model.layers), reversed(times.backward_s), strict=True):
        t += dt
        filled += lay.params * el
        while filled - len(out) * size >= size:
            out.append((t, size))
    rest = filled - len(out) * size
    if rest > 0:
        out.append((t, rest))
    return out


def simulate_layer_step(
    sc: LayerScenario,
    network: str | None = None,
    *,
    profile: str | None = None,
    force_profile: bool = False,
) -> StepResult:
    """Simulate one data-parallel step of a layer-list model (see the module docstring).

    ``profile`` and ``force_profile`` choose the parameter profile as for a transformer
    (:func:`sim.training.setup.resolve_step_profile`: the argument, the scenario's key, or
    the shipped profile measured on this hardware).

    Examples
    --------
    >>> from sim.scenario.layer_list import any_scenario_from_dict
    >>> sc = any_scenario_from_dict({"model": {"preset": "resnet50"},
    ...     "cluster": {"topology": "dgx-h100"}, "training": {"global_batch": 512}})
    >>> r = simulate_layer_step(sc, "analytical")
    >>> r.gpus, r.fits, 0 < r.mfu < 1
    (8, True, True)
    """
    net = backend(network or sc.network, "network").name
    topo = cached_topology(sc.cluster.topology, sc.cluster.nodes, sc.seed)
    gpus = topo.num_gpus
    dp = _check_plan(sc, gpus)
    resolved = resolve_step_profile(sc, topo, profile, force_profile)
    params = compute_params(topo.gpu.name, resolved.profile.compute)
    times = _layer_times(sc, topo.gpu, params)
    mb = sc.parallel.micro_batch
    m = sc.training.global_batch // (mb * dp)
    optimizer = (  # on the fp32 weights, gradients and momentum (state_bytes)
        OPTIMIZER_ACCESSES
        * STATE_ELEMENT_BYTES
        * sc.model.params
        / (topo.gpu.hbm_Bps * eager_mem_eff(params))
    )
    graph = layer_graph(sc, topo.gpus, times, m, optimizer)
    timer = timer_for(topo, resolved.profile.collectives, net)
    done = execute(graph, timer, net)
    compute_end = max(e for e, lab in zip(done.end, graph.label, strict=True) if lab == "pass")
    dp_end = max((e for e, lab in zip(done.end, graph.label, strict=True) if lab == "dp_all_reduce"),
                 default=compute_end)  # fmt: skip
    step = done.time_s
    wire = dict.fromkeys(("nvlink", "pcie", "net"), 0.0)
    for parts in graph.comm:
        for c in parts:
            timer.time_s(c.groups[0], c.op, c.nbytes)
            for scope, b in timer.wire_bytes[(tuple(c.groups[0]), c.op, float(c.nbytes))].items():
                wire[scope] += b
    comm_end = max(compute_end, dp_end)
    result = _result(sc, topo, net, dp, m, step, compute_end, comm_end - compute_end,
                     step - comm_end, wire)  # fmt: skip
    return replace(result, profile=describe(resolved, topo))


def layer_graph(sc: LayerScenario, gpus: tuple[str, ...], times: _Times, m: int,
                optimizer_s: float) -> StepGraph:  # fmt: skip
    """The data-parallel step of a layer-list model as a task graph (one replica stands
    for its peers): ``m`` micro-batches of forward then backward; in the last backward the
    gradient buckets (:func:`_buckets`) are all-reduced over every GPU as they fill
    (``overlap_dp``) or after it, one after the other; then the optimizer."""
    g = StepGraph()
    compute, dp = g.stream("s0.compute"), g.stream("s0.dp")
    fwd, bwd = sum(times.forward_s), sum(times.backward_s)
    pid = g.add_pass(PassInfo(0, "F", m - 1, 0, 0))
    ahead = (m - 1) * (fwd + bwd) + fwd  # every micro-batch but the last backward
    g.add(COMPUTE, compute, (), duration_s=ahead, label="pass", stage=0, pass_of=pid)
    bid = g.add_pass(PassInfo(0, "B", m - 1, 0, 0))
    group = (gpus,)
    cut, last, released = 0.0, -1, []
    for ready, nbytes in _buckets(sc, times) if len(gpus) > 1 else []:
        if ready > cut:  # the backward up to the layer that completes this bucket
            last = g.add(COMPUTE, compute, (), duration_s=ready - cut, label="pass", stage=0,
                         pass_of=bid)  # fmt: skip
            cut = ready
        released.append((last, nbytes))
    if bwd > cut or last < 0:
        last = g.add(COMPUTE, compute, (), duration_s=bwd - cut, label="pass", stage=0,
                     pass_of=bid)  # fmt: skip
    tail = last
    for seg, nbytes in released:
        dep = seg if sc.parallel.overlap_dp and seg >= 0 else last
        comm = Comm("all_reduce", nbytes, group, tag="dp all_reduce")
        tail = g.add(COLLECTIVE, dp, (dep,), comm=(comm,), label="dp_all_reduce", stage=0)
    g.add(COMPUTE, compute, (tail,), duration_s=optimizer_s, label="optimizer", stage=0)
    return g


def _result(sc: LayerScenario, topo, net: str, dp: int, m: int, step: float, compute: float,  # type: ignore[no-untyped-def]
            dp_exposed: float, optimizer: float, wire: dict[str, float]) -> StepResult:  # fmt: skip
    el = ELEMENT_BYTES[sc.training.precision]
    model = sc.model
    samples = sc.training.global_batch * sc.training.seq_len
    flops = 3 * model.flops_per_sample * sc.training.global_batch
    peak = topo.gpu.peak_flops.get(sc.training.precision)
    if peak is None:
        raise ConfigError(
            f"training.precision: {topo.gpu.name} has no {sc.training.precision} peak"
        )
    memory = {**state_bytes(model.params, sc.training.precision),
              "activations": activation_bytes(model, el, sc.parallel.micro_batch),
              "workspace": float(WORKSPACE_BYTES)}  # fmt: skip
    total = sum(memory.values())
    price = sc.price.usd_per_gpu_hour(topo.gpu.name)
    cost = price * topo.num_gpus * step / 3600.0 if price is not None else None
    rate = flops / step / topo.num_gpus
    plan = {"tp": 1, "pp": 1, "dp": dp, "ep": 1, "sp": False, "zero": 0,
            "micro_batch": sc.parallel.micro_batch, "micro_batches": m, "schedule": "1f1b",
            "virtual_stages": 1, "recompute": "none"}  # fmt: skip
    breakdown = {"compute": compute, "tp_comm_exposed": 0.0, "ep_comm": 0.0,
                 "zero3_gather_exposed": 0.0, "pipeline_bubble": 0.0, "pp_comm_exposed": 0.0,
                 "dp_comm_exposed": dp_exposed, "optimizer": optimizer, "param_gather": 0.0}  # fmt: skip
    return StepResult(
        scenario=sc.name, topology=topo.name, network=net, gpus=topo.num_gpus, gpu=topo.gpu.name,
        plan=plan, step_time_s=float(step), tokens_per_s=samples / step,
        tflops_per_gpu=rate / 1e12, hw_tflops_per_gpu=rate / 1e12, mfu=rate / peak, hfu=rate / peak,
        fits=total <= topo.gpu.hbm_bytes, memory_per_gpu_bytes=float(total),
        memory_breakdown={k: float(v) for k, v in memory.items()},
        breakdown={k: float(v) for k, v in breakdown.items()}, critical_stage=0,
        link_bytes_by_scope=wire, cost_per_step_usd=cost,
        cost_per_million_tokens_usd=cost / samples * 1e6 if cost is not None else None,
        notes=[f"layer-list model {model.name} ({model.source or 'user layer list'}): data-parallel; "
               "tokens_per_s counts samples (images) when training.seq_len is 1",
               *_stack_note(sc, topo.gpu)],
    )  # fmt: skip


def _stack_note(sc: LayerScenario, gpu: GpuSpec) -> list[str]:
    """Which convolution stack timed the tensor-core convolutions, if any ran."""
    if not tensor_cores(gpu, sc.training.precision) or not any(
        lay.conv is not None and lay.conv.kh * lay.conv.kw > 1 for lay in sc.model.layers
    ):
        return []
    stack = sc.training.conv_stack
    return [f"convolutions: training.conv_stack {stack} keeps {conv_stack_eff(stack):g} of the "
            "kernels' tensor-core rate on filters of several taps "
            "(topologies/catalog/conv_stacks.yaml, solved on one VGG-16 run)"]  # fmt: skip
