"""The device model: a simulated PCIe accelerator, its driver and runtime, workloads and ground truth."""
