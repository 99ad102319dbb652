"""Many jobs over a calendar: the problem as data, its CP-SAT schedule, and the portfolio file's plan."""
