"""The tracing daemon: unix socket, per-thread shared-memory rings, drain into .atrace chunks."""
