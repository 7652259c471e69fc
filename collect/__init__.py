"""Collection: the native event record and .atrace files, the tracing daemon and its clients.

Nothing here is imported eagerly: `from collect import client` loads only the client.
"""
