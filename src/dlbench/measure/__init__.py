"""Timers, the warm-up and measurement policy, and statistics of per-step samples."""
