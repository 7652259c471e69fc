"""acceltrace's native formats: the event record, the shared-memory ring, .atrace and .actr (writer, reader, follower)."""
