"""Curations: guarded SQL over the curation views, built into manifests."""
