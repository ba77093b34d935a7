#include "os/files.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>

#include <fmt/format.h>

namespace gpupool {
namespace {

Error system_error(std::string_view what, const std::string& path, int error = errno) {
  return fail("cannot {} {}: {}", what, path, std::strerror(error));
}

FileStatus status_of(const struct stat& st) {
  FileType type = S_ISREG(st.st_mode)    ? FileType::regular
                  : S_ISDIR(st.st_mode)  ? FileType::directory
                  : S_ISLNK(st.st_mode)  ? FileType::symbolic_link
                  : S_ISSOCK(st.st_mode) ? FileType::socket
                                         : FileType::other;
  return FileStatus{type, static_cast<unsigned>(st.st_mode & 07777), st.st_uid, static_cast<uint64_t>(st.st_nlink),
                    static_cast<uint64_t>(st.st_size)};
}

}  // namespace

Result<FileStatus> file_status(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return system_error("inspect", path);
  return status_of(st);
}

Result<FileStatus> link_status(const std::string& path) {
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) return system_error("inspect", path);
  return status_of(st);
}

Result<std::optional<FileStatus>> link_status_if_any(const std::string& path) {
  struct stat st {};
  if (lstat(path.c_str(), &st) == 0) return std::optional(status_of(st));
  if (errno == ENOENT) return std::optional<FileStatus>();
  return system_error("inspect", path);
}

Result<FileIdentity> file_identity(const std::string& path) {
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) return system_error("inspect", path);
  return FileIdentity{static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)};
}

Result<FileStatus> file_status(int fd) {
  struct stat st {};
  if (fstat(fd, &st) != 0) return system_error("inspect", fmt::format("descriptor {}", fd));
  return status_of(st);
}

Result<Fd> open_file(const std::string& path, int flags, mode_t mode) {
  int fd = ::open(path.c_str(), flags | O_CLOEXEC, mode);
  if (fd < 0) return system_error("open", path);
  return Fd(fd);
}

Result<std::optional<Fd>> open_existing(const std::string& path, int flags) {
  int fd = ::open(path.c_str(), flags | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT) return std::optional<Fd>();
  if (fd < 0) return system_error("open", path);
  return std::optional<Fd>(Fd(fd));
}

Result<std::optional<Fd>> open_regular_file(const std::string& path, int flags) {
  int fd = ::open(path.c_str(), flags | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT) return std::optional<Fd>();
  if (fd < 0 && errno != ELOOP) return system_error("open", path);
  Fd opened(fd);
  struct stat st {};
  if (!opened || fstat(opened.get(), &st) != 0 || !S_ISREG(st.st_mode)) {  // ELOOP: a symbolic link
    return fail("{} is not a regular file: not reading it", path);
  }
  return std::optional<Fd>(std::move(opened));
}

Result<std::optional<Fd>> create_file(const std::string& path, int flags, mode_t mode) {
  int fd = ::open(path.c_str(), flags | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0 && errno == EEXIST) return std::optional<Fd>();
  if (fd < 0) return system_error("create", path);
  return std::optional<Fd>(Fd(fd));
}

Result<UniqueFile> create_unique_file(const std::string& prefix, const std::string& suffix) {
  std::string path = prefix + "XXXXXX" + suffix;
  int fd = mkostemps(path.data(), static_cast<int>(suffix.size()), O_CLOEXEC);
  if (fd < 0) return system_error("create", path);
  return UniqueFile{Fd(fd), std::move(path)};
}

Result<void> replace_file(const std::string& path, std::string_view text, mode_t mode, const std::string& temp_dir) {
  std::string prefix = temp_dir.empty() ? path : temp_dir + "/" + path.substr(path.rfind('/') + 1);
  TRY_ASSIGN(UniqueFile temp, create_unique_file(prefix + ".", ".tmp"));
  Result<void> written = change_mode(temp.fd.get(), mode);
  if (written) written = write_all(temp.fd.get(), text);
  temp.fd.reset();
  if (written) written = rename_file(temp.path, path);
  if (!written) (void)remove_file(temp.path);
  return written;
}

Result<void> write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return system_error("write to", fmt::format("descriptor {}", fd));
    data.remove_prefix(static_cast<size_t>(n));
  }
  return {};
}

Result<std::string> read_to_end(int fd) {
  std::string text;
  TRY(read_each_chunk(fd, [&text](std::string_view chunk) -> Result<void> {
    text.append(chunk);
    return {};
  }));
  return text;
}

