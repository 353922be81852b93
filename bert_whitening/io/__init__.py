"""Layer 1: reading files within limits, writing them staged and published by rename (numpy only)."""
