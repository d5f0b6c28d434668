"""JIT mode: kernels compiled on first use by the gpu_compiler process and kept in a
versioned, size-bound cache (development only; a bundle never needs it)."""
