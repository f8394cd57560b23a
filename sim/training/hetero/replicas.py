"""A step on a heterogeneous cluster: every data-parallel replica at its own GPUs' speed.

On one GPU model, DP replica 0 stands for its identical peers. When servers hold different
GPU models (:attr:`sim.topology.model.Topology.gpu_models`), replicas differ, so:

- each pipeline stage of a replica runs at the speed of the slowest GPU of its TP group
  (the group's collectives wait for it): its kernels are costed with that GPU model's
  catalog entry (``topologies/catalog/compute.yaml``) and HBM bandwidth;
- replicas with the same stage models and micro-batch count form a *class*, simulated once
  with its own GPUs (TP groups, pipeline sends); the data-parallel collectives are the same
  groups in every class;
- the step is the slowest class's (data parallelism waits for the slowest replica at its
  gradient reduction): with ``parallel.batch_split: equal`` every replica runs the same
  micro-batches, so the step follows the slowest GPUs; ``proportional`` gives each replica
  micro-batches in proportion to its throughput (1 / its slowest stage's forward+backward
  time per micro-batch; integer rounding in :mod:`.split`), approaching the harmonic
  combination ``global_batch / sum(throughput)``;
- ``parallel.stage_split: speed`` gives each pipeline stage layers in proportion to the
  speed (1 / one layer's forward+backward compute time) of its slowest GPU over all
  replicas (one layer split for the whole job, as Megatron builds it).

Approximations (stated in the result's notes): the slowest class's DP collectives start
when its own gradients are ready (faster replicas are assumed ready by then); the
embedding and head are not counted when splitting layers by speed; link bytes per step
are counted from the slowest class as if every replica were like it; a profile's
``compute`` overrides apply only to the topology's first GPU model (``gpu``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from sim.catalog import GpuSpec
from sim.errors import ConfigError
from sim.training.compute.kernels import op_time_s
from sim.training.compute.params import ComputeParams, compute_params
from sim.training.compute.passes import CollectiveTimer
from sim.training.graph.costs import chunk_costs, op_context
from sim.training.graph.execute import StepRun, run_graph
from sim.training.hetero.split import split_layers, split_microbatches
from sim.training.setup import StageGroups, StepSetup, stage_groups
from sim.workload.ops import layer_ops
from sim.workload.plan_checks import validate_plan
from sim.workload.stages import stage_layers

if TYPE_CHECKING:  # SimPy's executor is imported when a network is simulated
    from sim.training.graph.simulate import Progress

__all__ = ["MixedStep", "ReplicaClass", "layer_compute_s", "mixed_path", "mixed_step"]


@dataclass(frozen=True)
class ReplicaClass:
    """Data-parallel replicas that run alike: the same stage GPU models and micro-batches.

    ``setup`` is resolved for the first of ``replicas`` (its GPUs, groups and stage
    models); ``run`` is its simulated step.
    """

    replicas: tuple[int, ...]
    microbatches: int
    setup: StepSetup
    run: StepRun

    @property
    def end_s(self) -> float:
        """When the class's slowest stage ends its step (seconds)."""
        return max(line.end_s for line in self.run.lines)


@dataclass(frozen=True)
class MixedStep:
    """Every replica class of a heterogeneous step and which one sets the step time.

    ``layer_s`` maps each GPU model to one layer's forward+backward compute seconds at
    the plan's micro-batch (its speed); ``total_microbatches`` is ``global_batch /
    micro_batch``; ``layers`` the layers per pipeline stage.
    """

    classes: tuple[ReplicaClass, ...]
    critical: ReplicaClass
    layer_s: dict[str, float]
    total_microbatches: int
    layers: tuple[int, ...]


def mixed_path(setup: StepSetup) -> bool:
    """Whether ``setup`` needs the per-replica step (mixed GPUs or a speed-based split)."""
    par = setup.scenario.parallel
    hetero = setup.topology.heterogeneous
    return hetero or par.batch_split != "equal" or par.stage_split != "equal"


def layer_compute_s(setup: StepSetup, gpu: GpuSpec, params: ComputeParams) -> float:
    """Forward+backward compute seconds of one transformer layer on ``gpu`` (one rank,
    one micro-batch of the plan; communication excluded): the model's measure of speed."""
    ops = layer_ops(op_context(setup))
    return sum(op_time_s(op, gpu, params) for op in (*ops.fwd, *ops.bwd) if op.kind == "compute")


def _models(setup: StepSetup) -> dict[str, tuple[GpuSpec, ComputeParams]]:
    """Each GPU model of the cluster with its compute parameters (the first model keeps
    the profile's and caller's overrides already in ``setup.compute``)."""
    topo = setup.topology
    out = {topo.gpu.name: (topo.gpu, setup.compute)}
    for g in topo.gpu_models:
        if g.name not in out:
            out[g.name] = (g, compute_params(g.name))
    return out


def _slowest(names: set[str], layer_s: dict[str, float]) -> str:
    return max(sorted(names), key=lambda n: layer_s[n])


def _replica_stages(setup: StepSetup) -> list[tuple[StageGroups, ...]]:
    plan, names = setup.plan, setup.topology.gpus
    return [
        tuple(stage_groups(plan, s, names, replica=r) for s in range(plan.pp))
        for r in range(plan.dp)
    ]


