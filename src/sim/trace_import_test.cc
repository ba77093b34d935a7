#include "sim/trace_import.h"

#include <gtest/gtest.h>

namespace gpupool::sim {
namespace {

RecordedTrace read(TraceFormat format, std::string_view text) {
  Result<RecordedTrace> trace = read_recorded_trace(format, text);
  EXPECT_TRUE(trace.ok()) << trace.error().message;
  return trace.ok() ? std::move(*trace) : RecordedTrace{};
}

std::string read_error(TraceFormat format, std::string_view text) {
  Result<RecordedTrace> trace = read_recorded_trace(format, text);
  return trace.ok() ? "" : trace.error().message;
}

constexpr std::string_view kAlibaba =
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
    "deletion_time,scheduled_time\n"
    "openb-pod-0000,12000,16384,1,1000,,LS,Running,0,12537496,0\n"
    "openb-pod-0001,6000,12288,1,460,,LS,Running,427061,12902960,427061\n"
    "openb-pod-0061,11908,47104,1,1000,,BE,Pending,10001278,10001403,\n"
    "openb-pod-0017,88000,327680,8,1000,,Burstable,Succeeded,9437497,10769854,9437497\n"
    "openb-pod-0100,4000,8192,0,0,,BE,Running,100,200,100\n";

TEST(TraceImport, AlibabaPodsKeepTheirShareAndPendingOnesAreUnusable) {
  RecordedTrace trace = read(TraceFormat::AlibabaGpu, kAlibaba);
  EXPECT_EQ(trace.unusable, 1u);  // pod-0061 was never scheduled
  ASSERT_EQ(trace.jobs.size(), 4u);
  EXPECT_EQ(trace.jobs[0].duration_s, 12537496);
  EXPECT_EQ(trace.jobs[0].gpu_fraction, std::nullopt);
  EXPECT_EQ(trace.jobs[1].gpu_fraction, 0.46);
  EXPECT_EQ(trace.jobs[1].submit_s, 427061);
  EXPECT_EQ(trace.jobs[2].gpus, 8u);
  EXPECT_EQ(trace.jobs[2].duration_s, 10769854 - 9437497);
  EXPECT_EQ(trace.jobs[3].gpus, 0u);
}

TEST(TraceImport, ColumnsAreFoundByNameAndAMissingOneIsNamed) {
  EXPECT_EQ(read_error(TraceFormat::AlibabaGpu, "name,num_gpu\nx,1\n"),
            "line 1: the header has no column 'gpu_milli' (expected name, num_gpu, gpu_milli, "
            "creation_time, deletion_time, scheduled_time)");
  EXPECT_EQ(read_error(TraceFormat::AlibabaGpu, ""), "the trace is empty: expected a header line");
}

TEST(TraceImport, AMalformedRecordStopsReadingWithItsLine) {
  std::string text(kAlibaba);
  text += "openb-pod-0200,1,1,two,1000,,LS,Running,5,9,5\n";
  EXPECT_EQ(read_error(TraceFormat::AlibabaGpu, text),
            "line 7: num_gpu: expected a number, got 'two'");
}

constexpr std::string_view kHelios =
    "job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,"
    "queue\n"
    "1425511,uXBbc,vcJkd,1,1,1,COMPLETED,2020-06-09 18:41:01,2020-06-09 18:41:01,"
    "2020-06-10 04:55:09,36848,0\n"
    "1425512,uVMrF,vchbv,4,16,1,FAILED,2020-06-09 18:41:27,2020-06-09 18:41:27,"
    "2020-06-09 18:45:36,249,0\n"
    "1425514,uVMrF,vchbv,16,16,2,COMPLETED,2020-06-09 18:42:00,2020-06-09 18:42:00,"
    "2020-06-09 18:45:00,180,0\n"
    "1425515,uVMrF,vchbv,1,1,1,CANCELLED,2020-06-09 18:43:00,,,0,0\n";

TEST(TraceImport, HeliosJobsKeepUserAndDurationAndDatesReadAsUtc) {
  RecordedTrace trace = read(TraceFormat::Helios, kHelios);
  EXPECT_EQ(trace.unusable, 1u);  // cancelled before it started
  ASSERT_EQ(trace.jobs.size(), 3u);
  EXPECT_EQ(trace.jobs[0].user, "uXBbc");
  EXPECT_EQ(trace.jobs[0].duration_s, 36848);
  EXPECT_EQ(trace.jobs[0].submit_s, 1591728061);  // date -u -d '2020-06-09 18:41:01' +%s
  EXPECT_EQ(trace.jobs[1].submit_s - trace.jobs[0].submit_s, 26);
  EXPECT_EQ(trace.jobs[2].gpus, 16u);
}

TEST(TraceImport, HeliosTimesMustBeDates) {
  EXPECT_EQ(read_error(TraceFormat::Helios, "job_id,user,gpu_num,submit_time,duration\n"
                                            "1,u,1,2020-02-30 00:00:00,5\n"),
            "line 2: submit_time: expected a time as YYYY-MM-DD HH:MM:SS, got '2020-02-30 "
            "00:00:00'");
}

constexpr std::string_view kPhilly = R"([
  {"status": "Pass", "vc": "ee9e8c", "jobid": "application_1", "user": "ce2f4c",
   "submitted_time": "2017-10-07 01:11:39",
   "attempts": [
     {"start_time": "2017-10-07 01:12:09", "end_time": "2017-10-07 01:13:23",
      "detail": [{"ip": "m47", "gpus": ["gpu0", "gpu1"]}]},
     {"start_time": "2017-10-07 01:13:30", "end_time": "2017-10-07 02:13:30",
      "detail": [{"ip": "m412", "gpus": ["gpu0", "gpu1", "gpu2", "gpu3"]},
                 {"ip": "m413", "gpus": ["gpu0", "gpu1", "gpu2", "gpu3"]}]}]},
  {"status": "Killed", "vc": "ee9e8c", "jobid": "application_2", "user": "aa",
   "submitted_time": "2017-10-07 01:20:00", "attempts": []},
  {"status": "Pass", "vc": "ee9e8c", "jobid": "application_3", "user": "aa",
   "submitted_time": "2017-10-07 01:30:00",
   "attempts": [{"start_time": "2017-10-07 01:30:10", "end_time": "None",
                 "detail": [{"ip": "m1", "gpus": ["gpu0"]}]}]}
])";

