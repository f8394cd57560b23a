"""What a training job runs: model shapes, parallel plan, per-rank ops, FLOPs, volumes.

Plain data and arithmetic; nothing here times anything.
"""
