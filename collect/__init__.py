"""Producers: counter sources and the sampler; the tracing daemon and its client libraries.

The formats they write live in acceltrace.formats. Nothing here is imported eagerly:
`from acceltrace.collect import client` loads only the client.
"""
