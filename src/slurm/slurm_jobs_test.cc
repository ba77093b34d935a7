#include "slurm/slurm_jobs.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "os/program.h"

namespace gpupool {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

// squeue's and sacct's lines are separated by this byte (the queries ask for it).
std::string line_of(std::initializer_list<std::string> fields) {
  std::string line;
  for (const std::string& field : fields) line += (line.empty() ? "" : "\x1f") + field;
  return line + "\n";
}

JobSpec spec_of(std::vector<std::string> argv) {
  JobSpec spec;
  spec.argv = std::move(argv);
  spec.cwd = "/home/ann/work dir";
  return spec;
}

// --- ids ---

TEST(SlurmJobsTest, IdsOfBothKindsMix) {
  Result<JobIds> ids = parse_any_job_ids(std::vector<std::string>{"5,slurm:8", "slurm:7", "9"});
  ASSERT_TRUE(ids.ok()) << ids.error().message;
  EXPECT_THAT(ids->local, ElementsAre(5, 9));
  EXPECT_THAT(ids->slurm, ElementsAre(8, 7));
  EXPECT_EQ(slurm_id_text(42), "slurm:42");
  Result<JobIds> ranged = parse_any_job_ids(std::vector<std::string>{"5-7,slurm:8"});
  ASSERT_TRUE(ranged.ok()) << ranged.error().message;
  EXPECT_THAT(ranged->local, ElementsAre(5, 6, 7));
  EXPECT_THAT(ranged->slurm, ElementsAre(8));
  for (const char* bad : {"slurm:", "slurm:x", "Slurm:4", "x", "0", "slurm:0", "slurm:-1", "", "7-5", "slurm:1-3"}) {
    Result<JobIds> refused = parse_any_job_ids(std::vector<std::string>{bad});
    ASSERT_FALSE(refused.ok()) << bad;
    EXPECT_THAT(refused.error().message, HasSubstr("slurm:42"));
  }
}

// --- submitting ---

TEST(SlurmJobsTest, WholeGpusBecomeGresAndTheRestOfTheSpecFollows) {
  JobSpec spec = spec_of({"python", "train.py", "--lr", "3e-4"});
  spec.gpus.count = 2;
  spec.time_limit_s = 90;
  spec.name = "train";
  spec.priority = -5;
  SlurmSubmitSettings settings;
  settings.partition = "gpu";
  settings.after = {7, 8};
  settings.hold = true;
  Result<SbatchCall> call = sbatch_call(spec, settings);
  ASSERT_TRUE(call.ok()) << call.error().message;
  EXPECT_THAT(call->argv,
              ElementsAre("sbatch", "--parsable", "--job-name=train", "--chdir=/home/ann/work dir", "--export=ALL",
                          "--output=/home/ann/work dir/gpupool-%j.out", "--error=/home/ann/work dir/gpupool-%j.err",
                          "--partition=gpu", "--gres=gpu:2", "--time=00:02:00", "--dependency=afterok:7:8",
                          "--nice=5", "--hold"));
  EXPECT_EQ(call->script, "#!/bin/sh\nexec python train.py --lr 3e-4\n");
  EXPECT_EQ(call->name, "train");
}

TEST(SlurmJobsTest, TheDefaultNameIsTheCommandsAndNoOptionIsAddedUnasked) {
  Result<SbatchCall> call = sbatch_call(spec_of({"/usr/bin/env", "true"}), {});
  ASSERT_TRUE(call.ok()) << call.error().message;
  EXPECT_EQ(call->name, "env");
  EXPECT_THAT(call->argv, Contains("--job-name=env"));
  EXPECT_THAT(call->argv, Contains("--gres=gpu:1"));
  for (const char* absent : {"--hold", "--time", "--partition", "--dependency", "--nice"}) {
    for (const std::string& arg : call->argv) EXPECT_FALSE(arg.starts_with(absent)) << arg;
  }
}

// The script runs the command with exactly its words: sh reads it and runs printf with them.
TEST(SlurmJobsTest, TheScriptKeepsNastyArgumentsWhole) {
  std::vector<std::string> nasty = {"two words", "it's", "\"quoted\"", "$HOME", "$(id)", "`id`", "a\nb",
                                    "-n", "--", "*", "", "\\", "tab\there", "#SBATCH --partition=x", "\nexec false"};
  std::vector<std::string> argv = {"printf", "[%s]"};
  argv.insert(argv.end(), nasty.begin(), nasty.end());
  Result<SbatchCall> call = sbatch_call(spec_of(argv), {});
  ASSERT_TRUE(call.ok()) << call.error().message;
  ProgramOptions options;
  options.input = call->script;
  Result<ProgramOutcome> ran = run_program({"sh"}, options);
  ASSERT_TRUE(ran.ok()) << ran.error().message;
  std::string expected;
  for (const std::string& word : nasty) expected += "[" + word + "]";
  EXPECT_EQ(ran->out, expected);
  EXPECT_EQ(ran->exit_code, 0);
  // sbatch reads #SBATCH lines only before the first command: the exec line comes first.
  EXPECT_TRUE(call->script.starts_with("#!/bin/sh\nexec printf "));
}

TEST(SlurmJobsTest, AMemorySliceIsShardsOfOneGpuWhereTheClusterHasThem) {
  JobSpec spec = spec_of({"python", "eval.py"});
  spec.gpus.slice_mib = 20480;
  SlurmSubmitSettings settings;
  settings.cluster_has_shards = true;
  Result<SbatchCall> call = sbatch_call(spec, settings);
  ASSERT_TRUE(call.ok()) << call.error().message;
  EXPECT_THAT(call->argv, Contains("--gres=shard:20"));
  EXPECT_THAT(call->argv, Not(Contains("--gres=gpu:1")));
  spec.gpus.slice_mib = 1500;  // rounded up
  settings.shard_mib = 1000;
  call = sbatch_call(spec, settings);
  ASSERT_TRUE(call.ok()) << call.error().message;
  EXPECT_THAT(call->argv, Contains("--gres=shard:2"));

  spec.gpus.count = 2;
  Result<SbatchCall> two = sbatch_call(spec, settings);
  ASSERT_FALSE(two.ok());
  EXPECT_THAT(two.error().message, HasSubstr("one GPU"));
  spec.gpus.count = 1;
  settings.cluster_has_shards = false;
  Result<SbatchCall> none = sbatch_call(spec, settings);
  ASSERT_FALSE(none.ok());
  EXPECT_THAT(none.error().message, HasSubstr("no GPU shards configured"));
  EXPECT_THAT(none.error().message, HasSubstr("whole GPUs"));
}

TEST(SlurmJobsTest, WhatSlurmCannotDoAsMeantIsRefusedInOneLine) {
  JobSpec priority = spec_of({"true"});
  priority.priority = 1;
  JobSpec retries = spec_of({"true"});
  retries.retries = 2;
  JobSpec dash = spec_of({"-x"});
  JobSpec relative = spec_of({"true"});
  relative.cwd = "work";
  for (const JobSpec& spec : {priority, retries, dash, relative}) {
    Result<SbatchCall> call = sbatch_call(spec, {});
    ASSERT_FALSE(call.ok());
    EXPECT_EQ(call.error().message.find('\n'), std::string::npos);
  }
  EXPECT_THAT(sbatch_call(retries, {}).error().message, HasSubstr("--retries"));
  SlurmSubmitSettings zero;
  zero.shard_mib = 0;
  EXPECT_FALSE(sbatch_call(spec_of({"true"}), zero).ok());
}

TEST(SlurmJobsTest, OutputPatternsAreMadeAbsoluteAndOnlyOnesGpupoolCanFindAreTaken) {
  SlurmSubmitSettings settings;
  settings.output = "logs/%x-%j.log";
  Result<SbatchCall> call = sbatch_call(spec_of({"true"}), settings);
  ASSERT_TRUE(call.ok()) << call.error().message;
  // Only --output: standard error goes to the same file, as with sbatch.
  EXPECT_EQ(call->output_pattern, "/home/ann/work dir/logs/%x-%j.log");
  EXPECT_EQ(call->error_pattern, call->output_pattern);
  settings.error = "/tmp/e-%j";
  call = sbatch_call(spec_of({"true"}), settings);
  ASSERT_TRUE(call.ok()) << call.error().message;
  EXPECT_THAT(call->argv, Contains("--error=/tmp/e-%j"));
  for (const char* bad : {"out-%N.log", "out-%a", "out-%", "out\\%j"}) {
    settings.output = bad;
    Result<SbatchCall> refused = sbatch_call(spec_of({"true"}), settings);
    ASSERT_FALSE(refused.ok()) << bad;
    EXPECT_THAT(refused.error().message, HasSubstr("%j"));
  }
}

TEST(SlurmJobsTest, FilenamesExpandAsSlurmExpandsThem) {
  SlurmFilenameFields fields{42, "train", "ann"};
  EXPECT_EQ(*expand_slurm_filename("/w/gpupool-%j.out", fields), "/w/gpupool-42.out");
  EXPECT_EQ(*expand_slurm_filename("/w/%x-%u-%5j-%A-%%.log", fields), "/w/train-ann-00042-42-%.log");
  EXPECT_EQ(*expand_slurm_filename("/w/%1j", fields), "/w/42");
  EXPECT_FALSE(expand_slurm_filename("/w/%N", fields).ok());
  EXPECT_FALSE(expand_slurm_filename("/w/%3%", fields).ok());
}

TEST(SlurmJobsTest, TimeLimitsAreWholeMinutesRoundedUp) {
  EXPECT_EQ(slurm_time_limit(0.2), "00:01:00");
  EXPECT_EQ(slurm_time_limit(60), "00:01:00");
  EXPECT_EQ(slurm_time_limit(90), "00:02:00");
  EXPECT_EQ(slurm_time_limit(3600), "01:00:00");
  EXPECT_EQ(slurm_time_limit(1.5 * 86400), "1-12:00:00");
  EXPECT_EQ(slurm_time_limit(86400 + 61), "1-00:02:00");
}

TEST(SlurmJobsTest, SinfoSaysWhetherShardsAreThere) {
  EXPECT_FALSE(*sinfo_offers_shards("gpu:8\n"));
  EXPECT_FALSE(*sinfo_offers_shards("(null)\ngpu:h200:8(S:0-1)\n"));
  EXPECT_FALSE(*sinfo_offers_shards(""));
  EXPECT_TRUE(*sinfo_offers_shards("gpu:8,shard:64\n"));
  EXPECT_TRUE(*sinfo_offers_shards("gpu:h200:8(S:0,1),shard:h200:64(S:0,1)\n"));
  EXPECT_TRUE(*sinfo_offers_shards("(null)\nshard:8\n"));
  Result<bool> bad = sinfo_offers_shards("gpu:8,:4\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.error().message, HasSubstr("line 1"));
}

TEST(SlurmJobsTest, SbatchAnswersAnIdPerhapsWithItsCluster) {
  EXPECT_EQ(*parse_sbatch_answer("42\n"), 42u);
  EXPECT_EQ(*parse_sbatch_answer("42;gpu-cluster\n"), 42u);
  for (const char* bad : {"", "Submitted batch job 42", "x;y", "0"}) {
    Result<JobId> refused = parse_sbatch_answer(bad);
    ASSERT_FALSE(refused.ok()) << bad;
    EXPECT_THAT(refused.error().message, HasSubstr("sbatch answered"));
  }
}

// --- what Slurm says ---

TEST(SlurmJobsTest, QueriesAskForEveryStateAndTheirOwnSeparator) {
  std::vector<JobId> ids = {7, 8};
  std::vector<std::string> squeue = squeue_argv(ids);
  EXPECT_THAT(squeue, Contains("--jobs=7,8"));
  EXPECT_THAT(squeue, Contains("--states=all"));
  EXPECT_EQ(squeue.front(), "squeue");
  EXPECT_THAT(squeue.back(), HasSubstr("JobID:0\x1f,State:0\x1f"));
  EXPECT_THAT(squeue.back(), HasSubstr("Name:0"));
  std::vector<std::string> log = sacct_argv(ids, true);
  EXPECT_THAT(log, Contains("--completion"));
  EXPECT_THAT(log, Contains("--jobs=7,8"));
  EXPECT_THAT(log, Contains("--allocations"));
  EXPECT_THAT(sacct_argv(ids, false), Not(Contains("--completion")));
  EXPECT_THAT(scontrol_show_argv(7), ElementsAre("scontrol", "--oneliner", "show", "job", "7"));
  EXPECT_STREQ(kSlurmQueryEnvironment, "SLURM_TIME_FORMAT=%s");
}

TEST(SlurmJobsTest, SqueueLinesAreRead) {
  std::string output =
      line_of({"1", "FAILED", "NonZeroExitCode", "768", "1796322800", "1796322801", "1796322802", "node1",
               "gres:gpu:2", "gpu", "00:02:00", "ann", "wrap"}) +
      line_of({"4", "FAILED", "JobLaunchFailure", "9", "1796322916", "1796322916", "1796322917", "node1", "N/A", "gpu",
               "UNLIMITED", "ann", "kill"}) +
      line_of({"2", "PENDING", "JobHeldUser", "0", "1796322914", "Unknown", "NONE", "", "N/A", "gpu", "UNLIMITED",
               "ann", "a name with | bars and \x1f separators"});
  Result<std::vector<SlurmJob>> jobs = parse_squeue(output);
  ASSERT_TRUE(jobs.ok()) << jobs.error().message;
  ASSERT_EQ(jobs->size(), 3u);
  const SlurmJob& failed = jobs->at(0);
  EXPECT_EQ(failed.id, 1u);
  EXPECT_EQ(failed.state, "FAILED");
  EXPECT_EQ(failed.reason, "NonZeroExitCode");
  EXPECT_EQ(failed.exit_code, 3);
  EXPECT_EQ(failed.signal, std::nullopt);
  EXPECT_EQ(failed.submit_time, 1796322800.0);
  EXPECT_EQ(failed.start_time, 1796322801.0);
  EXPECT_EQ(failed.end_time, 1796322802.0);
  EXPECT_EQ(failed.nodes, "node1");
  EXPECT_EQ(failed.tres, "gres:gpu:2");
  EXPECT_EQ(failed.partition, "gpu");
  EXPECT_EQ(failed.time_limit, "00:02:00");
  EXPECT_EQ(failed.user, "ann");
  EXPECT_EQ(failed.name, "wrap");
  EXPECT_EQ(failed.source, "squeue");
  EXPECT_EQ(jobs->at(1).exit_code, 128 + 9);
  EXPECT_EQ(jobs->at(1).signal, 9);
  EXPECT_EQ(jobs->at(1).tres, "");
  EXPECT_EQ(jobs->at(2).start_time, std::nullopt);
  EXPECT_EQ(jobs->at(2).end_time, std::nullopt);
  EXPECT_EQ(jobs->at(2).name, "a name with | bars and \x1f separators");
  EXPECT_TRUE(parse_squeue("")->empty());
  EXPECT_TRUE(squeue_knows_none("slurm_load_jobs error: Invalid job id specified\n"));
  EXPECT_FALSE(squeue_knows_none("slurm_load_jobs error: Unable to contact slurm controller (connect failure)\n"));
}

TEST(SlurmJobsTest, AMalformedSqueueLineIsAnErrorNamingIt) {
  std::string good =
      line_of({"1", "RUNNING", "None", "0", "1", "2", "3", "n", "N/A", "gpu", "UNLIMITED", "ann", "name"});
  for (const std::string& bad :
       {std::string("garbage\n"),
        line_of({"x1", "RUNNING", "None", "0", "1", "2", "3", "n", "N/A", "gpu", "UNLIMITED", "ann", "n"}),
        line_of({"1", "RUNNING", "None", "0", "yesterday", "2", "3", "n", "N/A", "gpu", "U", "ann", "n"}),
        line_of({"1", "RUNNING", "None", "-3", "1", "2", "3", "n", "N/A", "gpu", "U", "ann", "n"}),
        line_of({"1", "", "None", "0", "1", "2", "3", "n", "N/A", "gpu", "U", "ann", "n"})}) {
    Result<std::vector<SlurmJob>> jobs = parse_squeue(good + bad);
    ASSERT_FALSE(jobs.ok()) << bad;
    EXPECT_THAT(jobs.error().message, HasSubstr("squeue said something unexpected on line 2"));
    EXPECT_EQ(jobs.error().message.find('\n'), std::string::npos);
  }
}

TEST(SlurmJobsTest, SacctLinesAreReadFromTheAccountingAndTheCompletionLog) {
  std::string accounting =
      line_of({"5", "CANCELLED by 1000", "None", "0:15", "100", "101", "102", "node1", "billing=1,cpu=1,gres/gpu=2",
               "gpu", "00:10:00", "ann", "sleepy"}) +
      line_of({"6", "TIMEOUT", "TimeLimit", "0:0", "100", "101", "161", "node1", "", "gpu", "00:01:00", "ann", "long"});
  Result<std::vector<SlurmJob>> jobs = parse_sacct(accounting, false);
  ASSERT_TRUE(jobs.ok()) << jobs.error().message;
  ASSERT_EQ(jobs->size(), 2u);
  EXPECT_EQ(jobs->at(0).state, "CANCELLED");
  EXPECT_EQ(jobs->at(0).exit_code, 128 + 15);
  EXPECT_EQ(jobs->at(0).signal, 15);
  EXPECT_EQ(jobs->at(0).tres, "billing=1,cpu=1,gres/gpu=2");
  EXPECT_EQ(jobs->at(0).source, "sacct");
  EXPECT_EQ(jobs->at(1).exit_code, 0);
  EXPECT_EQ(jobs->at(1).reason, "TimeLimit");

  std::string log = line_of({"1", "FAILED", "", "3:0", "100", "100", "100", "node1", "", "gpu", "UNLIMITED", "root(0)",
                             "wrap"});
  jobs = parse_sacct(log, true);
  ASSERT_TRUE(jobs.ok()) << jobs.error().message;
  EXPECT_EQ(jobs->at(0).user, "root");
  EXPECT_EQ(jobs->at(0).exit_code, 3);
  EXPECT_EQ(jobs->at(0).source, "sacct -c");

  Result<std::vector<SlurmJob>> bad =
      parse_sacct(line_of({"1", "FAILED", "", "three", "1", "1", "1", "", "", "", "", "", "n"}), true);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.error().message, HasSubstr("sacct -c said something unexpected on line 1"));
  EXPECT_THAT(bad.error().message, HasSubstr("'three'"));
}

TEST(SlurmJobsTest, ScontrolsOneLineIsReadEvenWithSpacesInValues) {
  std::string line =
      "JobId=3 JobName=my job name UserId=ann(1000) GroupId=ann(1000) MCS_label=N/A Priority=4294901758 Nice=0 "
      "JobState=CANCELLED Reason=None Dependency=(null) ExitCode=0:15 RunTime=00:00:01 TimeLimit=00:02:00 "
      "SubmitTime=1796322914 StartTime=1796322914 EndTime=1796322915 Partition=gpu NodeList=node1 "
      "ReqB:S:C:T=0:0:*:* TRES=cpu=1,node=1,billing=1,gres/gpu=2 Socks/Node=* WorkDir=/home/ann/work dir "
      "StdErr=/home/ann/work dir/e-3.err StdIn=/dev/null StdOut=/home/ann/work dir/o-3.out Power= \n";
  Result<SlurmJob> job = parse_scontrol_job(line);
  ASSERT_TRUE(job.ok()) << job.error().message;
  EXPECT_EQ(job->id, 3u);
  EXPECT_EQ(job->name, "my job name");
  EXPECT_EQ(job->user, "ann");
  EXPECT_EQ(job->state, "CANCELLED");
  EXPECT_EQ(job->reason, "");
  EXPECT_EQ(job->exit_code, 143);
  EXPECT_EQ(job->time_limit, "00:02:00");
  EXPECT_EQ(job->start_time, 1796322914.0);
  EXPECT_EQ(job->tres, "cpu=1,node=1,billing=1,gres/gpu=2");
  EXPECT_EQ(job->stdout_path, "/home/ann/work dir/o-3.out");
  EXPECT_EQ(job->stderr_path, "/home/ann/work dir/e-3.err");
  EXPECT_EQ(job->source, "scontrol");

  for (const char* bad : {"", "no fields here", "JobName=x JobState=RUNNING", "JobId=3 JobState=RUNNING ExitCode=x",
                          "JobId=3 JobName=x"}) {
    Result<SlurmJob> refused = parse_scontrol_job(bad);
    ASSERT_FALSE(refused.ok()) << bad;
    EXPECT_THAT(refused.error().message, HasSubstr("scontrol"));
  }
}

SlurmJob in_state(const std::string& state, const std::string& reason = "") {
  SlurmJob job;
  job.id = 9;
  job.state = state;
  job.reason = reason;
  return job;
}

TEST(SlurmJobsTest, SlurmStatesReadAsGpupoolsStates) {
  struct Case {
    std::string state, reason;
    JobState expected;
    std::string why;
  };
  for (const Case& c : std::vector<Case>{
           {"PENDING", "Priority", JobState::Queued, "Priority"},
           {"PENDING", "JobHeldUser", JobState::Held, "held by its user"},
           {"PENDING", "JobHeldAdmin", JobState::Held, "held by an administrator"},
           {"REQUEUE_HOLD", "", JobState::Held, "requeue_hold"},
           {"RUNNING", "", JobState::Running, ""},
           {"CONFIGURING", "", JobState::Running, ""},
           {"COMPLETING", "", JobState::Running, ""},
           {"SUSPENDED", "", JobState::Running, "suspended"},
           {"COMPLETED", "", JobState::Done, ""},
           {"FAILED", "NonZeroExitCode", JobState::Failed, ""},
           {"FAILED", "JobLaunchFailure", JobState::Failed, "JobLaunchFailure"},
           {"TIMEOUT", "TimeLimit", JobState::Failed, "time limit (TimeLimit)"},
           {"NODE_FAIL", "", JobState::Failed, "node failure"},
           {"OUT_OF_MEMORY", "", JobState::Failed, "out of memory"},
           {"BOOT_FAIL", "", JobState::Failed, "node boot failure"},
           {"DEADLINE", "", JobState::Failed, "deadline reached"},
           {"PREEMPTED", "", JobState::Failed, "preempted"},
           {"CANCELLED", "", JobState::Cancelled, ""},
       }) {
    Result<MappedState> mapped = map_slurm_state(in_state(c.state, c.reason));
    ASSERT_TRUE(mapped.ok()) << c.state;
    EXPECT_EQ(mapped->state, c.expected) << c.state;
    EXPECT_EQ(mapped->reason, c.why) << c.state;
  }
  Result<MappedState> unknown = map_slurm_state(in_state("DANCING"));
  ASSERT_FALSE(unknown.ok());
  EXPECT_THAT(unknown.error().message, HasSubstr("'DANCING'"));
}

// --- records ---

SlurmRecord record_of(JobId id) {
  SlurmRecord record;
  record.id = id;
  record.name = "train";
  record.argv = {"python", "train.py", "a\nb"};
  record.cwd = "/w";
  record.stdout_path = "/w/gpupool-" + std::to_string(id) + ".out";
  record.stderr_path = "/w/gpupool-" + std::to_string(id) + ".err";
  record.submit_time = 1000.5;
  record.gpu_count = 2;
  record.time_limit_s = 60;
  record.partition = "gpu";
  record.after = {3};
  return record;
}

TEST(SlurmJobsTest, RecordsRoundTripWithTheirEnds) {
  SlurmJob ended = in_state("COMPLETED");
  ended.id = 7;
  ended.exit_code = 0;
  ended.end_time = 2000;
  std::string text = submitted_record_line(record_of(7)) + "\n" + submitted_record_line(record_of(8)) + "\n\n" +
                     ended_record_line(ended) + "\n";
  EXPECT_EQ(submitted_record_line(record_of(7)).find('\n'), std::string::npos);
  Result<std::vector<SlurmRecord>> records = parse_slurm_records(text, "jobs.jsonl");
  ASSERT_TRUE(records.ok()) << records.error().message;
  ASSERT_EQ(records->size(), 2u);
  const SlurmRecord& first = records->at(0);
  EXPECT_EQ(first.id, 7u);
  EXPECT_EQ(first.argv, record_of(7).argv);
  EXPECT_EQ(first.submit_time, 1000.5);
  EXPECT_EQ(first.gpu_count, 2u);
  EXPECT_EQ(first.time_limit_s, 60.0);
  EXPECT_THAT(first.after, ElementsAre(3));
  EXPECT_EQ(first.stderr_path, "/w/gpupool-7.err");
  ASSERT_TRUE(first.ended.has_value());
  EXPECT_EQ(first.ended->state, "COMPLETED");
  EXPECT_EQ(first.ended->end_time, 2000.0);
  EXPECT_FALSE(records->at(1).ended.has_value());
}

TEST(SlurmJobsTest, ALaterSubmissionOfTheSameIdReplacesTheEarlier) {
  SlurmRecord again = record_of(7);
  again.name = "again";
  SlurmJob ended = in_state("FAILED");
  ended.id = 7;
  std::string text = submitted_record_line(record_of(7)) + "\n" + ended_record_line(ended) + "\n" +
                     submitted_record_line(record_of(8)) + "\n" + submitted_record_line(again) + "\n";
  Result<std::vector<SlurmRecord>> records = parse_slurm_records(text, "jobs.jsonl");
  ASSERT_TRUE(records.ok()) << records.error().message;
  ASSERT_EQ(records->size(), 2u);
  EXPECT_EQ(records->at(0).id, 8u);
  EXPECT_EQ(records->at(1).name, "again");
  EXPECT_FALSE(records->at(1).ended.has_value());
}

TEST(SlurmJobsTest, AMalformedRecordIsAnErrorNamingFileAndLine) {
  std::string good = submitted_record_line(record_of(7)) + "\n";
  for (const char* bad : {"{not json", "[1,2]", R"({"name": "x"})", R"({"slurm_id": -1})",
                          R"({"slurm_id": 9, "command": "ls"})",
                          R"({"slurm_id": 9, "ended": {"id": 9, "state": "COMPLETED"}})",
                          R"({"slurm_id": 7, "ended": {"id": 8, "state": "COMPLETED"}})",
                          R"({"slurm_id": 7, "ended": {"id": 7}})",
                          R"({"slurm_id": 7, "ended": {"id": 7, "state": "X", "exit_code": 900}})"}) {
    Result<std::vector<SlurmRecord>> records = parse_slurm_records(good + bad + "\n", "/h/slurm-jobs.jsonl");
    ASSERT_FALSE(records.ok()) << bad;
    EXPECT_THAT(records.error().message, HasSubstr("/h/slurm-jobs.jsonl line 2: ")) << bad;
  }
}

// --- gpupool's view ---

TEST(SlurmJobsTest, AStatusTakesTheRecordsSpecAndSlurmsFacts) {
  SlurmJob pending = in_state("PENDING", "Dependency");
  pending.start_time = 5000;  // Slurm's expectation, not a fact
  Result<SlurmJobStatus> queued = slurm_job_status(record_of(7), pending, "ann");
  ASSERT_TRUE(queued.ok()) << queued.error().message;
  EXPECT_TRUE(queued->known);
  EXPECT_EQ(queued->job.id, 7u);
  EXPECT_EQ(queued->job.state, JobState::Queued);
  EXPECT_EQ(queued->job.reason, "waiting for slurm:3");
  EXPECT_EQ(queued->job.start_time, std::nullopt);
  EXPECT_EQ(queued->job.spec.gpus.count, 2u);
  EXPECT_EQ(queued->job.owner.user, "ann");
  EXPECT_EQ(queued->job.stdout_path, "/w/gpupool-7.out");

  SlurmJob running = in_state("RUNNING");
  running.start_time = 1001;
  running.end_time = 1061;  // the time limit's end, not a fact
  Result<SlurmJobStatus> started = slurm_job_status(record_of(7), running, "ann");
  ASSERT_TRUE(started.ok());
  EXPECT_EQ(started->job.start_time, 1001.0);
  EXPECT_EQ(started->job.end_time, std::nullopt);
  EXPECT_EQ(started->job.exit_code, std::nullopt);

  SlurmJob failed = in_state("FAILED", "NonZeroExitCode");
  failed.start_time = 1001;
  failed.end_time = 1002;
  failed.exit_code = 3;
  failed.user = "bob";
  Result<SlurmJobStatus> ended = slurm_job_status(record_of(7), failed, "ann");
  ASSERT_TRUE(ended.ok());
  EXPECT_EQ(ended->job.state, JobState::Failed);
  EXPECT_EQ(ended->job.exit_code, 3);
  EXPECT_EQ(ended->job.end_time, 1002.0);
  EXPECT_EQ(ended->job.owner.user, "bob");

  Result<SlurmJobStatus> forgotten = slurm_job_status(record_of(7), std::nullopt, "ann");
  ASSERT_TRUE(forgotten.ok());
  EXPECT_FALSE(forgotten->known);
  EXPECT_EQ(forgotten->job.reason, "Slurm has forgotten it");
  EXPECT_EQ(forgotten->job.submit_time, 1000.5);
  EXPECT_FALSE(slurm_job_status(record_of(7), in_state("DANCING"), "ann").ok());
}

TEST(SlurmJobsTest, ASlurmJobsJsonRoundTrips) {
  SlurmJob job = in_state("TIMEOUT", "TimeLimit");
  job.exit_code = 143;
  job.signal = 15;
  job.start_time = 10;
  job.tres = "gres:gpu:2";
  Result<SlurmJob> back = slurm_job_from_json(slurm_job_to_json(job));
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(slurm_job_to_json(*back), slurm_job_to_json(job));
  EXPECT_EQ(slurm_job_to_json(job)["submit_time"], nullptr);
}

}  // namespace
}  // namespace gpupool