def _layer_split(
    setup: StepSetup, slow: list[tuple[str, ...]], layer_s: dict[str, float]
) -> tuple[int, ...] | None:
    """Layers per stage by speed (``stage_split: speed``), else None (the usual placement)."""
    plan, par = setup.plan, setup.scenario.parallel
    if par.stage_split != "speed" or plan.pp == 1:
        return None
    if (
        plan.virtual_stages > 1
        or plan.first_stage_layers is not None
        or plan.last_stage_layers is not None
    ):
        raise ConfigError(
            "parallel.stage_split: speed places every stage's layers itself; it cannot be "
            "combined with virtual_stages > 1 or first/last_stage_layers"
        )
    stage_model = [_slowest({row[s] for row in slow}, layer_s) for s in range(plan.pp)]
    return tuple(split_layers(setup.scenario.model.layers, [1.0 / layer_s[m] for m in stage_model]))


def _class_setup(
    setup: StepSetup,
    stages: tuple[StageGroups, ...],
    row: tuple[str, ...],
    models: dict[str, tuple[GpuSpec, ComputeParams]],
    layers: tuple[int, ...] | None,
) -> StepSetup:
    """``setup`` for one replica: its groups, its stages' GPU models, the layer split."""
    plan = replace(setup.plan, layer_split=layers) if layers is not None else setup.plan
    return replace(
        setup, plan=plan, stages=stages,
        stage_gpus=tuple(models[m][0] for m in row),
        stage_compute=tuple(models[m][1] for m in row),
    )  # fmt: skip


def _mb_time_s(setup: StepSetup, timer: CollectiveTimer) -> float:
    """Seconds per micro-batch of the slowest stage (forward + backward, all chunks)."""
    plan, costs = setup.plan, chunk_costs(setup, timer)
    return max(
        sum(costs[(c * plan.pp + s, k)].busy_s for c in range(plan.virtual_stages) for k in "FB")
        for s in range(plan.pp)
    )


def _microbatches(setup: StepSetup, times: list[float]) -> tuple[int, list[int]]:
    plan, sc = setup.plan, setup.scenario
    if sc.parallel.batch_split == "equal":
        return plan.num_microbatches * plan.dp, [plan.num_microbatches] * plan.dp
    total = sc.training.global_batch // plan.micro_batch
    return total, split_microbatches(total, [1.0 / t for t in times])


def mixed_step(
    setup: StepSetup,
    timer: CollectiveTimer,
    record: bool = False,
    progress: Progress | None = None,
) -> MixedStep:
    """Simulate every replica class of ``setup``; the slowest sets the step.

    Parameters
    ----------
    setup : StepSetup
        From :func:`sim.training.setup.prepare_step`.
    timer : CollectiveTimer
        Times the collectives (shared by every class).
    record : bool
        Keep the flow network's per-link samples (traces).
    progress : callable, optional
        Called now and then during a simulated network's run.

    Returns
    -------
    MixedStep
        Classes in order of their first replica; ``critical`` the one ending last (ties:
        the lower replica).

    Raises
    ------
    ConfigError
        With ``parallel.cp > 1``: replicas are not split into context-parallel ranks here.
    """
    if setup.plan.cp > 1:
        raise ConfigError(
            f"parallel.cp: {setup.plan.cp} is not modelled on a heterogeneous cluster or with a "
            "speed-based batch/stage split; use parallel.cp=1 there"
        )
    models = _models(setup)
    layer_s = {n: layer_compute_s(setup, g, p) for n, (g, p) in models.items()}
    topo = setup.topology
    per_replica = _replica_stages(setup)
    slow = [
        tuple(_slowest({topo.gpu_of(g).name for g in st.gpus}, layer_s) for st in stages)
        for stages in per_replica
    ]
    layers = _layer_split(setup, slow, layer_s)
    first: dict[tuple[str, ...], int] = {}
    for r, row in enumerate(slow):
        first.setdefault(row, r)
    base = {
        row: _class_setup(setup, per_replica[r], row, models, layers) for row, r in first.items()
    }
    proportional = setup.scenario.parallel.batch_split == "proportional"
    times = {row: _mb_time_s(s, timer) if proportional else 1.0 for row, s in base.items()}
    total, counts = _microbatches(setup, [times[row] for row in slow])
    members: dict[tuple[tuple[str, ...], int], list[int]] = {}
    for r, (row, m) in enumerate(zip(slow, counts, strict=True)):
        members.setdefault((row, m), []).append(r)
    classes = []
    for (row, m), reps in members.items():
        s = base[row]
        plan = replace(s.plan, global_batch=m * s.plan.micro_batch * s.plan.dp)
        s = replace(s, plan=validate_plan(plan, setup.scenario.model, topo.num_gpus))
        run = run_graph(s, timer, record=record, progress=progress)
        classes.append(ReplicaClass(tuple(reps), m, s, run))
    critical = max(classes, key=lambda c: (c.end_s, -c.replicas[0]))
    split = stage_layers(critical.setup.plan, setup.scenario.model)
    return MixedStep(tuple(classes), critical, layer_s, total, split)
