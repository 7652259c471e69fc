"""acceltrace: performance analysis for PCIe-attached ML accelerators."""

__version__ = "0.1.0"
