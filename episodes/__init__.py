"""Episode containers: write, read and check robot episodes stored as MCAP files."""
