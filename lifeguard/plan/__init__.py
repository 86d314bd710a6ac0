"""Turn selections into runs: discover scenario files, generate probe scenarios, schedule runs with
their seeds and perturbations."""
