"""Pipeline schedules as data (each stage's order of passes), and their ideal timing."""
