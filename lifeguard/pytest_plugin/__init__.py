"""The pytest plugin: hooks (light at import), settings, marker, runner, fixture."""
