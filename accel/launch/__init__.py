"""`accel run`: torchrun with NUMA-aware core binding and per-rank device visibility."""
