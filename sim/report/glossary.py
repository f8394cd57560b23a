"""The report's glossary: the terms its figures and tables use, in a sentence or two each.

>>> "scaling efficiency" in dict(GLOSSARY)
True
"""

from __future__ import annotations

from html import escape

__all__ = ["GLOSSARY", "glossary_html"]

GLOSSARY: tuple[tuple[str, str], ...] = (
    ("step time", "Wall time of one optimizer step: every micro-batch's forward and backward "
     "pass, the gradient synchronisation that is not hidden behind them, and the optimizer."),
    ("throughput", "Tokens (for a language model) or images (for a CNN) trained per second "
     "by the whole cluster: the global batch divided by the step time."),
    ("scaling efficiency", "Throughput per GPU at a size over the throughput per GPU at the "
     "smallest size of the same series; 100% is linear scaling. A series is the points that "
     "differ only in GPU count: points on another fabric, model or GPU are not compared."),
    ("ideal line", "Linear scaling from a series' smallest point: twice the GPUs, twice "
     "the throughput."),
    ("MFU", "Model FLOP utilisation: the model's FLOPs per second per GPU over the GPU's "
     "dense peak at the training precision (recomputed FLOPs not counted)."),
    ("compute", "Time the critical GPU spends in its forward and backward kernels."),
    ("exposed communication", "Communication that the GPU waits for: the part not hidden "
     "behind compute (overlapped communication costs no step time)."),
    ("DP communication", "Data parallelism: every replica holds the model and trains on its "
     "share of the batch; gradients are all-reduced (or reduce-scattered) across replicas."),
    ("TP communication", "Tensor parallelism: each layer's matrices are split over GPUs "
     "(inside one server), which exchange activations in every layer."),
    ("pipeline bubble", "Pipeline parallelism splits the layers into stages; at the start "
     "and end of a step some stages wait for work. More micro-batches shrink the bubble."),
    ("ZeRO", "Sharding of optimizer states (stage 1), gradients (2) and parameters (3) "
     "over the data-parallel GPUs: less memory per GPU, more bytes on the wire."),
    ("memory per GPU", "Bytes on the fullest GPU: weights, gradients, optimizer states, "
     "activations kept for the backward pass, workspace and allocator fragmentation; it "
     "fits when it is at most the GPU's HBM capacity."),
    ("link scopes", "nvlink: between GPUs of one server; pcie: GPU to host or NIC; net: "
     "the network between servers (InfiniBand or Ethernet)."),
    ("profile", "The parameter set a point was simulated with: 'defaults' are the shipped, "
     "datasheet-based values; a named profile was fitted to measurements."),
)  # fmt: skip
"""(term, explanation) in reading order."""


def glossary_html() -> str:
    """The glossary as an HTML section (``id="glossary"``)."""
    items = "".join(f"<dt>{escape(t)}</dt><dd>{escape(d)}</dd>" for t, d in GLOSSARY)
    return f'<section id="glossary"><h2>Glossary</h2><dl class="glossary">{items}</dl></section>'
