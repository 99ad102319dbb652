"""From a scenario to plans: the candidate space, CP-SAT, fronts, explanations, the validator, batches."""
