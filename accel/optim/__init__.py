"""CPU optimizers backed by accel's prebuilt native kernels (``torch.optim`` compatible)."""

from accel.optim.adagrad import CPUAdagrad
from accel.optim.adam import CPUAdam
from accel.optim.lion import CPULion

__all__ = ["CPUAdagrad", "CPUAdam", "CPULion"]
