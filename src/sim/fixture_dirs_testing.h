// Where the unit tests find the fixtures: the shipped ones (as built) and the tests' own.
#pragma once

#include <string>

namespace gpupool::testing_support {

inline const std::string kFixtureDir = GPUPOOL_TEST_FIXTURE_DIR;
inline const std::string kTestFixtureDir = std::string(GPUPOOL_TEST_DATA_DIR) + "/fixtures";

}  // namespace gpupool::testing_support
