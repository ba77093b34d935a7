#include "os/accounts.h"

#include <grp.h>
#include <pwd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace gpupool {

std::string user_name(unsigned uid) {
  std::vector<char> buffer(16384);
  passwd entry{};
  passwd* found = nullptr;
  if (getpwuid_r(uid, &entry, buffer.data(), buffer.size(), &found) == 0 && found != nullptr) {
    return found->pw_name;
  }
  return std::to_string(uid);
}

Result<gid_t> group_id(const std::string& name) {
  group entry{};
  group* found = nullptr;
  std::vector<char> buffer(16384);
  for (;;) {
    int error = getgrnam_r(name.c_str(), &entry, buffer.data(), buffer.size(), &found);
    if (error == ERANGE && buffer.size() < (1u << 24)) {
      buffer.resize(buffer.size() * 4);  // a group with many members
      continue;
    }
    if (error != 0) return fail("cannot look up group '{}': {}", name, std::strerror(error));
    if (found == nullptr) return fail("group '{}' does not exist", name);
    return found->gr_gid;
  }
}

std::vector<gid_t> database_groups(const std::string& user, gid_t gid) {
  std::vector<gid_t> groups(64);
  int count = static_cast<int>(groups.size());
  if (getgrouplist(user.c_str(), gid, groups.data(), &count) < 0) {
    groups.resize(static_cast<size_t>(std::max(count, 0)));  // count now says how many there are
    count = static_cast<int>(groups.size());
    if (getgrouplist(user.c_str(), gid, groups.data(), &count) < 0) count = 0;
  }
  groups.resize(static_cast<size_t>(std::max(count, 0)));
  if (groups.empty()) groups.push_back(gid);
  return groups;
}

}  // namespace gpupool
