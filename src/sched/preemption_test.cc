#include "sched/preemption.h"

#include <gtest/gtest.h>

namespace gpupool {
namespace {

TEST(Preemption, SuspendsTheLowestPriorityMostRecentlyStartedFirstUntilThereIsRoom) {
  std::vector<PreemptionCandidate> running = {
      {1, 0, 1, 100}, {2, 0, 1, 300}, {3, -5, 1, 50}, {4, 0, 2, 200}, {5, 9, 4, 10}};
  // Needs 2 whole GPUs, none free: job 3 (priority -5), then job 2 (priority 0, the latest started).
  EXPECT_EQ(jobs_to_preempt(5, 2, 0, running), (std::vector<JobId>{3, 2}));
  // One free already: job 3 makes the second.
  EXPECT_EQ(jobs_to_preempt(5, 2, 1, running), (std::vector<JobId>{3}));
}

TEST(Preemption, NeverSuspendsAJobOfTheSameOrHigherPriority) {
  std::vector<PreemptionCandidate> running = {{1, 5, 1, 100}, {2, 7, 1, 100}};
  EXPECT_TRUE(jobs_to_preempt(5, 1, 0, running).empty());
}

TEST(Preemption, SuspendsNothingWhenItWouldNotMakeEnoughRoomOrThereIsRoomAlready) {
  std::vector<PreemptionCandidate> running = {{1, 0, 1, 100}, {2, 9, 4, 100}};
  EXPECT_TRUE(jobs_to_preempt(5, 4, 1, running).empty());  // 2 at most: not 4
  EXPECT_TRUE(jobs_to_preempt(5, 1, 1, running).empty());  // it waits for something else
}

}  // namespace
}  // namespace gpupool
