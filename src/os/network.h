// TCP sockets: a free port to offer, and the options of a listening socket.
#pragma once

#include "base/result.h"

namespace gpupool {

// A loopback TCP port nobody listens on right now (the kernel's pick; free until someone takes it).
Result<unsigned> free_loopback_tcp_port();

// SO_REUSEADDR: a restarted server can listen again while old connections linger in TIME_WAIT.
Result<void> allow_address_reuse(int socket_fd);

}  // namespace gpupool
