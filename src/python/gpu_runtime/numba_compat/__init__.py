"""What numba-cuda apps use beside their kernels, without numba: xoroshiro128+ RNG states."""
