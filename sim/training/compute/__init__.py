"""Durations of compute: one op on one GPU (roofline), and one pass with its collectives."""
