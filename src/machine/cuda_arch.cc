#include "machine/cuda_arch.h"

namespace gpupool {

unsigned cores_per_multiprocessor(int major, int minor) {
  switch (major) {
    case 3: return 192;                    // Kepler
    case 5: return 128;                    // Maxwell
    case 6: return minor == 0 ? 64 : 128;  // Pascal: GP100 has half-size SMs
    case 7: return 64;                     // Volta, Turing
    case 8: return minor == 0 ? 64 : 128;  // Ampere GA100 vs GA10x, and Ada (8.9)
    case 9: return 128;                    // Hopper
    case 10:
    case 11:
    case 12: return 128;  // Blackwell
    default: return 0;
  }
}

}  // namespace gpupool
