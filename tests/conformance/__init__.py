"""Per-protocol conformance suites. Every test takes the ``accelerator`` fixture, so each
available backend (CPU here, CUDA and plugins once registered) runs the same checks."""
