#include "os/file_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace gpupool {
namespace {

struct flock range_lock(short type, ByteRange range) {
  struct flock lock {};
  lock.l_type = type;
  lock.l_whence = SEEK_SET;
  lock.l_start = range.start;
  lock.l_len = range.length;
  return lock;
}

int flock_operation(LockMode mode) { return mode == LockMode::shared ? LOCK_SH : LOCK_EX; }

}  // namespace

bool try_lock_range(int fd, ByteRange range) {
  struct flock lock = range_lock(F_WRLCK, range);
  return fcntl(fd, F_OFD_SETLK, &lock) == 0;
}

void unlock_range(int fd, ByteRange range) {
  struct flock lock = range_lock(F_UNLCK, range);
  (void)fcntl(fd, F_OFD_SETLK, &lock);  // cannot fail on a valid descriptor
}

Result<bool> remove_unless_locked(const std::string& path) {
  int fd = open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    if (errno == ENOENT) return true;
    return fail("cannot open {}: {}", path, std::strerror(errno));
  }
  bool unlocked = try_lock_range(fd, ByteRange{});
  int removed = unlocked ? unlink(path.c_str()) : 0;
  int unlink_error = errno;
  close(fd);
  if (removed != 0 && unlink_error != ENOENT) return fail("cannot remove {}: {}", path, std::strerror(unlink_error));
  return unlocked;
}

Result<std::optional<ByteRange>> find_range_lock(int fd, ByteRange range) {
  struct flock lock = range_lock(F_WRLCK, range);
  if (fcntl(fd, F_OFD_GETLK, &lock) != 0) {
    return fail("cannot test the locks of descriptor {}: {}", fd, std::strerror(errno));
  }
  if (lock.l_type == F_UNLCK) return std::optional<ByteRange>();
  return std::optional<ByteRange>(ByteRange{lock.l_start, lock.l_len});
}

Result<void> lock_file(int fd, LockMode mode) {
  while (flock(fd, flock_operation(mode)) != 0) {
    if (errno != EINTR) return fail("cannot lock descriptor {}: {}", fd, std::strerror(errno));
  }
  return {};
}

bool try_lock_file(int fd, LockMode mode) { return flock(fd, flock_operation(mode) | LOCK_NB) == 0; }

}  // namespace gpupool
