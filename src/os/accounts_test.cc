#include "os/accounts.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>

namespace gpupool {
namespace {

TEST(Accounts, GroupZeroIsFoundByName) {
  // Every Linux system names gid 0; Debian calls it "root".
  auto root = group_id("root");
  ASSERT_TRUE(root.ok()) << root.error().message;
  EXPECT_EQ(*root, 0u);
}

TEST(Accounts, AMissingGroupIsOneClearLine) {
  auto missing = group_id("gpupool-no-such-group");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().message, "group 'gpupool-no-such-group' does not exist");
}

TEST(Accounts, TheDatabaseListsThePrimaryGroup) {
  std::vector<gid_t> groups = database_groups("root", 0);
  EXPECT_NE(std::find(groups.begin(), groups.end(), 0u), groups.end());
  // A user the database does not know still has the primary group it was given.
  groups = database_groups("gpupool-no-such-user", 4242);
  EXPECT_NE(std::find(groups.begin(), groups.end(), 4242u), groups.end());
}

}  // namespace
}  // namespace gpupool
