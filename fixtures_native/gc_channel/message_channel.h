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

class MessageChannel final {
 public:
  // `write_window_us` > 0 pauses a streamed frame between its header and its
  // payload (a test hook for the deterministic scenario: it widens the gap in
  // which another thread's frame can land; the stochastic scenario uses 0).
  // Returns nullptr with `error` set when the pipe or the reader cannot start.
  static std::shared_ptr<MessageChannel> Open(unsigned write_window_us, std::string* error);

  MessageChannel(const MessageChannel&) = delete;
  MessageChannel& operator=(const MessageChannel&) = delete;
  // Closes the write end if still open and joins the reader (it ends at EOF).
  ~MessageChannel();

  // Writes one whole frame. Callers release the GIL first, as a ctypes call
  // into TVM did. Returns false with errno set on an I/O error; frames sent
  // after Shutdown() are dropped (counted) and return true.
  bool Send(FrameKind kind, const std::vector<uint8_t>& payload);

  // A fresh register id, like Disco's controller-side register allocation.
  uint64_t NewRegister() { return next_register_.fetch_add(1) + 1; }

  // Closes the write end, so the reader sees EOF after the last frame, then
  // waits up to `timeout_seconds` for the reader. Returns false on timeout.
  bool Shutdown(double timeout_seconds, ReaderReport* report);

  uint64_t dropped_after_shutdown() const { return dropped_after_shutdown_.load(); }

 private:
  MessageChannel(int read_fd, int write_fd, unsigned write_window_us);
  bool WriteAll(const uint8_t* data, std::size_t size);
  void CloseWriteEnd();
  void ReadLoop();
  // Records the first broken frame; later ones are only drained.
  void RecordCorruption(const std::string& message, std::vector<uint8_t> evidence);

  const int read_fd_;
  int write_fd_;
  const unsigned write_window_us_;
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
};

}  // namespace lifeguard_fixture
