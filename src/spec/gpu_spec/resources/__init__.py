"""What a compiled kernel uses on the device: the figures as the cubin holds them (`cubin`),
the theoretical occupancy they allow per capability (`occupancy`), budgets and their check
(`budget`), and the report with its baseline diff (`report`)."""
