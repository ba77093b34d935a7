#include "os/unix_socket.h"

#include <fcntl.h>
#include <grp.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

namespace gpupool {
namespace {

struct SocketPair {
  SocketPair() { EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0); }
  ~SocketPair() {
    for (int fd : fds) {
      if (fd >= 0) ::close(fd);
    }
  }
  int fds[2] = {-1, -1};
};

TEST(UnixSocket, LinesArriveOneAtATimeWhateverTheChunking) {
  SocketPair pair;
  ASSERT_TRUE(send_line(pair.fds[0], "first").ok());
  ASSERT_TRUE(send_line(pair.fds[0], "second").ok());
  ::close(pair.fds[0]);
  pair.fds[0] = -1;
  LineReader reader(pair.fds[1], 1024);
  auto first = reader.read_line();
  ASSERT_TRUE(first.ok() && first->has_value());
  EXPECT_EQ((*first)->line, "first");
  auto second = reader.read_line();
  ASSERT_TRUE(second.ok() && second->has_value());
  EXPECT_EQ((*second)->line, "second");
  auto end = reader.read_line();
  ASSERT_TRUE(end.ok());
  EXPECT_FALSE(end->has_value());
}

// The daemon's "queued" and then its "granted" with the leases, read by a client that was
// stopped meanwhile: one read brings both lines, and the leases must go with the second.
TEST(UnixSocket, DescriptorsArrivingWithLaterLinesStayWithThem) {
  SocketPair pair;
  int pipe_fds[2];
  ASSERT_EQ(pipe2(pipe_fds, O_CLOEXEC), 0);
  ASSERT_TRUE(send_line(pair.fds[0], "queued").ok());
  ASSERT_TRUE(send_line(pair.fds[0], "granted", {pipe_fds[0], pipe_fds[1]}).ok());
  ASSERT_TRUE(send_line(pair.fds[0], "after").ok());
  ::close(pipe_fds[0]);
  ::close(pipe_fds[1]);
  LineReader reader(pair.fds[1], 1024);
  std::vector<std::pair<std::string, size_t>> lines;
  for (int i = 0; i < 3; ++i) {
    auto received = reader.read_line();
    ASSERT_TRUE(received.ok() && received->has_value());
    lines.emplace_back((*received)->line, (*received)->descriptors.size());
  }
  EXPECT_EQ(lines, (std::vector<std::pair<std::string, size_t>>{{"queued", 0}, {"granted", 2}, {"after", 0}}));
}

TEST(UnixSocket, DescriptorsTravelWithTheirLine) {
  SocketPair pair;
  int pipe_fds[2];
  ASSERT_EQ(pipe2(pipe_fds, O_CLOEXEC), 0);
  ASSERT_TRUE(send_line(pair.fds[0], "with a descriptor", {pipe_fds[1]}).ok());
  ::close(pipe_fds[1]);
  LineReader reader(pair.fds[1], 1024);
  auto received = reader.read_line();
  ASSERT_TRUE(received.ok() && received->has_value());
  ASSERT_EQ((*received)->descriptors.size(), 1u);
  int fd = (*received)->descriptors[0].get();
  EXPECT_NE(fcntl(fd, F_GETFD) & FD_CLOEXEC, 0);  // received close-on-exec
  ASSERT_EQ(write(fd, "x", 1), 1);  // the same pipe: what we write arrives at the other end
  char c = 0;
  ASSERT_EQ(read(pipe_fds[0], &c, 1), 1);
  EXPECT_EQ(c, 'x');
  ::close(pipe_fds[0]);
}

TEST(UnixSocket, APairCarriesDataWithDescriptorsOnItsFirstByte) {
  auto pair = socket_pair();
  ASSERT_TRUE(pair.ok()) << pair.error().message;
  auto& [ours, theirs] = *pair;
  EXPECT_NE(fcntl(ours.get(), F_GETFD) & FD_CLOEXEC, 0);
  EXPECT_NE(fcntl(theirs.get(), F_GETFD) & FD_CLOEXEC, 0);
  int pipe_fds[2];
  ASSERT_EQ(pipe2(pipe_fds, O_CLOEXEC), 0);
  ASSERT_TRUE(send_with_descriptors(ours.get(), "first and the rest", {pipe_fds[1], pipe_fds[1]}).ok());
  ::close(pipe_fds[1]);
  ::close(pipe_fds[0]);
  ours.reset();
  auto received = receive_byte_with_descriptors(theirs.get(), 2);
  ASSERT_TRUE(received.ok()) << received.error().message;
  EXPECT_EQ(received->byte, 'f');
  ASSERT_EQ(received->descriptors.size(), 2u);
  EXPECT_NE(fcntl(received->descriptors[0].get(), F_GETFD) & FD_CLOEXEC, 0);
  char rest[64] = {};
  EXPECT_EQ(read(theirs.get(), rest, sizeof rest), 17);
  EXPECT_STREQ(rest, "irst and the rest");
  EXPECT_FALSE(receive_byte_with_descriptors(theirs.get(), 2).ok());  // closed
}

TEST(UnixSocket, MoreDescriptorsThanExpectedAreAnError) {
  auto pair = socket_pair();
  ASSERT_TRUE(pair.ok()) << pair.error().message;
  int pipe_fds[2];
  ASSERT_EQ(pipe2(pipe_fds, O_CLOEXEC), 0);
  ASSERT_TRUE(send_with_descriptors(pair->first.get(), "x", {pipe_fds[0], pipe_fds[1], pipe_fds[0]}).ok());
  ::close(pipe_fds[0]);
  ::close(pipe_fds[1]);
  auto received = receive_byte_with_descriptors(pair->second.get(), 1);
  ASSERT_FALSE(received.ok());
  EXPECT_EQ(received.error().message, "more than 1 descriptors came");
  EXPECT_FALSE(send_with_descriptors(pair->first.get(), "x", std::vector<int>(254, 0)).ok());
}

TEST(UnixSocket, OverlongLineIsAnError) {
  SocketPair pair;
  ASSERT_TRUE(send_line(pair.fds[0], std::string(5000, 'a')).ok());
  LineReader reader(pair.fds[1], 1000);
  auto received = reader.read_line();
  ASSERT_FALSE(received.ok());
  EXPECT_NE(received.error().message.find("longer than 1000 bytes"), std::string::npos);
}

TEST(UnixSocket, ConnectionClosedMidLineIsAnError) {
  SocketPair pair;
  ASSERT_EQ(write(pair.fds[0], "partial", 7), 7);
  ::close(pair.fds[0]);
  pair.fds[0] = -1;
  LineReader reader(pair.fds[1], 1000);
  EXPECT_FALSE(reader.read_line().ok());
}

TEST(UnixSocket, PeerCredentialsAreOurs) {
  SocketPair pair;
  auto peer = peer_credentials(pair.fds[1]);
  ASSERT_TRUE(peer.ok());
  EXPECT_EQ(peer->pid, getpid());
  EXPECT_EQ(peer->uid, getuid());
}

TEST(UnixSocket, PeerGroupsAreThoseTheClientHadWhenItConnected) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root, to change a process's groups";
  std::string path = (std::filesystem::temp_directory_path() /
                      ("gpupool-peer-groups-" + std::to_string(getpid()) + ".sock")).string();
  int listener = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(listener, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::snprintf(address.sun_path, sizeof(address.sun_path), "%s", path.c_str());
  ASSERT_EQ(bind(listener, reinterpret_cast<const sockaddr*>(&address), sizeof(address)), 0);
  ASSERT_EQ(listen(listener, 1), 0);
  pid_t child = fork();
  if (child == 0) {
    // Connects in group 4242, then moves to 4343 before the connection is even accepted.
    gid_t before = 4242, after = 4343;
    if (setgroups(1, &before) != 0) _exit(1);
    auto connection = connect_unix_socket(path);
    if (!connection || setgroups(1, &after) != 0) _exit(1);
    _exit(write(*connection, "x", 1) == 1 ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_EQ(status, 0) << "the child could not connect";
  int accepted = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
  ASSERT_GE(accepted, 0);
  auto peer = peer_credentials(accepted);
  ::close(accepted);
  ::close(listener);
  std::filesystem::remove(path);
  ASSERT_TRUE(peer.ok()) << peer.error().message;
  ASSERT_TRUE(peer->groups.has_value()) << "SO_PEERGROUPS needs Linux 4.13";
  EXPECT_EQ(*peer->groups, std::vector<gid_t>{4242});
}

TEST(UnixSocket, ConnectingWhereNobodyListensSaysWhere) {
  auto fd = connect_unix_socket("/nonexistent/gpupoold.sock");
  ASSERT_FALSE(fd.ok());
  EXPECT_NE(fd.error().message.find("/nonexistent/gpupoold.sock"), std::string::npos);
}

}  // namespace
}  // namespace gpupool
