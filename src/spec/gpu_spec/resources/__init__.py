"""What a compiled kernel uses on the device: the occupancy calculator (`occupancy`), resource
budgets and their check (`budget`), and the report with its baseline diff (`report`)."""
