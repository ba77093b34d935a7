// `supervise` as a program of its own, so the unit tests run real supervisors (gpupoold runs
// the same function as `gpupoold supervise`).
#include <cstdio>
#include <cstring>

#include "daemon/supervisor.h"

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "supervise") == 0) return gpupool::supervise_main();
  std::fprintf(stderr, "usage: %s supervise (the attempt as JSON on stdin)\n", argv[0]);
  return 2;
}
