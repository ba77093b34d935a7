// Unix stream sockets carrying newline-delimited messages, optionally with descriptors
// attached (SCM_RIGHTS), and the peer's credentials (SO_PEERCRED). Used by the daemon and by
// its clients; blocking, for the client side and for the daemon's short replies.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/result.h"
#include "os/fd.h"

namespace gpupool {

// Who is at the other end, as the kernel recorded it when the peer called connect(): never read
// later from /proc/<pid>, whose pid may by then belong to another process.
struct PeerCredentials {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  // Supplementary groups (SO_PEERGROUPS, Linux 4.13); nullopt where the kernel cannot say.
  std::optional<std::vector<gid_t>> groups;
};

Result<PeerCredentials> peer_credentials(int socket_fd);

// Connects to the socket at `path`; the error says why ("no daemon listening on …").
Result<int> connect_unix_socket(const std::string& path);

// A connected pair of Unix stream sockets, both close-on-exec: e.g. to hand a child its work,
// descriptors included, where a pipe could carry only bytes (and raise SIGPIPE).
Result<std::pair<Fd, Fd>> socket_pair();

// The most descriptors one message can carry (the kernel's SCM_MAX_FD).
constexpr size_t kMaxDescriptorsPerMessage = 253;

// Sends all of `data`, with `descriptors` attached to its first byte. Never raises SIGPIPE: a
// peer that is gone is an error.
Result<void> send_with_descriptors(int socket_fd, std::string_view data, const std::vector<int>& descriptors);
// Sends `line` plus '\n', with `descriptors` attached to its first byte.
Result<void> send_line(int socket_fd, const std::string& line, const std::vector<int>& descriptors = {});

struct ReceivedByte {
  char byte = 0;
  std::vector<Fd> descriptors;  // close-on-exec
};
// Reads one byte and the descriptors that came with it (sent with send_with_descriptors): the
// rest of the data is then read as from any descriptor. An error when the peer closed first, or
// when more than `max_descriptors` came (those that did not fit are lost).
Result<ReceivedByte> receive_byte_with_descriptors(int socket_fd, size_t max_descriptors);

struct ReceivedLine {
  std::string line;              // without the '\n'
  std::vector<Fd> descriptors;   // received with it
};

// Reads one line at a time from a blocking socket, keeping what follows it for the next call
// and collecting descriptors that arrive on the way. Lines longer than `max_bytes` are an error.
class LineReader {
 public:
  LineReader(int socket_fd, size_t max_bytes) : fd_(socket_fd), max_bytes_(max_bytes) {}
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;
  // nullopt: the peer closed the connection (cleanly, between lines).
  Result<std::optional<ReceivedLine>> read_line();
  // A whole line has been read from the socket already: poll() on it would not say so.
  bool has_line() const { return buffer_.find('\n') != std::string::npos; }

 private:
  int fd_;
  size_t max_bytes_;
  std::string buffer_;
  // Descriptors received and not yet handed out, each with where its read ended in buffer_. The
  // kernel ends a read with the message that carries descriptors, so they belong to the line
  // holding the read's last byte; lines sent before them may arrive in the same read.
  struct Arrived {
    size_t end;  // offset in buffer_ just past the read that brought them
    std::vector<Fd> fds;  // closed with the reader unless handed out
  };
  std::vector<Arrived> arrived_;
};

}  // namespace gpupool
