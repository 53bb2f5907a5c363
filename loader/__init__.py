"""Object-store access, the node-local cache and torch datasets that assemble samples."""
