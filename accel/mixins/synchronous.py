"""Capability markers for synchronous devices: no streams, no graphs.

A class-level ``None`` marker makes ``isinstance(acc, StreamAPI)`` False at run time and
makes assigning the class to ``StreamAPI`` a static error in mypy and pyright. The marker
must stay at class level, and the No-mixin must come before any mixin that implements the
capability in the bases, or the implementation would win.
"""

from __future__ import annotations


class NoStreamMixin:
    """The device runs every op to completion before returning: no streams, no events."""

    Stream: None = None
    Event: None = None
    stream: None = None
    current_stream: None = None
    default_stream: None = None

    def is_synchronized_device(self) -> bool:
        """True: without streams, an op has finished when its call returns."""
        return True


class NoGraphMixin:
    """The device cannot capture and replay graphs."""

    create_graph: None = None
    capture_to_graph: None = None
    replay_graph: None = None
