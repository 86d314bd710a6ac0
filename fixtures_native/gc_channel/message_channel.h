// A one-way message channel over a pipe, modelled on the one between a TVM
// Disco controller and its workers (the cross-thread-gc-write incident): the
// controller writes framed messages into a real pipe, a reader thread on the
// other end parses every frame and checks it.
//
// The pipe is a byte stream. A frame survives only if no other writer's bytes
// land between its first and its last byte. Frames up to kAtomicFrameLimit
// bytes go out in one write(2), which POSIX makes atomic on a pipe (PIPE_BUF);
// bigger frames are streamed as header, payload, trailer, like any channel
// that serialises a large argument, and the kernel may also split the payload
// write itself while the pipe is full. Nothing in this class touches Python.
//
// - buggy: Send() takes no lock, as TVM's channel did: the owner thread and a
//   DRef destructor run by gc on another thread write concurrently, and a
//   whole kill_reg frame can land inside the owner's call_packed frame.
// - fixed: Send() writes each whole frame under one mutex, so frames from
//   different threads can only follow each other.
//
// The mid-frame handshake (a test hook for the deterministic scenario,
// gc_thread_frees_dref_mid_call; off unless `handshake_seconds` > 0) replaces
// a timed pause, which a loaded machine could outlast: a streamed frame stops
// after its header until another thread has shown up mid-frame, so the
// interleaving the incident (apache/tvm#15996) needed luck for happens in
// every run:
//   owner thread                          collector thread (Python's gc)
//   Send(call_packed): header written
//   PauseAfterHeader() ---- opens -----> WaitForPause() returns
//        (waits, GIL released)           gc.collect() frees the DRef; its
//                                        destructor calls Send(kill_reg):
//     buggy: its first write(2) returns  -> the pause ends (kLanded)
//     fixed: it finds the lock held      -> the pause ends (kHeldBack), then
//                                           it waits for the whole frame
//     nothing freed (the Python fix)     -> ReleasePause() after the
//                                           collection ends it (kReleased)
//   payload and trailer written
// A pause that nobody ends within `handshake_seconds` comes back from Send()
// as kPauseTimedOut (the frame is still written whole), so a broken handshake
// fails the run instead of passing it.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#ifndef LIFEGUARD_FIXED
#error "build with -DLIFEGUARD_FIXED=0 (buggy) or -DLIFEGUARD_FIXED=1 (fixed)"
#endif

namespace lifeguard_fixture {

// What a frame asks the workers to do (a subset of Disco's DiscoAction).
enum class FrameKind : uint32_t {
  kGetGlobalFunc = 1,  // payload: u64 result register, function name
  kCallPacked = 2,     // payload: u64 function register, u64 result register, arguments
  kKillReg = 3,        // payload: u64 register to free (sent by a DRef destructor)
};

const char* FrameKindName(uint32_t kind);

// Wire format, native byte order: a 12-byte header {magic, kind, length},
// `length` payload bytes, then a 4-byte trailer: FNV-1a over header + payload.
constexpr uint32_t kFrameMagic = 0x4F435344;  // the bytes "DSCO"
constexpr std::size_t kHeaderSize = 12;
constexpr std::size_t kTrailerSize = 4;
constexpr uint32_t kMaxPayload = 64u << 20;
// POSIX PIPE_BUF on Linux: a write(2) of at most this many bytes to a pipe is
// never interleaved with another writer's bytes.
constexpr std::size_t kAtomicFrameLimit = 4096;

// What the reader thread saw, handed over once it has finished.
struct ReaderReport {
  uint64_t frames = 0;  // valid frames
  uint64_t calls = 0;
  uint64_t kills = 0;
  uint64_t bytes = 0;    // every byte read, valid or not
  bool corrupted = false;
  std::string message;              // the first broken frame, explained
  std::vector<uint8_t> evidence;    // the offending bytes around it
};

// What ended a mid-frame pause (see the handshake above).
enum class PauseEnd : uint8_t {
  kOpen,      // not ended yet
  kLanded,    // another thread's bytes went into the pipe inside the open frame (buggy)
  kHeldBack,  // another thread's Send() found the whole-frame lock held (fixed)
  kReleased,  // ReleasePause(): the collection the pause was for ended, nobody wrote
};

// How the mid-frame pauses of a channel ended; every pause ends exactly one way.
struct HandshakeReport {
  uint64_t pauses = 0;     // streamed frames that paused after their header
  uint64_t landed = 0;
  uint64_t held_back = 0;
  uint64_t released = 0;
  uint64_t timed_out = 0;  // nobody came before the deadline
};

enum class SendResult {
  kSent,
  kIoError,        // errno is set
  kPauseTimedOut,  // written whole, but the mid-frame pause ended by its deadline
};

class MessageChannel final {
 public:
  // `write_window_us` > 0 sleeps that long in a streamed frame between its
  // header and its payload: a timed test hook that only widens the gap in
  // which another thread's frame can land (the gc_channel probe tests use it
  // with lifeguard's own gc thread; the bundled scenarios use 0).
  // `handshake_seconds` > 0 turns the mid-frame handshake on, with that
  // deadline for each pause (the deterministic scenario); 0 leaves Send()
  // exactly as it was. Returns nullptr with `error` set when the pipe or the
  // reader cannot start.
  static std::shared_ptr<MessageChannel> Open(unsigned write_window_us, double handshake_seconds,
                                              std::string* error);

