"""`python -m gpu_runtime`: the commands a device runs (verify a bundle, manage the JIT cache)."""
