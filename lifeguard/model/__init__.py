"""The vocabulary of DESIGN.md as typed, frozen data: outcomes, scenarios, runs, stacks, results."""
