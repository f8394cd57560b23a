"""Beyond the step: the whole training run (time, failures, prices, spot, energy) from one
simulated step and the scenario's opt-in sections; see :mod:`sim.beyond.whole_run` and
docs/beyond-the-step.md."""

from sim.beyond.text import whole_run_text
from sim.beyond.whole_run import PriceRow, PriceTable, WholeRun, has_run_sections, whole_run

__all__ = ["PriceRow", "PriceTable", "WholeRun", "has_run_sections", "whole_run", "whole_run_text"]
