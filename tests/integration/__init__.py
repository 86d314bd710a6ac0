"""Real processes, real crashes and hangs, gdb and compilers; every deadline derived from the measured pace."""