  MessageChannel(const MessageChannel&) = delete;
  MessageChannel& operator=(const MessageChannel&) = delete;
  // Closes the write end if still open and joins the reader (it ends at EOF).
  ~MessageChannel();

  // Writes one whole frame. Callers release the GIL first, as a ctypes call
  // into TVM did (and a mid-frame pause must not hold it: the thread that
  // ends the pause runs Python). kIoError leaves errno set; frames sent after
  // Shutdown() are dropped (counted) and return kSent.
  SendResult Send(FrameKind kind, const std::vector<uint8_t>& payload);

  // The handshake's other side, for the thread that is to act mid-frame.
  // Waits (call it without the GIL) until a frame has paused after its header
  // since the last pause this returned for; false after `timeout_seconds`.
  // Counted, not "is one open now": another thread (lifeguard's gc-thread
  // perturbation, say) may end a pause before the caller gets to look, and
  // the caller must not then wait for one that already came.
  bool WaitForPause(double timeout_seconds);
  // Ends the open pause as kReleased, if one is open and not ended yet;
  // returns whether it did.
  bool ReleasePause();
  HandshakeReport handshake_report();
  double handshake_seconds() const { return handshake_seconds_; }

  // A fresh register id, like Disco's controller-side register allocation.
  uint64_t NewRegister() { return next_register_.fetch_add(1) + 1; }

  // Closes the write end, so the reader sees EOF after the last frame, then
  // waits up to `timeout_seconds` for the reader. Returns false on timeout.
  bool Shutdown(double timeout_seconds, ReaderReport* report);

  uint64_t dropped_after_shutdown() const { return dropped_after_shutdown_.load(); }

 private:
  MessageChannel(int read_fd, int write_fd, unsigned write_window_us, double handshake_seconds);
  bool WriteAll(const uint8_t* data, std::size_t size);
  // The paused writer's side: opens a pause and waits until it is ended or
  // its deadline passes (false). Called with the header written.
  bool PauseAfterHeader();
  // Another writer arrived while a pause is open: ends it as `how`.
  void EndPause(PauseEnd how);
  void CloseWriteEnd();
  void ReadLoop();
  // Records the first broken frame; later ones are only drained.
  void RecordCorruption(const std::string& message, std::vector<uint8_t> evidence);

  const int read_fd_;
  int write_fd_;
  const unsigned write_window_us_;
  const double handshake_seconds_;  // 0: no handshake
  std::atomic<bool> closed_{false};
  std::atomic<uint64_t> next_register_{0};
  std::atomic<uint64_t> dropped_after_shutdown_{0};
#if LIFEGUARD_FIXED
  std::mutex write_mutex_;  // held for every whole frame
#endif

  std::thread reader_;
  std::mutex report_mutex_;
  std::condition_variable reader_done_cv_;
  bool reader_done_ = false;
  ReaderReport report_;

  // The mid-frame handshake; never held while writing to the pipe.
  std::mutex handshake_mutex_;
  std::condition_variable handshake_cv_;
  bool pause_open_ = false;
  PauseEnd pause_end_ = PauseEnd::kOpen;
  std::thread::id paused_writer_;
  uint64_t pauses_waited_for_ = 0;  // pauses WaitForPause() has returned for
  HandshakeReport handshake_;
};

}  // namespace lifeguard_fixture
