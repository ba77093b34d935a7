#include "os/shared_library.h"

#include <gtest/gtest.h>

namespace gpupool {
namespace {

TEST(SharedLibrary, FindsWhatALibraryExports) {
  auto libc = SharedLibrary::load("libc.so.6");
  ASSERT_TRUE(libc.ok()) << libc.error().message;
  EXPECT_NE(libc->symbol("strlen"), nullptr);
  EXPECT_EQ(libc->symbol("gpupool_no_such_symbol"), nullptr);
}

TEST(SharedLibrary, TheErrorIsTheLoadersOwnLine) {
  auto missing = SharedLibrary::load("libgpupool-no-such-library.so.1");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("libgpupool-no-such-library.so.1: cannot open shared object file"),
            std::string::npos);
}

}  // namespace
}  // namespace gpupool
