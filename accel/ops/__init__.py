"""Native ops that ship prebuilt with accel, and their op builders."""

from accel.ops import isa as _isa

# Before any extension loads: a bad ACCEL_CPU_ISA is a ValueError naming it, not an
# ImportError that callers would read as "not built" and quietly fall back from.
_isa.requested()
