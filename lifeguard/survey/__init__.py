"""``lifeguard survey``: probe the extension modules of installed distributions, and triage what fails.

inventory (what is installed, read in the target interpreter) > targets (which modules to probe) > hooks
(what a typical program does with each package) > plan (probe scenarios) > the session > triage
(documented, candidate, probe-error) > repro (standalone scripts of the candidates). The reports (survey.json,
the terminal table, survey.html) are in lifeguard.report.survey*.
"""
