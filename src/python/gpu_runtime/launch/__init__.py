"""Turning Python arguments into a kernel's parameter buffer (numba's ABI and C's) and launch
shapes, with the per-pattern plans that make a repeated launch cheap."""
