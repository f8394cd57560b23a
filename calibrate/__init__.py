"""Calibration: real runs, log importers, fitting and validation. May import torch."""
