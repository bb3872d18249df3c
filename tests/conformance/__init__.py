"""Every available backend against every check of the conformance kit (accel.testing)."""
