#include "daemon/http_peer_limits.h"

namespace gpupool {

bool HttpPeerLimits::admit(const std::string& peer) {
  if (open_ >= total_ || open_from(peer) >= per_peer_) return false;
  ++by_peer_[peer];
  ++open_;
  return true;
}

void HttpPeerLimits::release(const std::string& peer) {
  auto found = by_peer_.find(peer);
  if (found == by_peer_.end()) return;
  --open_;
  // Peers come and go: one that has nothing open is forgotten, so the map stays within the cap.
  if (--found->second == 0) by_peer_.erase(found);
}

size_t HttpPeerLimits::open_from(const std::string& peer) const {
  auto found = by_peer_.find(peer);
  return found == by_peer_.end() ? 0 : found->second;
}

}  // namespace gpupool
