"""NCCL-style collective algorithms as schedules, and their execution."""
