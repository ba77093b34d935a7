// Files and directories by path: open, status, modes and owners, create, rename, remove, list.
// Errors name the path and say why ("cannot create /run/gpupool: Permission denied").
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "os/fd.h"

namespace gpupool {

enum class FileType { regular, directory, symbolic_link, socket, other };

struct FileStatus {
  FileType type = FileType::other;
  unsigned permissions = 0;  // st_mode & 07777: the rwx bits, set-id and sticky bits
  uid_t owner = 0;
  uint64_t links = 0;        // how many names the file has
  uint64_t size = 0;         // bytes
};

Result<FileStatus> file_status(const std::string& path);  // follows a final symbolic link
Result<FileStatus> link_status(const std::string& path);  // the link itself
// As link_status; nullopt where nothing has that name.
Result<std::optional<FileStatus>> link_status_if_any(const std::string& path);
Result<FileStatus> file_status(int fd);

// Which file a path names (the link itself): the same name may come to name another file, after
// the first was deleted or renamed away.
struct FileIdentity {
  uint64_t device = 0;
  uint64_t inode = 0;
  bool operator==(const FileIdentity&) const = default;
};
Result<FileIdentity> file_identity(const std::string& path);

// Opens with open(2)'s flags, always close-on-exec.
Result<Fd> open_file(const std::string& path, int flags, mode_t mode = 0);
// As open_file; nullopt where nothing has that name.
Result<std::optional<Fd>> open_existing(const std::string& path, int flags);
// As open_existing, for a regular file only, reached without following a final symbolic link:
// a link, a directory, a FIFO (O_NONBLOCK in `flags` keeps its open from blocking) or a device
// is an error, so a name someone else controls cannot point a privileged reader elsewhere.
Result<std::optional<Fd>> open_regular_file(const std::string& path, int flags);
// Creates the file, which must not exist yet (O_CREAT | O_EXCL); nullopt where it does.
Result<std::optional<Fd>> create_file(const std::string& path, int flags, mode_t mode);

struct UniqueFile {
  Fd fd;
  std::string path;
};
// A new file named `prefix` + six random characters + `suffix`, mode 0600, open for writing:
// nobody can have planted a file or link under a name nobody could guess.
Result<UniqueFile> create_unique_file(const std::string& prefix, const std::string& suffix);

// Puts `text` at `path` whole or not at all: written to a new file under a name nobody can guess
// beside it, or in `temp_dir` (on the same file system) where a reader lists the directory (a
// file or link planted under a predictable name would be written through), then renamed over
// `path`, so a reader sees the old text or the new, never part of it.
Result<void> replace_file(const std::string& path, std::string_view text, mode_t mode,
                          const std::string& temp_dir = {});

// Writes all of `data`, however many write(2) calls it takes.
Result<void> write_all(int fd, std::string_view data);
// What is left to read, up to the end of the file (or until the writer closes a pipe).
Result<std::string> read_to_end(int fd);
// The same handed to `use` a buffer at a time, for what need not be held in memory whole (a log
// copied out); the first error of `use` ends the reading and is returned.
Result<void> read_each_chunk(int fd, const std::function<Result<void>(std::string_view)>& use);
// Up to `bytes` bytes from `offset`, fewer at the end of the file.
Result<std::string> read_at(int fd, size_t bytes, off_t offset);
// One read(2) of what is there now, up to `size` bytes (again if a signal interrupts it): 0 is
// the end of the file, or a pipe whose writers have all closed it.
Result<size_t> read_some(int fd, char* buffer, size_t size);

// Sets aside `bytes` of disk for the file without changing its size, so that appends up to that
// much succeed on a file system that fills meanwhile. Where the file system cannot (EOPNOTSUPP),
// an error the caller may ignore.
Result<void> preallocate(int fd, uint64_t bytes);

// Bytes an unprivileged writer may still use on the file system that holds the file or
// directory (statvfs's f_bavail: root's reserved blocks left out).
Result<uint64_t> free_bytes(int fd);
Result<uint64_t> free_bytes(const std::string& path);

// true: created; false: something of that name exists already (maybe not a directory).
Result<bool> make_directory(const std::string& path, mode_t mode);
// make_directory for each missing component of an absolute path.
Result<void> make_directories(const std::string& path, mode_t mode);
// Makes `path` a directory of this process's effective user with exactly `mode` (made when
// missing; the mode set whatever the umask). An error when what has that name is not a
// directory (a link is not followed) or is another user's.
Result<void> ensure_own_directory(const std::string& path, mode_t mode);

Result<void> change_mode(const std::string& path, mode_t mode);
Result<void> change_mode(int fd, mode_t mode);
Result<void> change_owner(int fd, uid_t owner, gid_t group);
Result<void> rename_file(const std::string& from, const std::string& to);
Result<void> remove_file(const std::string& path);

// The names in a directory, in the order the file system gives them, without "." and "..".
Result<std::vector<std::string>> directory_entries(const std::string& path);

Result<std::string> current_directory();
// The absolute path with every symbolic link, "." and ".." resolved.
Result<std::string> resolve_path(const std::string& path);

}  // namespace gpupool
