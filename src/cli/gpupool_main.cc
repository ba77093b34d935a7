#include "cli/app.h"

int main(int argc, char** argv) { return gpupool::cli::run(argc, argv); }
