"""Hypothesis strategies more than one test module draws from."""

from hypothesis import strategies as st

# 0, 1, sizes that are not a multiple of any SIMD width, and one that spans two chunks.
sizes = st.sampled_from([0, 1, 3, 17, 1000, 65537])
