"""Integrations that make other frameworks clients of accel (see docs/deepspeed.md)."""
