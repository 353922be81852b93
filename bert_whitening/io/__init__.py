"""Layer 1: reading files within limits, writing them staged and published by rename (numpy only);
the HTTP(S) exchange under one deadline (`http_client`)."""
