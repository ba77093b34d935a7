// How many HTTP connections gpupoold holds open, per peer address and in all. Pure bookkeeping
// (no sockets): the server asks before it keeps a connection it accepted and tells when one
// closes, so a connection over a cap is closed at once, before any buffer or timer is given to it.
#pragma once

#include <cstddef>
#include <map>
#include <string>

namespace gpupool {

class HttpPeerLimits {
 public:
  HttpPeerLimits(size_t per_peer, size_t total) : per_peer_(per_peer), total_(total) {}
  // Counts a connection from `peer` and says true, or false (nothing counted) when the peer or
  // the server is at its cap.
  bool admit(const std::string& peer);
  // A connection admit() counted has closed.
  void release(const std::string& peer);
  size_t open() const { return open_; }
  size_t open_from(const std::string& peer) const;

 private:
  size_t per_peer_;
  size_t total_;
  size_t open_ = 0;
  std::map<std::string, size_t> by_peer_;  // only peers with a connection open
};

}  // namespace gpupool
