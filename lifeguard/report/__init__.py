"""Sinks: every report (terminal, results.jsonl, report.json, junit.xml, report.html) reads the same result objects."""
