"""Integrations that make other frameworks clients of accel (see docs/deepspeed.md and
docs/frameworks.md).

Two registrations, one for each direction: an integration adds to accel's own commands
through the entry-point group ``accel.integrations`` (:mod:`accel.extensions`), read when
a command needs it; and a framework reaches accel when a process imports it, through the
one start-up finder of :mod:`_accel_startup` (``accel-startup.pth``), whose table lists
every module accel watches and the hook it runs.
"""
