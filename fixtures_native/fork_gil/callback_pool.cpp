#include "callback_pool.h"

#include <pthread.h>

#include <chrono>

namespace lifeguard_fixture {

namespace {

#if LIFEGUARD_FIXED
// Runs `wait` with the GIL released when the calling thread holds it: the
// incident's proposed fix (Py_BEGIN_ALLOW_THREADS around the join), so a worker
// blocked in PyGILState_Ensure can take the GIL, finish its callback and exit.
template <typename Wait>
void WithoutGil(Wait wait) {
  if (Py_IsInitialized() && PyGILState_Check()) {
    Py_BEGIN_ALLOW_THREADS
    wait();
    Py_END_ALLOW_THREADS
  } else {
    wait();
  }
}
#endif

}  // namespace

void RunPythonTask(PythonTask task) {
  PyGILState_STATE gil = PyGILState_Ensure();
  PyObject* result = PyObject_Call(task.callable, task.args, nullptr);
  if (result == nullptr) {
    // A worker has nobody to raise to: report like an exception in __del__.
    PyErr_WriteUnraisable(task.callable);
  } else {
    Py_DECREF(result);
  }
  Py_DECREF(task.callable);
  Py_DECREF(task.args);
  PyGILState_Release(gil);
}

CallbackPool& CallbackPool::Get() {
  static CallbackPool instance;
  return instance;
}

CallbackPool::CallbackPool() {
  // MXNet registers its fork handlers from static initialisers, once per
  // process; they stay registered in forked children too.
  pthread_atfork(PrepareForkHandler, ParentAfterForkHandler, ChildAfterForkHandler);
}

CallbackPool::~CallbackPool() {
  // exit() runs this after Py_Finalize. buggy: the pool may still run workers
  // with queued callbacks, and draining them calls into a finalized Python
  // (the incident's hang at exit; a NULL-interpreter crash in the worker's
  // PyGILState_Ensure on 3.10-3.13). fixed: the atexit hook already stopped the
  // pool and refuses new work, so there is nothing left to drain.
  std::lock_guard<std::mutex> control(control_mutex_);
  StopLocked();
}

bool CallbackPool::Start(int workers) {
  std::lock_guard<std::mutex> control(control_mutex_);
  if (shut_down_) {
    return false;
  }
  StartLocked(workers);
  return true;
}

void CallbackPool::StartLocked(int workers) {
  if (!workers_.empty()) {
    return;
  }
  {
    std::lock_guard<std::mutex> lock(queue_mutex_);
    live_workers_ = workers;
  }
  for (int i = 0; i < workers; ++i) {
    workers_.emplace_back([this] { WorkerLoop(); });
  }
}

bool CallbackPool::Push(PythonTask task) {
  {
    std::lock_guard<std::mutex> lock(queue_mutex_);
    if (live_workers_ == 0) {
      return false;
    }
    queue_.push_back(task);
  }
  work_ready_.notify_one();
  return true;
}

void CallbackPool::Hold() {
  std::lock_guard<std::mutex> lock(queue_mutex_);
  held_ = true;
}

bool CallbackPool::WaitIdle(double timeout_seconds) {
  std::unique_lock<std::mutex> lock(queue_mutex_);
  auto idle = [this] { return queue_.empty() && running_callbacks_ == 0; };
  if (timeout_seconds < 0) {
    idle_.wait(lock, idle);
    return true;
  }
  return idle_.wait_for(lock, std::chrono::duration<double>(timeout_seconds), idle);
}

void CallbackPool::Stop() {
  std::lock_guard<std::mutex> control(control_mutex_);
  StopLocked();
}

void CallbackPool::Shutdown() {
  std::lock_guard<std::mutex> control(control_mutex_);
  StopLocked();
  shut_down_ = true;
}

void CallbackPool::StopBeforeFork() {
  std::lock_guard<std::mutex> control(control_mutex_);
  StopForForkLocked();
}

void CallbackPool::StopLocked() {
  if (workers_.empty()) {
    return;
  }
  {
    std::lock_guard<std::mutex> lock(queue_mutex_);
    stopping_ = true;
    held_ = false;  // stopping runs held tasks: CustomOperator::Stop drained its queue
  }
  work_ready_.notify_all();
  // buggy: inside os.fork() the calling thread holds the GIL here, and a worker
  // draining a callback waits for it in PyGILState_Ensure: neither moves.
  for (std::thread& worker : workers_) {
    worker.join();
  }
  workers_.clear();
  std::lock_guard<std::mutex> lock(queue_mutex_);
  stopping_ = false;
}

void CallbackPool::StopForForkLocked() {
  if (!workers_.empty()) {
    restart_after_fork_ = static_cast<int>(workers_.size());
    StopLocked();
  }
}

void CallbackPool::RestartAfterFork() {
  if (restart_after_fork_ > 0) {
    StartLocked(restart_after_fork_);
    restart_after_fork_ = 0;
  }
}

void CallbackPool::WorkerLoop() {
  std::unique_lock<std::mutex> lock(queue_mutex_);
  for (;;) {
    work_ready_.wait(lock, [this] { return stopping_ || (!held_ && !queue_.empty()); });
    if (queue_.empty()) {
      break;  // stopping, and nothing left to drain
    }
    PythonTask task = queue_.front();
    queue_.pop_front();
    ++running_callbacks_;
    lock.unlock();
    RunPythonTask(task);
    lock.lock();
    --running_callbacks_;
    if (queue_.empty() && running_callbacks_ == 0) {
      idle_.notify_all();
    }
  }
  if (--live_workers_ == 0) {
    idle_.notify_all();
  }
}

int CallbackPool::WorkerCount() {
  std::lock_guard<std::mutex> control(control_mutex_);
  return static_cast<int>(workers_.size());
}

bool CallbackPool::IsHeld() {
  std::lock_guard<std::mutex> lock(queue_mutex_);
  return held_;
}

std::size_t CallbackPool::QueuedCount() {
  std::lock_guard<std::mutex> lock(queue_mutex_);
  return queue_.size();
}

// The handlers run inside fork(), after CPython's PyOS_BeforeFork: the
// forking thread holds the GIL, the import lock and, from 3.13 on, the
// runtime's thread-state list lock (HEAD_LOCK), which PyGILState_Ensure needs
// to create a thread state for a worker.
void CallbackPool::PrepareForkHandler() {
  CallbackPool& pool = Get();
#if LIFEGUARD_FIXED
  // Normally a no-op: the before-fork hook stopped the pool already. A fork
  // that bypasses os.fork() still gets the incident's fix.
  WithoutGil([&pool] {
    pool.control_mutex_.lock();
    pool.StopForForkLocked();
  });
#else
  pool.control_mutex_.lock();
  pool.StopForForkLocked();
#endif
  // Another thread may be pushing right now: hold the queue lock across fork()
  // so the child never inherits it locked by a thread it does not have.
  pool.queue_mutex_.lock();
}

void CallbackPool::ParentAfterForkHandler() {
  CallbackPool& pool = Get();
  pool.queue_mutex_.unlock();
  pool.RestartAfterFork();
  pool.control_mutex_.unlock();
}

void CallbackPool::ChildAfterForkHandler() {
  // fork() copied only the forking thread, which still owns both locks: start
  // fresh workers for the child (they wait on the queue and touch Python only
  // for tasks pushed after os.fork() returned), then unlock.
  CallbackPool& pool = Get();
  pool.queue_mutex_.unlock();
  pool.RestartAfterFork();
  pool.control_mutex_.unlock();
}

}  // namespace lifeguard_fixture
