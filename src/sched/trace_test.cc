#include "sched/trace.h"

#include <gtest/gtest.h>

namespace gpupool {
namespace {

constexpr const char* kHeader =
    "id,submit_s,duration_s,gpus,gpu_mem_mib,user,priority,time_limit_s\n";

TEST(TraceTest, ParsesEveryColumn) {
  auto trace =
      parse_trace(std::string(kHeader) + "a,0,60,2,,alice,3,120\nb,1.5,30,1,20480,bob,,\n");
  ASSERT_TRUE(trace.ok()) << trace.error().message;
  ASSERT_EQ(trace->size(), 2u);
  const TraceJob& a = (*trace)[0];
  EXPECT_EQ(a.id, "a");
  EXPECT_EQ(a.duration_s, 60);
  EXPECT_EQ(a.gpus, 2u);
  EXPECT_FALSE(a.gpu_mem_mib);
  EXPECT_EQ(a.user, "alice");
  EXPECT_EQ(a.priority, 3);
  EXPECT_EQ(a.time_limit_s, 120.0);
  const TraceJob& b = (*trace)[1];
  EXPECT_EQ(b.submit_s, 1.5);
  EXPECT_EQ(b.gpu_mem_mib, 20480u);
  EXPECT_EQ(b.priority, 0);
  EXPECT_FALSE(b.time_limit_s);
}

TEST(TraceTest, TheLastFourColumnsMayBeAbsent) {
  auto short_header = parse_trace("id,submit_s,duration_s,gpus\nx,0,10,8\r\n\n");
  ASSERT_TRUE(short_header.ok()) << short_header.error().message;
  EXPECT_EQ(short_header->at(0).gpus, 8u);
  EXPECT_EQ(short_header->at(0).user, "");
  auto short_row = parse_trace(std::string(kHeader) + "x,0,10,1,512\n");
  ASSERT_TRUE(short_row.ok()) << short_row.error().message;
  EXPECT_EQ(short_row->at(0).gpu_mem_mib, 512u);
}

TEST(TraceTest, CpuOnlyJobsAreSkipped) {
  auto trace = parse_trace(std::string(kHeader) + "cpu,0,10,0\ngpu,0,10,1\n");
  ASSERT_TRUE(trace.ok());
  ASSERT_EQ(trace->size(), 1u);
  EXPECT_EQ(trace->at(0).id, "gpu");
}

TEST(TraceTest, ABadRowIsReportedWithItsLineNumber) {
  struct Case {
    std::string row;
    std::string message;
  };
  const Case cases[] = {
      {"a,0,10,9", "line 3: gpus: expected an integer from 0 to 8, got '9'"},
      {"a,0,10,-1", "line 3: gpus: expected an integer from 0 to 8, got '-1'"},
      {"a,x,10,1", "line 3: submit_s: expected a non-negative number of seconds, got 'x'"},
      {"a,0,-5,1", "line 3: duration_s: expected a non-negative number of seconds, got '-5'"},
      {"a,0,nan,1", "line 3: duration_s: expected a non-negative number of seconds, got 'nan'"},
      {"a,0,10,1,0", "line 3: gpu_mem_mib: expected a positive number of MiB or nothing, got '0'"},
      {"a,0,10,1,,u,high", "line 3: priority: expected an integer or nothing, got 'high'"},
      {"a,0,10,1,,u,,0", "line 3: time_limit_s: expected a positive number of seconds, got '0'"},
      {",0,10,1", "line 3: id: must not be empty"},
      {"a,0,10", "line 3: expected 4 to 8 fields, got 3"},
      {"a,0,10,1,,,,,extra", "line 3: expected 4 to 8 fields, got 9"},
      {"ok,0,10,1", "line 3: id 'ok' is already used on line 2"},
  };
  for (const Case& c : cases) {
    auto trace = parse_trace(std::string(kHeader) + "ok,0,10,1\n" + c.row + "\nlater,0,1,1\n");
    ASSERT_FALSE(trace.ok()) << c.row;
    EXPECT_EQ(trace.error().message, c.message);
  }
}

TEST(TraceTest, TheHeaderIsChecked) {
  auto missing = parse_trace("");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().message, "the trace is empty: expected a header line");
  auto wrong = parse_trace("id,submit,duration,gpus\n");
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.error().message.find("line 1: expected the header"), std::string::npos);
}

}  // namespace
}  // namespace gpupool
