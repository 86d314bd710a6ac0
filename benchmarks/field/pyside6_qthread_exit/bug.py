"""A PySide6 app exits with its worker QThread still running: ~QThread aborts at exit.

Upstream: Victor-IX/Blender-Launcher-V2#454 ("SIGABRT on exit - QThread: Destroyed while
thread '' is still running", PySide6) and Nitrokey/nitrokey-app2#215 ("Core dump on exit",
PySide6 on Python 3.11: abort in libQt6Core.so.6). The app starts a QThread whose event
loop runs a poller, and when it quits it stops the poller's timer but never the thread
(no quit() + wait()). At interpreter exit PySide's own atexit handler (QtCore's cleanup:
PySide::runCleanupFunctions -> destroyQCoreApplication) deletes every QObject that Python
owns, the QThread among them, while its thread still runs its Qt event loop (native code,
no Python). QThread::~QThread() calls qFatal("QThread: Destroyed while thread is still
running"): SIGABRT on the main thread, in Py_FinalizeEx's atexit calls (phase exit).
"""

from _app import make_app, run_main_loop

app, thread, poller = make_app()  # the poller thread is in its Qt event loop now
run_main_loop(app)
print(f"main loop done after {poller.ticks} poller tick(s); exiting without stopping it")
# Not stopped: thread.quit() and thread.wait() never run, so ~QThread finds it running.
