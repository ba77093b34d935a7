#include "lease/lease_directory.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <limits>
#include <functional>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "os/accounts.h"
#include "os/file_lock.h"
#include "os/files.h"
#include "os/paths.h"
#include "os/process.h"

namespace gpupool {
namespace {

constexpr mode_t kSharedDirMode = 01777;  // everyone creates, only owners remove (like /tmp)
constexpr mode_t kLockFileMode = 0666;    // everyone may lock; locks, not contents, matter
constexpr off_t kWholeFile = kToEndOfFile;

// Every lock overlapping [lo, hi), held through other descriptions. The kernel reports one
// conflicting lock at a time, in no particular order, so both sides of it are searched again.
void collect_locks(int fd, off_t lo, off_t hi, std::vector<ByteRange>& out) {
  if (lo >= hi) return;
  auto found = find_range_lock(fd, ByteRange{lo, hi == std::numeric_limits<off_t>::max() ? kWholeFile : hi - lo});
  if (!found || !*found) return;  // an error counts as no lock, as it always has here
  ByteRange conflict = **found;
  out.push_back(conflict);
  collect_locks(fd, lo, std::max(lo, conflict.start), out);
  collect_locks(fd, std::min(hi, conflict.end()), hi, out);
}

Result<void> ensure_shared_directory(const std::string& path) {
  TRY_ASSIGN(bool created, make_directory(path, 0700));
  if (created) TRY(change_mode(path, kSharedDirMode));
  TRY_ASSIGN(FileStatus status, link_status(path));
  if (status.type != FileType::directory) return fail("{} must be a directory, not a link or file", path);
  // The owner of a sticky directory can remove anyone's files in it: only root or we may own it.
  // Never used silently: a user who made /tmp/gpupool first would lock everyone else out.
  if (status.owner != 0 && status.owner != real_user_id()) {
    return fail("{} belongs to {} (uid {}), not root, who could remove other users' leases: not using it. Install "
                "the gpupool package (it makes /run/gpupool, root's, at boot), start gpupoold (as root it takes {} "
                "back), or have an administrator remove it",
                path, user_name(status.owner), status.owner, path);
  }
  if (status.permissions != kSharedDirMode) {
    if (status.owner != real_user_id() || !change_mode(path, kSharedDirMode)) {
      return fail("{} has mode {:o}, leases need 1777 (sticky, writable by all): an administrator should "
                  "`chmod 1777 {}`", path, status.permissions, path);
    }
  }
  return {};
}

// Whoever may rename a directory on the way to the runtime directory could swap in one of their
// own after the checks, and have root create 0666 lock files and records wherever they like. So
// every component, as given and as resolved, must be root's or ours, and a directory that others
// may write to must be sticky (like /tmp), where only an entry's owner may rename it.
Result<void> check_path_owners(const std::string& path) {
  std::string prefix;
  size_t position = 0;
  while (position != std::string::npos) {
    size_t next = path.find('/', position + 1);
    prefix = path.substr(0, next);
    position = next;
    if (prefix.empty() || prefix.ends_with('/')) continue;
    TRY_ASSIGN(FileStatus status, link_status(prefix));
    if (status.owner != 0 && status.owner != real_user_id()) {
      return fail("{} belongs to uid {}, who could put another directory in place of the lease directory {}",
                  prefix, status.owner, path);
    }
    if (status.type == FileType::directory && (status.permissions & (S_IWGRP | S_IWOTH)) != 0 &&
        (status.permissions & S_ISVTX) == 0) {
      return fail("{} (mode {:o}) may be written by others, who could put another directory in place of "
                  "the lease directory {}", prefix, status.permissions, path);
    }
  }
  return {};
}

// Checked before the runtime directory is made, so that root makes nothing in someone else's.
Result<void> check_ancestors(const std::string& path) {
  std::string absolute = path;
  if (!absolute.starts_with('/')) {
    TRY_ASSIGN(std::string cwd, current_directory());
    absolute = fmt::format("{}/{}", cwd, path);
  }
  while (absolute.size() > 1 && absolute.ends_with('/')) absolute.pop_back();
  std::string parent = absolute.substr(0, std::max<size_t>(absolute.rfind('/'), 1));
  TRY(check_path_owners(parent));
  TRY_ASSIGN(std::string resolved, resolve_path(parent));
  return check_path_owners(resolved);
}

nlohmann::json record_json(const LeaseClaim& claim, const LeaseHolder& holder,
                           const std::vector<ByteRange>& ranges) {
  nlohmann::json spans = nlohmann::json::array();
  for (const ByteRange& r : ranges) spans.push_back({r.start, r.length});
  return {{"uuid", claim.uuid},
          {"index", claim.index},
          {"pid", holder.pid},
          // Who holds it comes from our uid, never from $USER, which anyone can set; only root
          // may name another user (gpupoold, which knows its jobs' owners from their sockets).
          {"user", real_user_id() == 0 && !holder.user.empty() ? holder.user : user_name(real_user_id())},
          {"job", holder.job},
          {"since", holder.since},
          {"slice_mib", claim.slice_mib ? nlohmann::json(*claim.slice_mib) : nullptr},
          {"ranges", spans}};
}

Result<void> write_record(const std::string& path, const std::string& text) {
  if (auto written = replace_file(path, text, 0644); !written) {
    return fail("cannot write lease record {}: {}", path, written.error().message);
  }
  return {};
}

// A record's text, read without following a link or waiting on a FIFO, and only from a small
// regular file: anyone may put anything in holders/, and root reads it too.
struct RecordFile {
  std::string text;
  uid_t owner = 0;
};

std::optional<RecordFile> read_record(const std::string& path) {
  constexpr uint64_t kMaxRecordBytes = 64 * 1024;
  auto fd = open_file(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
  if (!fd) return std::nullopt;
  auto status = file_status(fd->get());
  if (!status || status->type != FileType::regular || status->size > kMaxRecordBytes) return std::nullopt;
  auto text = read_at(fd->get(), static_cast<size_t>(status->size), 0);
  if (!text) return std::nullopt;
  return RecordFile{std::move(*text), status->owner};
}

// A holder record and the first byte it claims; nullopt for anything malformed.
std::optional<std::pair<LeaseRecord, int64_t>> parse_record(const nlohmann::json& r) {
  auto is_string = [&](const char* key) { return r.contains(key) && r[key].is_string(); };
  auto is_integer = [&](const char* key) { return r.contains(key) && r[key].is_number_integer(); };
  if (!r.is_object() || !is_string("uuid") || !is_string("user") || !is_string("job") ||
      !is_integer("index") || !is_integer("pid") || !is_integer("since") || !r.contains("slice_mib") ||
      !r.contains("ranges") || !r["ranges"].is_array() || r["ranges"].empty() ||
      !r["ranges"][0].is_array() || r["ranges"][0].empty() || !r["ranges"][0][0].is_number_integer()) {
    return std::nullopt;
  }
  LeaseRecord lease;
  lease.uuid = r["uuid"].get<std::string>();
  lease.index = r["index"].get<unsigned>();
  lease.holder.pid = r["pid"].get<pid_t>();
  lease.holder.user = r["user"].get<std::string>();
  lease.holder.job = r["job"].get<std::string>();
  lease.holder.since = r["since"].get<int64_t>();
  if (r["slice_mib"].is_number_unsigned()) lease.slice_mib = r["slice_mib"].get<uint64_t>();
  return std::make_pair(lease, r["ranges"][0][0].get<int64_t>());
}

}  // namespace

HeldLeases::HeldLeases(HeldLeases&& other) noexcept
    : fds_(std::move(other.fds_)),
      record_paths_(std::move(other.record_paths_)),
      record_texts_(std::move(other.record_texts_)) {
  other.fds_.clear();
  other.record_paths_.clear();
}

HeldLeases& HeldLeases::operator=(HeldLeases&& other) noexcept {
  if (this != &other) {
    release();
    fds_ = std::move(other.fds_);
    record_paths_ = std::move(other.record_paths_);
    record_texts_ = std::move(other.record_texts_);
    other.fds_.clear();
    other.record_paths_.clear();
  }
  return *this;
}

HeldLeases::~HeldLeases() { release(); }

void HeldLeases::release() {
  // Records first: a record without its lock is stale, a lock without its record is anonymous.
  for (const auto& path : record_paths_) (void)remove_file(path);
  record_paths_.clear();
  record_texts_.clear();
  fds_.clear();
}

void HeldLeases::hand_over() {
  record_paths_.clear();
  record_texts_.clear();
  release();
}

HeldLeases HeldLeases::from_descriptors(std::vector<Fd> fds) {
  HeldLeases held;
  held.fds_ = std::move(fds);
  return held;
}

std::vector<int> HeldLeases::descriptors() const {
  std::vector<int> fds;
  for (const Fd& fd : fds_) fds.push_back(fd.get());
  return fds;
}

Result<void> HeldLeases::make_inheritable() const {
  for (const Fd& fd : fds_) {
    if (auto inherited = set_inherited_by_exec(fd.get(), true); !inherited) {
      return fail("cannot pass a lease to the job: {}", inherited.error().message);
    }
  }
  return {};
}

void HeldLeases::set_holder_pid(pid_t pid) {
  for (size_t i = 0; i < record_paths_.size(); ++i) {
    auto record = nlohmann::json::parse(record_texts_[i], nullptr, false);
    if (record.is_discarded()) continue;
    record["pid"] = pid;
    record_texts_[i] = record.dump();
    (void)write_record(record_paths_[i], record_texts_[i]);
  }
}

std::string LeaseDirectory::default_path() { return default_runtime_dir(); }

Result<void> LeaseDirectory::prepare_slurm_job_directory() { return gpupool::prepare_slurm_job_directory(); }

Result<LeaseDirectory> LeaseDirectory::open_default() {
  std::string path = default_path();
  // The job's own runtime directory lives in its private directory, made on first use.
  if (auto job = slurm_job_directory(); job && path == *job + "/run") TRY(prepare_slurm_job_directory());
  return LeaseDirectory::open(path);
}

Result<LeaseDirectory> LeaseDirectory::open(const std::string& path) {
  TRY(check_ancestors(path));
  TRY(ensure_shared_directory(path));
  TRY(ensure_shared_directory(path + "/locks"));
  TRY(ensure_shared_directory(path + "/holders"));
  TRY(ensure_shared_directory(path + "/queue"));
  TRY_ASSIGN(FileIdentity locks, file_identity(path + "/locks"));
  return LeaseDirectory(path, locks);
}

bool LeaseDirectory::in_place() const {
  auto locks = file_identity(path_ + "/locks");
  return locks && *locks == locks_;
}

Result<void> LeaseDirectory::remake() {
  TRY_ASSIGN(LeaseDirectory again, LeaseDirectory::open(path_));
  locks_ = again.locks_;
  return {};
}

std::string LeaseDirectory::lock_path(const std::string& uuid) const {
  return fmt::format("{}/locks/{}.lock", path_, uuid);
}

namespace {

// Whether a UUID can name a lock file in the directory: no path of its own, nothing hidden.
bool names_a_lock_file(const std::string& uuid) {
  return !uuid.empty() && uuid.find('/') == std::string::npos && uuid.front() != '.';
}

}  // namespace

Result<Fd> LeaseDirectory::open_lock(const std::string& uuid) const {
  if (!names_a_lock_file(uuid)) return fail("invalid GPU UUID '{}' for a lease", uuid);
  std::string path = lock_path(uuid);
  // A lock file is a regular file with one name. Anything else there was planted: a link to a
  // file only root may write, a FIFO, a hard link to someone's file (which root would make 0666).
  // Root (gpupoold) removes it and makes a new one; anyone else refuses it.
  constexpr int kFlags = O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC;
  for (int attempt = 0; attempt < 3; ++attempt) {
    // O_CREAT only for a file that is not there: in a sticky directory the kernel may refuse
    // O_CREAT on another user's file, even to root (fs.protected_regular).
    auto existing = open_existing(path, kFlags);
    if (existing && !*existing) {
      existing = create_file(path, kFlags, kLockFileMode);
      if (existing && !*existing) continue;  // made by someone else meanwhile
    }
    std::string planted;
    FileStatus status;
    if (!existing) {
      // O_NOFOLLOW refuses a link; anything else that keeps the file from opening is an error.
      auto link = link_status(path);
      if (!link || link->type != FileType::symbolic_link) {
        return fail("unusable lock file: {}", existing.error().message);
      }
      planted = "a symbolic link";
    } else {
      TRY_ASSIGN(status, file_status((*existing)->get()));
      planted = status.type != FileType::regular ? "not a regular file"
                : status.links != 1              ? fmt::format("a file with {} names", status.links)
                                                 : "";
    }
    if (planted.empty()) {
      Fd fd = std::move(**existing);
      // Root takes over a lock file someone else created: its owner could otherwise remove it
      // (and a second lease would go to a new file while the first holds the old one), or
      // narrow its mode to lock everyone else out.
      if (real_user_id() == 0 && status.owner != 0 && change_owner(fd.get(), 0, 0)) status.owner = 0;
      // The umask may have narrowed the mode of a file we created; others must be able to lock it.
      if (status.owner == real_user_id() && status.permissions != kLockFileMode) {
        (void)change_mode(fd.get(), kLockFileMode);
      }
      return fd;
    }
    if (real_user_id() != 0 || !remove_file(path)) {
      return fail("lock file {} is {}, not a lock file: its owner or an administrator should remove it",
                  path, planted);
    }
  }
  return fail("lock file {} was replaced again while gpupool made it anew", path);
}

Result<std::optional<HeldLeases>> LeaseDirectory::try_acquire(const std::vector<LeaseClaim>& claims,
                                                             const LeaseHolder& holder) const {
  return lock_claims(claims, holder, [this](const LeaseClaim& claim) { return open_lock(claim.uuid); });
}

Result<std::optional<HeldLeases>> LeaseDirectory::lock_claims(
    const std::vector<LeaseClaim>& claims, const LeaseHolder& holder,
    const std::function<Result<Fd>(const LeaseClaim&)>& description_for) const {
  HeldLeases held;
  // A fixed order (by UUID) so that two acquirers never each hold what the other waits for.
  std::vector<const LeaseClaim*> ordered;
  for (const auto& claim : claims) ordered.push_back(&claim);
  std::sort(ordered.begin(), ordered.end(), [](auto* a, auto* b) { return a->uuid < b->uuid; });
  std::vector<std::vector<ByteRange>> taken(ordered.size());
  for (size_t i = 0; i < ordered.size(); ++i) {
    const LeaseClaim& claim = *ordered[i];
    TRY_ASSIGN(Fd lock, description_for(claim));
    int fd = lock.get();
    held.fds_.push_back(std::move(lock));
    // Closing our descriptors unlocks only a description no one else shares: a refusal drops
    // what it took itself.
    auto refused = [&] {
      for (size_t k = 0; k <= i; ++k) {
        for (const ByteRange& range : taken[k]) unlock_range(held.fds_[k].get(), range);
      }
      return std::optional<HeldLeases>();
    };
    if (!claim.slice_mib) {
      if (!try_lock_range(fd, ByteRange{0, kWholeFile})) return refused();
      taken[i].push_back(ByteRange{0, kWholeFile});
      continue;
    }
    // A slice is any `slice_mib` free MiB below the GPU's total, in as many pieces as it takes.
    auto total = static_cast<off_t>(claim.memory_total_mib);
    std::vector<ByteRange> locked;
    collect_locks(fd, 0, std::numeric_limits<off_t>::max(), locked);
    std::sort(locked.begin(), locked.end(), [](auto& a, auto& b) { return a.start < b.start; });
    auto need = static_cast<off_t>(*claim.slice_mib);
    off_t position = 0;
    for (size_t k = 0; k <= locked.size() && need > 0 && position < total; ++k) {
      off_t gap_end = k < locked.size() ? std::min(locked[k].start, total) : total;
      if (gap_end > position) {
        off_t length = std::min(need, gap_end - position);
        if (!try_lock_range(fd, ByteRange{position, length})) return refused();
        taken[i].push_back(ByteRange{position, length});
        need -= length;
      }
      if (k < locked.size()) position = std::max(position, locked[k].end());
    }
    if (need > 0) return refused();
  }
  for (size_t i = 0; i < ordered.size(); ++i) {
    std::string path =
        fmt::format("{}/holders/{}.{}.{}", path_, ordered[i]->uuid, taken[i].front().start, own_pid());
    std::string text = record_json(*ordered[i], holder, taken[i]).dump();
    TRY(write_record(path, text));
    held.record_paths_.push_back(path);
    held.record_texts_.push_back(text);
  }
  return std::optional<HeldLeases>(std::move(held));
}

Result<std::map<std::string, Fd>> LeaseDirectory::descriptions_held_by(pid_t holder,
                                                                       const std::vector<LeaseClaim>& claims) const {
  TRY_ASSIGN(std::vector<OpenDescriptor> open, open_descriptors_of(holder));
  std::map<std::string, Fd> found;
  for (const LeaseClaim& claim : claims) {
    std::string path = lock_path(claim.uuid);
    auto it = std::find_if(open.begin(), open.end(), [&](const OpenDescriptor& d) { return d.target == path; });
    if (it == open.end()) return fail("process {} holds no lease of GPU {}", holder, claim.index);
    TRY_ASSIGN(Fd copy, copy_descriptor_of(holder, it->fd));
    found.emplace(claim.uuid, std::move(copy));
  }
  return found;
}

Result<void> LeaseDirectory::let_go(pid_t holder, const std::vector<LeaseClaim>& claims) const {
  TRY_ASSIGN(auto descriptions, descriptions_held_by(holder, claims));
  // Its records go stale with the locks: list() drops them.
  for (auto& [uuid, fd] : descriptions) unlock_range(fd.get(), ByteRange{0, kWholeFile});
  return {};
}

Result<bool> LeaseDirectory::take_again(pid_t holder, const std::vector<LeaseClaim>& claims,
                                        const LeaseHolder& record) const {
  TRY_ASSIGN(auto descriptions, descriptions_held_by(holder, claims));
  TRY_ASSIGN(auto held, lock_claims(claims, record, [&](const LeaseClaim& claim) -> Result<Fd> {
               return std::move(descriptions.at(claim.uuid));
             }));
  if (!held) return false;
  held->hand_over();  // the holder's copies keep the locks; the records name it
  return true;
}

Result<GpuHold> LeaseDirectory::hold(const std::string& uuid, uint64_t memory_total_mib) const {
  // Without a lock file nobody holds it; and a survey should not make one for every MIG device.
  if (names_a_lock_file(uuid)) {
    TRY_ASSIGN(std::optional<FileStatus> lock_file, link_status_if_any(lock_path(uuid)));
    if (!lock_file) return GpuHold{};
  }
  TRY_ASSIGN(Fd fd, open_lock(uuid));
  std::vector<ByteRange> locked;
  collect_locks(fd.get(), 0, std::numeric_limits<off_t>::max(), locked);
  GpuHold hold;
  for (const ByteRange& r : locked) {
    if (r.length == kWholeFile || r.end() > static_cast<off_t>(memory_total_mib)) {
      hold.exclusive = true;
    } else {
      hold.shared_mib += static_cast<uint64_t>(r.length);
    }
  }
  return hold;
}

Result<std::vector<LeaseRecord>> LeaseDirectory::list() const {
  std::string dir = path_ + "/holders";
  TRY_ASSIGN(std::vector<std::string> names, directory_entries(dir));
  std::map<std::pair<std::string, int64_t>, LeaseRecord> live;  // by (uuid, first byte)
  for (const std::string& name : names) {
    if (name.front() == '.' || name.ends_with(".tmp")) continue;
    auto file = read_record(dir + "/" + name);
    if (!file) continue;
    auto record = nlohmann::json::parse(file->text, nullptr, false);
    auto parsed = parse_record(record);
    if (!parsed) continue;  // a record someone garbled says nothing about the locks
    auto& [lease, first] = *parsed;
    // Only root (gpupoold) writes records that name another user than the file's owner.
    if (file->owner != 0 && lease.holder.user != user_name(file->owner)) continue;
    // Without its lock file it is left over; and opening one would create a file named by
    // whoever wrote the record. One that cannot be inspected says nothing either way.
    auto lock_file = link_status_if_any(lock_path(lease.uuid));
    if (!lock_file) continue;
    if (!*lock_file) {
      (void)remove_file(dir + "/" + name);
      continue;
    }
    // Only the lock is the truth: a record whose first byte is not locked is left over.
    auto fd = open_lock(lease.uuid);
    if (!fd) continue;
    auto lock = find_range_lock(fd->get(), ByteRange{static_cast<off_t>(first), 1});
    bool locked = lock && lock->has_value();
    if (!locked) {
      (void)remove_file(dir + "/" + name);  // best effort: only its owner or root may
      continue;
    }
    auto key = std::make_pair(lease.uuid, first);
    auto it = live.find(key);
    if (it == live.end() || it->second.holder.since <= lease.holder.since) live[key] = lease;
  }
  std::vector<LeaseRecord> out;
  for (auto& [key, lease] : live) out.push_back(std::move(lease));
  std::sort(out.begin(), out.end(), [](const LeaseRecord& a, const LeaseRecord& b) {
    return std::tie(a.index, a.holder.since) < std::tie(b.index, b.holder.since);
  });
  return out;
}

}  // namespace gpupool
