"""Process mechanics below every layer that starts or watches a process: one reader of /proc (``procfs``),
every thread read at once (``threadread``), pidfd handles on started processes (``handles``), reaping,
run membership over ancestry, markers and cgroups, and the watchdog that outlives a killed supervisor.
"""
