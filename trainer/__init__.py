"""Training entrypoint: pull a manifest, preflight, train, checkpoint, resume, report goodput."""
