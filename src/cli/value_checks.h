// Checks of the values gpupool's options take, run by the command-line parser: a bad value is a
// usage error (exit 2) with the value parser's own one-line message, before the command runs.
#pragma once

#include <cstdint>

#include <CLI/CLI.hpp>

namespace gpupool::cli {

CLI::Validator duration_value();     // 30s, 10m, 2h, 1d
CLI::Validator duration_or_nothing_value();  // the same, or "" (an option with an optional value)
CLI::Validator memory_size_value();  // 20G, 512M
CLI::Validator job_state_value();    // queued, held, running, done, failed, cancelled
CLI::Validator since_value();        // what `report --since` takes
CLI::Validator job_ids_value();      // 42, 7,8,9, 40-45 or slurm:123 (one argument of several)
CLI::Validator array_spec_value();   // 0-99, 1,3,5-7, 0-15:4, 0-99%8
// A whole number in [low, high], with a message that says so ("'abc' is not a whole number
// from 1 to 1024"), where CLI::Range says "Value abc not in range".
CLI::Validator whole_number(uint64_t low, uint64_t high);

}  // namespace gpupool::cli
