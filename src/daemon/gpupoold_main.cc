// gpupoold: the job queue daemon (src/daemon/daemon.h).
#include "daemon/daemon.h"

int main(int argc, char** argv) { return gpupool::daemon_main(argc, argv); }