TEST(TraceImport, PhillyJobsAddUpTheirAttemptsOnTheLastAttemptsGpus) {
  RecordedTrace trace = read(TraceFormat::Philly, kPhilly);
  EXPECT_EQ(trace.unusable, 2u);  // no attempts; still running
  ASSERT_EQ(trace.jobs.size(), 1u);
  EXPECT_EQ(trace.jobs[0].id, "application_1");
  EXPECT_EQ(trace.jobs[0].user, "ce2f4c");
  EXPECT_EQ(trace.jobs[0].gpus, 8u);
  EXPECT_EQ(trace.jobs[0].duration_s, 74 + 3600);
}

TEST(TraceImport, PhillyMustBeAJsonList) {
  EXPECT_EQ(read_error(TraceFormat::Philly, "{"),
            "not valid JSON (expected Philly's cluster_job_log)");
  EXPECT_EQ(read_error(TraceFormat::Philly, "{}"),
            "expected a JSON list of jobs (Philly's cluster_job_log)");
  EXPECT_EQ(read_error(TraceFormat::Philly, R"([{"submitted_time": 5}])"),
            "job 1 of the list: submitted_time: expected a time or null");
}

RecordedJob recorded(std::string id, double submit, double duration, unsigned gpus,
                     std::optional<double> fraction = std::nullopt) {
  RecordedJob job;
  job.id = std::move(id);
  job.submit_s = submit;
  job.duration_s = duration;
  job.gpus = gpus;
  job.gpu_fraction = fraction;
  job.user = "u";
  return job;
}

TEST(TraceImport, FittingCompressesArrivalsToTheTargetLoad) {
  // 2 GPUs; 400 GPU-seconds offered over 100 s of arrivals: load 2. Target 1: gaps doubled.
  std::vector<RecordedJob> jobs = {recorded("b", 1100, 100, 2), recorded("a", 1000, 100, 1),
                                   recorded("c", 1050, 100, 1), recorded("cpu", 1060, 5, 0),
                                   recorded("wide", 1070, 5, 16)};
  FitOptions options;
  options.machine_gpus = 2;
  options.gpu_memory_mib = 1000;
  options.target_load = 1;
  Result<FittedTrace> fitted = fit_to_machine(jobs, options);
  ASSERT_TRUE(fitted.ok()) << fitted.error().message;
  EXPECT_EQ(fitted->cpu_only, 1u);
  EXPECT_EQ(fitted->too_wide, 1u);
  EXPECT_DOUBLE_EQ(fitted->offered_load, 2);
  EXPECT_DOUBLE_EQ(fitted->arrival_scale, 2);
  EXPECT_EQ(format_trace(fitted->jobs),
            "id,submit_s,duration_s,gpus,gpu_mem_mib,user,priority,time_limit_s\n"
            "a,0,100,1,,u,,\n"
            "c,100,100,1,,u,,\n"
            "b,200,100,2,,u,,\n");
}

TEST(TraceImport, FractionsBecomeSlicesOfTheCardAndAWindowIsKept) {
  std::vector<RecordedJob> jobs = {recorded("a", 0, 10, 1), recorded("b", 10, 10, 1, 0.25),
                                   recorded("c", 20, 10, 1, 0.5), recorded("d", 30, 10, 1)};
  FitOptions options;
  options.machine_gpus = 8;
  options.gpu_memory_mib = 143771;
  options.offset = 1;
  options.count = 2;
  Result<FittedTrace> fitted = fit_to_machine(jobs, options);
  ASSERT_TRUE(fitted.ok()) << fitted.error().message;
  ASSERT_EQ(fitted->jobs.size(), 2u);
  EXPECT_EQ(fitted->jobs[0].id, "b");
  EXPECT_EQ(fitted->jobs[0].submit_s, 0);
  EXPECT_EQ(fitted->jobs[0].gpu_mem_mib, 35943u);  // a quarter of 143771, rounded
  EXPECT_EQ(fitted->jobs[1].gpu_mem_mib, 71886u);
  // The result reads back as a trace.
  Result<std::vector<TraceJob>> parsed = parse_trace(format_trace(fitted->jobs));
  ASSERT_TRUE(parsed.ok()) << parsed.error().message;
  EXPECT_EQ(parsed->size(), 2u);
}

TEST(TraceImport, FittingNeedsTwoArrivalsApart) {
  FitOptions options;
  options.gpu_memory_mib = 1000;
  EXPECT_EQ(fit_to_machine({recorded("a", 5, 10, 1)}, options).error().message,
            "fewer than two jobs are left to replay");
  EXPECT_EQ(fit_to_machine({recorded("a", 5, 10, 1), recorded("b", 5, 10, 1)}, options)
                .error()
                .message,
            "every job arrives at the same time: no load to scale");
  EXPECT_EQ(parse_trace_format("borg").error().message,
            "unknown trace format 'borg': expected alibaba-gpu, helios or philly");
}

}  // namespace
}  // namespace gpupool::sim
