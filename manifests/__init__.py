"""Manifest format: build from a query result, store, open by mmap, index and shard."""
