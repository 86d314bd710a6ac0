"""The same app as bug.py, stopping its worker QThread when the app quits.

The fix the upstream reports converge on (Victor-IX/Blender-Launcher-V2#454, and the Qt
documentation of ~QThread): before the QThread object is destroyed, ask its event loop to
quit and wait for the thread to finish. Connected to aboutToQuit, it runs while Qt and
Python are both intact; at exit ~QThread finds a finished thread.
"""

from _app import make_app, run_main_loop

app, thread, poller = make_app()


def stop_poller() -> None:
    thread.quit()
    if not thread.wait(5000):
        raise RuntimeError("the poller thread did not stop within 5 s")


app.aboutToQuit.connect(stop_poller)
run_main_loop(app)
assert thread.isFinished(), "the poller thread is still running"
print(f"main loop done after {poller.ticks} poller tick(s); poller thread stopped")
