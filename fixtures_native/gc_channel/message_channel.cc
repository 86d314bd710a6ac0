// The pipe channel and its frame-checking reader: see message_channel.h.
#include "message_channel.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <system_error>

namespace lifeguard_fixture {

namespace {

constexpr std::size_t kEvidenceBefore = 8;
constexpr std::size_t kStreamChunk = 64 * 1024;
constexpr uint32_t kFnvOffsetBasis = 2166136261u;
constexpr std::size_t kEvidenceAfter = 64;

uint32_t Fnv1a(uint32_t hash, const uint8_t* data, std::size_t size) {
  for (std::size_t i = 0; i < size; ++i) {
    hash ^= data[i];
    hash *= 16777619u;
  }
  return hash;
}

uint32_t FrameChecksum(const uint8_t* header, const uint8_t* payload, std::size_t size) {
  return Fnv1a(Fnv1a(kFnvOffsetBasis, header, kHeaderSize), payload, size);
}

void PutU32(uint8_t* out, uint32_t value) { std::memcpy(out, &value, sizeof value); }

uint32_t GetU32(const uint8_t* in) {
  uint32_t value;
  std::memcpy(&value, in, sizeof value);
  return value;
}

// Reads until `size` bytes arrived or the stream ended; returns the count read.
std::size_t ReadFull(int fd, uint8_t* out, std::size_t size) {
  std::size_t done = 0;
  while (done < size) {
    ssize_t n = read(fd, out + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<std::size_t>(n);
  }
  return done;
}

bool KnownKind(uint32_t kind) {
  return kind >= static_cast<uint32_t>(FrameKind::kGetGlobalFunc) &&
         kind <= static_cast<uint32_t>(FrameKind::kKillReg);
}

// Where another frame's header starts inside `data`, or -1.
long FindStrayHeader(const std::vector<uint8_t>& data) {
  for (std::size_t i = 0; i + kHeaderSize <= data.size(); ++i) {
    if (GetU32(&data[i]) == kFrameMagic && KnownKind(GetU32(&data[i + 4]))) {
      return static_cast<long>(i);
    }
  }
  return -1;
}

std::string Format(const char* format, ...) __attribute__((format(printf, 1, 2)));

std::string Format(const char* format, ...) {
  char text[512];
  va_list args;
  va_start(args, format);
  vsnprintf(text, sizeof text, format, args);
  va_end(args);
  return text;
}

}  // namespace

const char* FrameKindName(uint32_t kind) {
  switch (static_cast<FrameKind>(kind)) {
    case FrameKind::kGetGlobalFunc:
      return "get_global_func";
    case FrameKind::kCallPacked:
      return "call_packed";
    case FrameKind::kKillReg:
      return "kill_reg";
  }
  return "unknown";
}

std::shared_ptr<MessageChannel> MessageChannel::Open(unsigned write_window_us, double handshake_seconds,
                                                     std::string* error) {
  int fds[2];
  // O_CLOEXEC: a child process must not keep the write end open, or the
  // reader would never see EOF.
  if (pipe2(fds, O_CLOEXEC) != 0) {
    *error = Format("pipe2 failed: %s", strerror(errno));
    return nullptr;
  }
  std::shared_ptr<MessageChannel> channel(
      new MessageChannel(fds[0], fds[1], write_window_us, handshake_seconds));
  try {
    channel->reader_ = std::thread(&MessageChannel::ReadLoop, channel.get());
  } catch (const std::system_error& exc) {
    *error = Format("cannot start the reader thread: %s", exc.what());
    return nullptr;  // the destructor closes both ends
  }
  return channel;
}

MessageChannel::MessageChannel(int read_fd, int write_fd, unsigned write_window_us,
                               double handshake_seconds)
    : read_fd_(read_fd),
      write_fd_(write_fd),
      write_window_us_(write_window_us),
      handshake_seconds_(handshake_seconds) {}

MessageChannel::~MessageChannel() {
  CloseWriteEnd();
  if (reader_.joinable()) reader_.join();
  close(read_fd_);
}

void MessageChannel::CloseWriteEnd() {
#if LIFEGUARD_FIXED
  std::lock_guard<std::mutex> whole_frame(write_mutex_);
#endif
  if (closed_.exchange(true)) return;
  close(write_fd_);
}

bool MessageChannel::WriteAll(const uint8_t* data, std::size_t size) {
  while (size > 0) {
    ssize_t n = write(write_fd_, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    data += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

SendResult MessageChannel::Send(FrameKind kind, const std::vector<uint8_t>& payload) {
#if LIFEGUARD_FIXED
  // The fix on the native side: one writer at a time, for a whole frame.
  std::unique_lock<std::mutex> whole_frame(write_mutex_, std::defer_lock);
  if (handshake_seconds_ <= 0) {
    whole_frame.lock();
  } else if (!whole_frame.try_lock()) {
    // Mid-frame, this is where the buggy build would write: the lock keeps
    // it out, and the paused writer (which holds the lock) may go on.
    EndPause(PauseEnd::kHeldBack);
    whole_frame.lock();
  }
#endif
  if (closed_.load()) {
    dropped_after_shutdown_.fetch_add(1);
    return SendResult::kSent;
  }
  uint8_t header[kHeaderSize];
  PutU32(header, kFrameMagic);
  PutU32(header + 4, static_cast<uint32_t>(kind));
  PutU32(header + 8, static_cast<uint32_t>(payload.size()));
  uint8_t trailer[kTrailerSize];

  if (kHeaderSize + payload.size() + kTrailerSize <= kAtomicFrameLimit) {
    PutU32(trailer, FrameChecksum(header, payload.data(), payload.size()));
    std::vector<uint8_t> frame(header, header + kHeaderSize);
    frame.insert(frame.end(), payload.begin(), payload.end());
    frame.insert(frame.end(), trailer, trailer + kTrailerSize);
    if (!WriteAll(frame.data(), frame.size())) return SendResult::kIoError;
    // Only once write(2) returned are these bytes surely behind a paused
    // header: ending the pause when the write merely starts would leave it
    // to the scheduler whether they or the paused writer's payload go first.
    if (handshake_seconds_ > 0) EndPause(PauseEnd::kLanded);
    return SendResult::kSent;
  }
  // A large frame is streamed: header, then the payload chunk by chunk with
  // the checksum computed on the way, then the trailer. Without the lock
  // above, any other thread's Send() may write between these calls, or inside
  // a chunk's write while the pipe is full and the kernel lets other writers in.
  if (!WriteAll(header, kHeaderSize)) return SendResult::kIoError;
  bool pause_ended = true;
  if (handshake_seconds_ > 0) {
    EndPause(PauseEnd::kLanded);  // another writer's streamed frame, if one is paused
    pause_ended = PauseAfterHeader();
  }
  if (write_window_us_ > 0) {
    std::this_thread::sleep_for(std::chrono::microseconds(write_window_us_));
  }
  uint32_t checksum = Fnv1a(kFnvOffsetBasis, header, kHeaderSize);
  for (std::size_t offset = 0; offset < payload.size(); offset += kStreamChunk) {
    std::size_t size = std::min(kStreamChunk, payload.size() - offset);
    checksum = Fnv1a(checksum, payload.data() + offset, size);
    if (!WriteAll(payload.data() + offset, size)) return SendResult::kIoError;
  }
  PutU32(trailer, checksum);
  if (!WriteAll(trailer, kTrailerSize)) return SendResult::kIoError;
  return pause_ended ? SendResult::kSent : SendResult::kPauseTimedOut;
}

bool MessageChannel::PauseAfterHeader() {
  std::unique_lock<std::mutex> lock(handshake_mutex_);
  // One pause at a time: a second streamed frame would otherwise wait for a
  // writer that is itself paused (the scenario has a single streaming writer).
  if (pause_open_) return true;
  pause_open_ = true;
  pause_end_ = PauseEnd::kOpen;
  paused_writer_ = std::this_thread::get_id();
  ++handshake_.pauses;
  handshake_cv_.notify_all();  // wakes WaitForPause()
  auto deadline = std::chrono::steady_clock::now() +
                  std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                      std::chrono::duration<double>(handshake_seconds_));
  bool ended = handshake_cv_.wait_until(lock, deadline, [this] { return pause_end_ != PauseEnd::kOpen; });
  switch (pause_end_) {
    case PauseEnd::kOpen:
      ++handshake_.timed_out;
      break;
    case PauseEnd::kLanded:
      ++handshake_.landed;
      break;
    case PauseEnd::kHeldBack:
      ++handshake_.held_back;
      break;
    case PauseEnd::kReleased:
      ++handshake_.released;
      break;
  }
  pause_open_ = false;
  paused_writer_ = std::thread::id();
  return ended;
}

void MessageChannel::EndPause(PauseEnd how) {
  std::lock_guard<std::mutex> lock(handshake_mutex_);
  if (!pause_open_ || pause_end_ != PauseEnd::kOpen) return;
  if (paused_writer_ == std::this_thread::get_id()) return;  // only another thread counts
  pause_end_ = how;
  handshake_cv_.notify_all();
}

bool MessageChannel::WaitForPause(double timeout_seconds) {
  std::unique_lock<std::mutex> lock(handshake_mutex_);
  auto deadline = std::chrono::steady_clock::now() +
                  std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                      std::chrono::duration<double>(timeout_seconds));
  if (!handshake_cv_.wait_until(lock, deadline,
                                [this] { return handshake_.pauses > pauses_waited_for_; })) {
    return false;
  }
  pauses_waited_for_ = handshake_.pauses;
  return true;
}

bool MessageChannel::ReleasePause() {
  std::lock_guard<std::mutex> lock(handshake_mutex_);
  if (!pause_open_ || pause_end_ != PauseEnd::kOpen) return false;
  pause_end_ = PauseEnd::kReleased;
  handshake_cv_.notify_all();
  return true;
}

HandshakeReport MessageChannel::handshake_report() {
  std::lock_guard<std::mutex> lock(handshake_mutex_);
  return handshake_;
}

bool MessageChannel::Shutdown(double timeout_seconds, ReaderReport* report) {
  CloseWriteEnd();
  std::unique_lock<std::mutex> lock(report_mutex_);
  auto deadline = std::chrono::steady_clock::now() +
                  std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                      std::chrono::duration<double>(timeout_seconds));
  if (!reader_done_cv_.wait_until(lock, deadline, [this] { return reader_done_; })) {
    return false;
  }
  *report = report_;
  lock.unlock();
  if (reader_.joinable()) reader_.join();
  return true;
}

void MessageChannel::RecordCorruption(const std::string& message, std::vector<uint8_t> evidence) {
  std::lock_guard<std::mutex> lock(report_mutex_);
  if (report_.corrupted) return;
  report_.corrupted = true;
  report_.message = message;
  report_.evidence = std::move(evidence);
}

void MessageChannel::ReadLoop() {
  std::vector<uint8_t> body;  // payload + trailer of the current frame
  uint8_t header[kHeaderSize];
  uint64_t index = 0;  // frames started, counting from 1
  uint64_t bytes = 0, frames = 0, calls = 0, kills = 0;
  for (;;) {
    std::size_t got = ReadFull(read_fd_, header, kHeaderSize);
    bytes += got;
    if (got == 0) break;  // clean end of stream
    ++index;
    std::vector<uint8_t> seen(header, header + got);
    if (got < kHeaderSize) {
      RecordCorruption(Format("frame %llu: the stream ends inside a frame header",
                              (unsigned long long)index), seen);
      break;
    }
    uint32_t magic = GetU32(header), kind = GetU32(header + 4), length = GetU32(header + 8);
    if (magic != kFrameMagic || !KnownKind(kind) || length > kMaxPayload) {
      uint8_t more[kEvidenceAfter];
      std::size_t extra = ReadFull(read_fd_, more, sizeof more);
      bytes += extra;
      seen.insert(seen.end(), more, more + extra);
      RecordCorruption(Format("frame %llu: no valid header where one must start (magic 0x%08x, "
                              "kind %u, length %u)", (unsigned long long)index, magic, kind, length),
                       seen);
      break;
    }
    body.resize(std::size_t(length) + kTrailerSize);
    got = ReadFull(read_fd_, body.data(), body.size());
    bytes += got;
    if (got < body.size()) {
      seen.insert(seen.end(), body.begin(), body.begin() + std::min<std::size_t>(got, kEvidenceAfter));
      RecordCorruption(Format("frame %llu (%s, %u payload bytes): the stream ends after %zu of them",
                              (unsigned long long)index, FrameKindName(kind), length, got), seen);
      break;
    }
    uint32_t expected = FrameChecksum(header, body.data(), length);
    uint32_t actual = GetU32(&body[length]);
    if (expected != actual) {
      // A stray frame may start in the last bytes of this one (over its trailer), so
      // its header is only whole with what follows: read a little more before looking.
      uint8_t more[kEvidenceAfter];
      std::size_t extra = ReadFull(read_fd_, more, sizeof more);
      bytes += extra;
      body.insert(body.end(), more, more + extra);
      long stray = FindStrayHeader(body);
      std::size_t from = 0;
      std::string message;
      if (stray >= 0) {
        from = std::size_t(stray) > kEvidenceBefore ? std::size_t(stray) - kEvidenceBefore : 0;
        message = Format("frame %llu (%s, %u payload bytes) fails its checksum: a %s frame header "
                         "starts %ld bytes into its payload, so another writer's frame landed "
                         "inside this one", (unsigned long long)index, FrameKindName(kind), length,
                         FrameKindName(GetU32(&body[stray + 4])), stray);
      } else {
        message = Format("frame %llu (%s, %u payload bytes) fails its checksum "
                         "(trailer 0x%08x, computed 0x%08x)", (unsigned long long)index,
                         FrameKindName(kind), length, actual, expected);
      }
      std::size_t to = std::min(body.size(), from + kEvidenceBefore + kEvidenceAfter);
      seen.insert(seen.end(), body.begin() + from, body.begin() + to);
      RecordCorruption(message, seen);
      break;
    }
    if (static_cast<FrameKind>(kind) == FrameKind::kKillReg && length != sizeof(uint64_t)) {
      seen.insert(seen.end(), body.begin(), body.begin() + std::min<std::size_t>(body.size(), 64));
      RecordCorruption(Format("frame %llu (kill_reg) carries %u payload bytes instead of 8",
                              (unsigned long long)index, length), seen);
      break;
    }
    ++frames;
    if (static_cast<FrameKind>(kind) == FrameKind::kCallPacked) ++calls;
    if (static_cast<FrameKind>(kind) == FrameKind::kKillReg) ++kills;
  }
  // After the first broken frame nothing can be parsed any more; keep draining
  // so that writers never block on a full pipe.
  uint8_t sink[1 << 16];
  for (;;) {
    ssize_t n = read(read_fd_, sink, sizeof sink);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    bytes += static_cast<uint64_t>(n);
  }
  std::lock_guard<std::mutex> lock(report_mutex_);
  report_.frames = frames;
  report_.calls = calls;
  report_.kills = kills;
  report_.bytes = bytes;
  reader_done_ = true;
  reader_done_cv_.notify_all();
}

}  // namespace lifeguard_fixture
