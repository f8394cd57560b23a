"""Heterogeneous clusters: replicas and stages at their own GPUs' speed.

:mod:`.replicas` simulates every distinct data-parallel replica and picks the slowest,
:mod:`.split` splits micro-batches and layers by speed, :mod:`.report` says per GPU model
what it computed and how long it waited.
"""
