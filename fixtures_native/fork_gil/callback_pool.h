// A native worker-thread pool that runs Python callbacks, modelled on MXNet's
// CustomOperator (the fork-with-held-gil incident): a process-wide singleton
// with a task queue and std::thread workers, stopped by a pthread_atfork
// prepare handler and restarted in the parent and the child, like MXNet's
// Engine.
//
// Stop() drains the queue before the workers exit, as CustomOperator::Stop
// did, so a callback still queued when the pool stops must run then, and
// running it needs the GIL. Who stops the pool, and with what held, is the bug:
// - buggy: the prepare handler joins the workers inside os.fork(), where the
//   forking thread holds the GIL (deadlock); the only other stop is the static
//   destructor, which exit() runs after Python has finalized (hang or crash).
// - fixed: the pool stops from Python's own before-fork hook and from an atexit
//   hook, with the GIL released, before CPython takes its fork locks and before
//   it finalizes; the prepare handler releases the GIL around its join too.
#pragma once

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#ifndef LIFEGUARD_FIXED
#error "build with -DLIFEGUARD_FIXED=0 (buggy) or -DLIFEGUARD_FIXED=1 (fixed)"
#endif

namespace lifeguard_fixture {

// A Python callable and its argument tuple. The task owns both references;
// whoever runs it releases them (with the GIL held).
struct PythonTask {
  PyObject* callable;
  PyObject* args;
};

class CallbackPool final {
 public:
  // Constructed on first use (at module import), so exit() runs its destructor
  // after Py_Finalize, like MXNet's `static CustomOperator inst`.
  static CallbackPool& Get();

  CallbackPool(const CallbackPool&) = delete;
  CallbackPool& operator=(const CallbackPool&) = delete;

  // The methods below never touch Python themselves and never wait with the
  // GIL held, except where the bug needs it (see the .cpp): callers coming
  // from Python release the GIL first, as a ctypes call into MXNet did.

  // Starts `workers` threads if none run. Returns false if the pool was shut
  // down for good (fixed variant, after the atexit hook).
  bool Start(int workers);
  // Queues a task; takes over its references. Returns false (references
  // untouched) when no worker runs.
  bool Push(PythonTask task);
  // Keeps queued tasks queued until the pool stops, like an MXNet custom op
  // whose inputs are not computed yet: the incident's "unfinished async op".
  void Hold();
  // Waits until the queue is empty and no callback runs. Returns false after
  // `timeout_seconds` (negative: no limit).
  bool WaitIdle(double timeout_seconds);
  // Drains the queue (held tasks included), then joins every worker.
  void Stop();
  // Stop() for good: later Start() and Push() fail (the fixed atexit hook).
  void Shutdown();
  // Stop(), remembering to restart the same number of workers after fork()
  // (the fixed before-fork hook).
  void StopBeforeFork();

  int WorkerCount();
  bool IsHeld();
  std::size_t QueuedCount();

 private:
  CallbackPool();
  ~CallbackPool();

  static void PrepareForkHandler();
  static void ParentAfterForkHandler();
  static void ChildAfterForkHandler();

  void StartLocked(int workers);
  void StopLocked();
  void StopForForkLocked();
  void RestartAfterFork();
  void WorkerLoop();

  // Serialises Start/Stop (and is held across fork(), so the child never
  // inherits it locked by a thread that no longer exists).
  std::mutex control_mutex_;
  std::vector<std::thread> workers_;  // guarded by control_mutex_
  int restart_after_fork_ = 0;        // guarded by control_mutex_
  bool shut_down_ = false;            // guarded by control_mutex_

  std::mutex queue_mutex_;
  std::condition_variable work_ready_;
  std::condition_variable idle_;
  std::deque<PythonTask> queue_;  // the rest guarded by queue_mutex_
  int running_callbacks_ = 0;
  int live_workers_ = 0;
  bool held_ = false;
  bool stopping_ = false;
};

// Runs `task` on the calling native thread, which has no Python thread state:
// PyGILState_Ensure creates one for the call and PyGILState_Release deletes it,
// exactly what the ctypes CFUNCTYPE trampoline behind MXNet's custom ops did.
void RunPythonTask(PythonTask task);

}  // namespace lifeguard_fixture
