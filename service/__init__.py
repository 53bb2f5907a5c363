"""Control plane: settings, the command line, the embedded stack and the HTTP API."""
