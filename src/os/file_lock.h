// Locks on open files. Byte-range locks are OFD locks (F_OFD_SETLK): they belong to the open file
// description, so they pass with the descriptor to children and over sockets, and go when its
// last copy is closed. Whole-file locks are flock(2)'s, which also hold on NFS.
#pragma once

#include <sys/types.h>

#include <limits>
#include <optional>
#include <string>

#include "base/result.h"

namespace gpupool {

constexpr off_t kToEndOfFile = 0;  // a length reaching past the end of any file

struct ByteRange {
  off_t start = 0;
  off_t length = kToEndOfFile;
  off_t end() const { return length == kToEndOfFile ? std::numeric_limits<off_t>::max() : start + length; }
};

// Takes a write lock on `range` without waiting; false when another description holds part of it
// (or the lock cannot be taken at all).
bool try_lock_range(int fd, ByteRange range);
// Drops whatever this description locks in `range` (for every copy of the descriptor).
void unlock_range(int fd, ByteRange range);
// One lock held through another open file description that overlaps `range`; the kernel reports
// one at a time, in no particular order. nullopt when there is none.
Result<std::optional<ByteRange>> find_range_lock(int fd, ByteRange range);

// Removes the file at `path` unless another description holds a byte-range lock on it; it is
// locked while removed, so whoever opened it before and waits for its lock must check, once it
// has it, that the name is still that file's. False when it is locked (and kept); true when it
// is gone, or was already.
Result<bool> remove_unless_locked(const std::string& path);

enum class LockMode { shared, exclusive };

// Waits for a whole-file lock.
Result<void> lock_file(int fd, LockMode mode);
// Takes a whole-file lock without waiting; false when someone else holds a conflicting one.
bool try_lock_file(int fd, LockMode mode);

}  // namespace gpupool
