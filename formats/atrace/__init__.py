"""The .atrace event file: layout, writer, reader, follower of a growing file, device-clock mapping."""
