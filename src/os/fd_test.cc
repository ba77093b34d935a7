#include "os/fd.h"

#include <fcntl.h>
#include <unistd.h>

#include <gtest/gtest.h>

namespace gpupool {
namespace {

bool is_open(int fd) { return fcntl(fd, F_GETFD) != -1; }

int open_null() { return ::open("/dev/null", O_RDONLY | O_CLOEXEC); }

TEST(Fd, ClosesWhenItsOwnerGoes) {
  int raw = open_null();
  ASSERT_GE(raw, 0);
  { Fd fd(raw); EXPECT_TRUE(fd.valid()); EXPECT_EQ(fd.get(), raw); }
  EXPECT_FALSE(is_open(raw));
}

TEST(Fd, MovesOwnershipAndClosesOnceOnly) {
  int raw = open_null();
  Fd first(raw);
  Fd second(std::move(first));
  EXPECT_FALSE(first.valid());  // NOLINT: moved-from state is part of the contract
  EXPECT_EQ(second.get(), raw);
  Fd third;
  third = std::move(second);
  EXPECT_EQ(third.get(), raw);
  third.reset();
  EXPECT_FALSE(is_open(raw));
}

TEST(Fd, AssigningClosesTheDescriptorHeldBefore) {
  int a = open_null();
  int b = open_null();
  Fd held(a);
  held = Fd(b);
  EXPECT_FALSE(is_open(a));
  EXPECT_TRUE(is_open(b));
}

TEST(Fd, ReleaseHandsTheDescriptorBackUnclosed) {
  int raw = open_null();
  int released = Fd(raw).release();
  EXPECT_EQ(released, raw);
  EXPECT_TRUE(is_open(raw));
  ::close(raw);
}

TEST(Fd, DuplicatesCloseOnExecAboveTheStandardStreams) {
  Fd original(open_null());
  auto copy = duplicate(original.get());
  ASSERT_TRUE(copy.ok()) << copy.error().message;
  EXPECT_GE(copy->get(), 3);
  EXPECT_NE(copy->get(), original.get());
  EXPECT_EQ(fcntl(copy->get(), F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
}

TEST(Fd, ClearsAndSetsCloseOnExec) {
  Fd fd(open_null());
  ASSERT_TRUE(set_inherited_by_exec(fd.get(), true).ok());
  EXPECT_EQ(fcntl(fd.get(), F_GETFD) & FD_CLOEXEC, 0);
  ASSERT_TRUE(set_inherited_by_exec(fd.get(), false).ok());
  EXPECT_EQ(fcntl(fd.get(), F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
  EXPECT_FALSE(set_inherited_by_exec(-1, true).ok());
}

TEST(Fd, WaitsUntilADescriptorIsReadyOrTimeUp) {
  int ends[2];
  ASSERT_EQ(pipe2(ends, O_CLOEXEC), 0);
  Fd read_end(ends[0]);
  Fd write_end(ends[1]);
  auto none = wait_until_ready({read_end.get()}, std::chrono::milliseconds(10));
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, std::vector<bool>{false});
  ASSERT_EQ(write(write_end.get(), "x", 1), 1);
  auto one = wait_until_ready({write_end.get(), read_end.get()}, std::nullopt);
  ASSERT_TRUE(one.ok());
  EXPECT_EQ((*one)[1], true);
  write_end.reset();  // a hang-up is ready too
  EXPECT_TRUE((*wait_until_ready({read_end.get()}, std::chrono::milliseconds(0)))[0]);
}

TEST(Fd, PipesCarryBytesFromTheWriteEndToTheReadEndCloseOnExec) {
  auto pipe = make_pipe();
  ASSERT_TRUE(pipe.ok()) << pipe.error().message;
  auto& [read_end, write_end] = *pipe;
  EXPECT_NE(fcntl(read_end.get(), F_GETFD) & FD_CLOEXEC, 0);
  EXPECT_NE(fcntl(write_end.get(), F_GETFD) & FD_CLOEXEC, 0);
  ASSERT_EQ(write(write_end.get(), "x", 1), 1);
  char got = 0;
  ASSERT_EQ(read(read_end.get(), &got, 1), 1);
  EXPECT_EQ(got, 'x');
}

TEST(Fd, ClosesDescriptorsHeldAsNumbers) {
  int first = open_null(), second = open_null();
  close_descriptors({first, second});
  EXPECT_FALSE(is_open(first));
  EXPECT_FALSE(is_open(second));
}

TEST(Fd, FixedSizeMessagesGoInOneCallAndComeWholeOrNotAtAll) {
  auto pipe = make_pipe();
  ASSERT_TRUE(pipe.ok()) << pipe.error().message;
  auto& [read_end, write_end] = *pipe;
  const int sent[2] = {7, -1};
  ASSERT_TRUE(write_in_one_call(write_end.get(), sent, sizeof sent));
  int got[2] = {};
  ASSERT_TRUE(read_in_one_call(read_end.get(), got, sizeof got));
  EXPECT_EQ(got[0], 7);
  EXPECT_EQ(got[1], -1);
  ASSERT_TRUE(write_in_one_call(write_end.get(), "x", 1));
  write_end.reset();
  EXPECT_FALSE(read_in_one_call(read_end.get(), got, sizeof got));  // one byte, then the end
  EXPECT_FALSE(read_in_one_call(read_end.get(), got, sizeof got));
  EXPECT_FALSE(write_in_one_call(-1, "x", 1));
}

}  // namespace
}  // namespace gpupool