Result<void> read_each_chunk(int fd, const std::function<Result<void>(std::string_view)>& use) {
  char buffer[65536];
  for (;;) {
    ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return system_error("read from", fmt::format("descriptor {}", fd));
    if (n == 0) return {};
    TRY(use(std::string_view(buffer, static_cast<size_t>(n))));
  }
}

Result<std::string> read_at(int fd, size_t bytes, off_t offset) {
  std::string buffer(bytes, '\0');
  ssize_t got = pread(fd, buffer.data(), buffer.size(), offset);
  if (got < 0) return system_error("read from", fmt::format("descriptor {}", fd));
  buffer.resize(static_cast<size_t>(got));
  return buffer;
}

Result<size_t> read_some(int fd, char* buffer, size_t size) {
  for (;;) {
    ssize_t n = ::read(fd, buffer, size);
    if (n >= 0) return static_cast<size_t>(n);
    if (errno != EINTR) return system_error("read from", fmt::format("descriptor {}", fd));
  }
}

Result<void> preallocate(int fd, uint64_t bytes) {
  if (fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, static_cast<off_t>(bytes)) != 0) {
    return system_error("set aside space for", fmt::format("descriptor {}", fd));
  }
  return {};
}

Result<uint64_t> free_bytes(int fd) {
  struct statvfs fs {};
  if (fstatvfs(fd, &fs) != 0) return system_error("measure the file system of", fmt::format("descriptor {}", fd));
  return static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize;
}

Result<uint64_t> free_bytes(const std::string& path) {
  struct statvfs fs {};
  if (statvfs(path.c_str(), &fs) != 0) return system_error("measure the file system of", path);
  return static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize;
}

Result<bool> make_directory(const std::string& path, mode_t mode) {
  if (mkdir(path.c_str(), mode) == 0) return true;
  if (errno == EEXIST) return false;
  return system_error("create", path);
}

Result<void> make_directories(const std::string& path, mode_t mode) {
  for (size_t slash = path.find('/', 1);; slash = path.find('/', slash + 1)) {
    TRY(make_directory(path.substr(0, slash), mode));
    if (slash == std::string::npos) return {};
  }
}

Result<void> ensure_own_directory(const std::string& path, mode_t mode) {
  TRY(make_directory(path, mode));
  TRY_ASSIGN(FileStatus status, link_status(path));
  if (status.type != FileType::directory) return fail("{} is not a directory", path);
  if (status.owner != geteuid()) return fail("{} belongs to uid {}, not to this process's user", path, status.owner);
  return change_mode(path, mode);
}

Result<void> change_mode(const std::string& path, mode_t mode) {
  if (chmod(path.c_str(), mode) != 0) return system_error("change the mode of", path);
  return {};
}

Result<void> change_mode(int fd, mode_t mode) {
  if (fchmod(fd, mode) != 0) return system_error("change the mode of", fmt::format("descriptor {}", fd));
  return {};
}

Result<void> change_owner(int fd, uid_t owner, gid_t group) {
  if (fchown(fd, owner, group) != 0) return system_error("change the owner of", fmt::format("descriptor {}", fd));
  return {};
}

Result<void> rename_file(const std::string& from, const std::string& to) {
  if (rename(from.c_str(), to.c_str()) != 0) return system_error("rename", fmt::format("{} to {}", from, to));
  return {};
}

Result<void> remove_file(const std::string& path) {
  if (unlink(path.c_str()) != 0) return system_error("remove", path);
  return {};
}

Result<std::vector<std::string>> directory_entries(const std::string& path) {
  std::unique_ptr<DIR, int (*)(DIR*)> dir(opendir(path.c_str()), closedir);
  if (dir == nullptr) return system_error("read", path);
  std::vector<std::string> names;
  while (dirent* entry = readdir(dir.get())) {
    std::string_view name = entry->d_name;
    if (name != "." && name != "..") names.emplace_back(name);
  }
  return names;
}

Result<std::string> current_directory() {
  std::unique_ptr<char, void (*)(void*)> cwd(getcwd(nullptr, 0), std::free);
  if (cwd == nullptr) return fail("cannot find the current directory: {}", std::strerror(errno));
  return std::string(cwd.get());
}

Result<std::string> resolve_path(const std::string& path) {
  std::unique_ptr<char, void (*)(void*)> real(realpath(path.c_str(), nullptr), std::free);
  if (real == nullptr) return system_error("resolve", path);
  return std::string(real.get());
}

}  // namespace gpupool
