// The dashboard's files, embedded in the binary at build time (src/daemon/web/embed_assets.cmake):
// our own page from src/daemon/web/ and Chart.js from Debian's libjs-chart.js, so gpupoold
// serves them with nothing to install beside it and no request leaving the machine.
#pragma once

#include <span>
#include <string_view>

namespace gpupool {

struct WebAsset {
  std::string_view path;          // the URL path it is served at: "/", "/app.js"
  std::string_view content_type;
  std::string_view body;
};

std::span<const WebAsset> web_assets();

}  // namespace gpupool
