// The system's user and group database (NSS: /etc/group, LDAP, …).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "base/result.h"

namespace gpupool {

// The login name of a uid, or the number when it has none.
std::string user_name(unsigned uid);

// The gid of a group by name; an error naming it when the group does not exist.
Result<gid_t> group_id(const std::string& name);

// The groups the database gives `user` (whose primary group is `gid`, always listed): what a
// login session of the user would have.
std::vector<gid_t> database_groups(const std::string& user, gid_t gid);

}  // namespace gpupool
