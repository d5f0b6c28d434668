"""Budgets of what a compiled kernel uses on the device and their check (`budget`), and the
report with its baseline diff (`report`); both on the occupancy calculator, `gpu_spec.occupancy`."""
