"""The optimizer's tasks: a fused GPU step, or the offloaded step's copies and CPU work.

On the GPU the optimizer is one compute task after the stage's gradients are reduced
(:func:`sim.training.graph.optimizer.optimizer_s`). Offloaded (ZeRO-Offload,
arXiv:2101.06840; ZeRO-Infinity, arXiv:2104.07857), per rank of the stage and per step:

1. the bf16 gradients go down to the host: a transfer from each GPU to its server's host
   over the topology's PCIe links (GPUs behind one PCIe switch share its uplink to the
   host, on both network backends);
2. the CPU runs the optimizer (``params / cpu_adam_rate``) on the host's stream;
3. the updated bf16 parameters come back up: a transfer from the host to each GPU;
4. with NVMe, the optimizer states and master weights are read and written once (a delay
   on the host's stream: NVMe drives are not in the topology).

Without ``offload_overlap`` the four follow the reduced gradients. With it (ZeRO-Offload's
delayed parameter update) the previous step's update runs beside this step: the chain
starts with the step and the step ends when both it and the gradient reduction are done
(in steady state the step lasts the longer of the two).
"""

from __future__ import annotations

from sim.training.graph.optimizer import optimizer_s, shard_params, stage_offload
from sim.training.graph.task import COMPUTE, TRANSFER, Comm, StepGraph
from sim.training.setup import StepSetup
from sim.workload.lora import trainable_params
from sim.workload.zero import PARAM_BYTES

__all__ = ["optimizer_tasks"]


def optimizer_tasks(g: StepGraph, setup: StepSetup, s: int, ready: list[int]) -> int:
    """Add stage ``s``'s optimizer after the tasks ``ready``; return the task the parameter
    all-gathers after the optimizer wait for."""
    compute = g.stream(f"s{s}.compute")
    off = stage_offload(setup, s)
    if off is None:
        return g.add(COMPUTE, compute, ready, duration_s=optimizer_s(setup, s), label="optimizer",
                     stage=s)  # fmt: skip
    tech, plan = setup.scenario.training.techniques, setup.plan
    params = shard_params(plan, trainable_params(setup.scenario.model, plan, s, tech))
    nbytes = PARAM_BYTES * params
    gpus = setup.stages[s].gpus
    down = tuple((gpu, setup.topology.host_of(gpu)) for gpu in gpus)
    up = tuple((h, gpu) for gpu, h in down)
    cpu = g.stream(f"s{s}.cpu")
    start = [] if tech.offload_overlap else ready
    copies = float(plan.dp_cp)
    t = g.add(TRANSFER, cpu, start, comm=(Comm("send", nbytes, down, tag="offload pcie",
              copies=copies),), label="offload_down", stage=s)  # fmt: skip
    t = g.add(COMPUTE, cpu, (t,), duration_s=off.cpu_step_s, label="cpu_optimizer", stage=s)
    t = g.add(TRANSFER, cpu, (t,), comm=(Comm("send", nbytes, up, tag="offload pcie",
              copies=copies),), label="offload_up", stage=s)  # fmt: skip
    if off.nvme_s > 0:
        t = g.add(COMPUTE, cpu, (t,), duration_s=off.nvme_s, label="nvme", stage=s)
    if not tech.offload_overlap:
        return t
    return g.add(COMPUTE, compute, [*ready, t], duration_s=0.0, label="optimizer", stage=s)
