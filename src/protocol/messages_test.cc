#include "protocol/messages.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <set>
#include <tuple>
#include <type_traits>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <rapidcheck/gtest.h>

#include "jobs/private_data.h"

namespace gpupool::protocol {
namespace {

JobSpec full_spec() {
  JobSpec spec;
  spec.name = "train";
  spec.argv = {"python", "train.py", "--epochs=3"};
  spec.environment = {"HOME=/home/alice", "PATH=/usr/bin:/bin"};
  spec.cwd = "/home/alice/proj";
  spec.umask = 027;
  spec.gpus.count = 2;
  spec.gpus.slice_mib = 20480;
  spec.gpus.sm_percent = 25;
  spec.priority = -5;
  spec.after = {3, 4};
  spec.retries = 2;
  spec.time_limit_s = 7200;
  return spec;
}

Job full_job() {
  Job job;
  job.id = 7;
  job.spec = full_spec();
  job.owner.uid = 1000;
  job.owner.user = "alice";
  job.state = JobState::Failed;
  job.reason = "exited with status 1";
  job.attempts = 3;
  job.submit_time = 1712345678.25;
  job.start_time = 1712345680.5;
  job.end_time = 1712349280;
  job.gpus = {2, 3};
  job.gpu_uuids = {"GPU-aaaa", "GPU-bbbb"};
  job.exit_code = 1;
  job.pid = 4242;
  job.stdout_path = "/var/lib/gpupool/logs/7.out";
  job.stderr_path = "/var/lib/gpupool/logs/7.err";
  return job;
}

// Encodes a message, parses the line and encodes the result again: both lines must agree and
// the parse must give the same type. Returns what was parsed.
template <typename T>
T through_the_wire(const T& message) {
  constexpr bool kIsRequest = std::is_constructible_v<Request, T>;
  using Message = std::conditional_t<kIsRequest, Request, Response>;
  const std::string line = encode(Message(message));
  Result<Message> parsed = [&] {
    if constexpr (kIsRequest) {
      return parse_request(line);
    } else {
      return parse_response(line);
    }
  }();
  if (!parsed) {
    ADD_FAILURE() << parsed.error().message << "\n  in " << line;
    return T{};
  }
  EXPECT_EQ(encode(*parsed), line);
  if (!std::holds_alternative<T>(*parsed)) {
    ADD_FAILURE() << "parsed as another message: " << line;
    return T{};
  }
  return std::get<T>(*parsed);
}

template <typename T>
T parsed_request(std::string_view line) {
  auto request = parse_request(line);
  if (!request) {
    ADD_FAILURE() << request.error().message << "\n  in " << line;
    return T{};
  }
  if (!std::holds_alternative<T>(*request)) {
    ADD_FAILURE() << "parsed as another request: " << line;
    return T{};
  }
  return std::get<T>(*request);
}

template <typename T>
T parsed_response(std::string_view line) {
  auto response = parse_response(line);
  if (!response) {
    ADD_FAILURE() << response.error().message << "\n  in " << line;
    return T{};
  }
  if (!std::holds_alternative<T>(*response)) {
    ADD_FAILURE() << "parsed as another response: " << line;
    return T{};
  }
  return std::get<T>(*response);
}

// Every field that job JSON carries (gid, groups and pid_start_ticks stay in the daemon).
auto carried_fields(const Job& job) {
  const JobSpec& spec = job.spec;
  return std::tie(job.id, spec.name, spec.argv, spec.environment, spec.cwd, spec.umask, spec.gpus.count,
                  spec.gpus.slice_mib, spec.priority, spec.after, spec.retries, spec.time_limit_s, spec.kind,
                  job.owner.uid, job.owner.user, job.state, job.reason, job.attempts, job.submit_time,
                  job.start_time, job.end_time, job.gpus, job.gpu_uuids, job.exit_code, job.signal, job.pid,
                  job.stdout_path, job.stderr_path, job.wait_reason, job.expected_start, job.suspended_s);
}

void expect_same_spec(const JobSpec& actual, const JobSpec& expected) {
  EXPECT_EQ(actual.name, expected.name);
  EXPECT_EQ(actual.argv, expected.argv);
  EXPECT_EQ(actual.environment, expected.environment);
  EXPECT_EQ(actual.cwd, expected.cwd);
  EXPECT_EQ(actual.umask, expected.umask);
  EXPECT_EQ(actual.gpus.count, expected.gpus.count);
  EXPECT_EQ(actual.gpus.slice_mib, expected.gpus.slice_mib);
  EXPECT_EQ(actual.gpus.sm_percent, expected.gpus.sm_percent);
  EXPECT_EQ(actual.gpus.mig, expected.gpus.mig);
  EXPECT_EQ(actual.priority, expected.priority);
  EXPECT_EQ(actual.after, expected.after);
  EXPECT_EQ(actual.retries, expected.retries);
  EXPECT_EQ(actual.time_limit_s, expected.time_limit_s);
  EXPECT_EQ(actual.kind, expected.kind);
}

// --- hello ---

TEST(ProtocolHelloTest, HasTheDocumentedShapeAndRoundTrips) {
  Hello hello{kVersion, "gpupool 0.1.0", ""};
  const std::string line = encode(hello);
  EXPECT_EQ(line, R"({"hello":"gpupool","protocol":3,"software":"gpupool 0.1.0","user":""})");
  auto parsed = parse_hello(line);
  ASSERT_TRUE(parsed.ok()) << parsed.error().message;
  EXPECT_EQ(parsed->protocol, 3);
  EXPECT_EQ(parsed->software, "gpupool 0.1.0");
  EXPECT_EQ(parsed->user, "");

  auto daemon = parse_hello(encode(Hello{kVersion, "gpupoold 0.1.0", "alice"}));
  ASSERT_TRUE(daemon.ok()) << daemon.error().message;
  EXPECT_EQ(daemon->software, "gpupoold 0.1.0");
  EXPECT_EQ(daemon->user, "alice");
}

TEST(ProtocolHelloTest, OnlyTheGreetingAndVersionAreRequired) {
  auto hello = parse_hello(R"({"hello":"gpupool","protocol":1,"future":{"x":1}})");
  ASSERT_TRUE(hello.ok()) << hello.error().message;
  EXPECT_EQ(hello->software, "");
  EXPECT_EQ(hello->user, "");
}

TEST(ProtocolHelloTest, AnyVersionParsesSoThatTheDaemonCanNameIt) {
  auto hello = parse_hello(R"({"hello":"gpupool","protocol":7,"software":"gpupool 9.0"})");
  ASSERT_TRUE(hello.ok()) << hello.error().message;
  EXPECT_EQ(hello->protocol, 7);
}

TEST(ProtocolHelloTest, ARefusalIsTheDaemonsMessage) {
  auto hello = parse_hello(encode(Response(ErrorResponse{"gpupoold speaks protocol 1, not 2"})));
  ASSERT_FALSE(hello.ok());
  EXPECT_EQ(hello.error().message, "gpupoold speaks protocol 1, not 2");
}

TEST(ProtocolHelloTest, BadHellos) {
  const std::pair<std::string, std::string> cases[] = {
      {R"({"protocol":1})", "bad hello: 'hello' is missing"},
      {R"({"hello":"other","protocol":1})", "bad hello: 'hello' must be \"gpupool\""},
      {R"({"hello":"gpupool"})", "bad hello: 'protocol' is missing"},
      {R"({"hello":"gpupool","protocol":0})", "bad hello: 'protocol' must be a whole number of at least 1"},
      {R"({"hello":"gpupool","protocol":"1"})", "bad hello: 'protocol' must be a whole number of at least 1"},
      {R"({"hello":"gpupool","protocol":1,"user":7})", "bad hello: 'user' must be a string"},
      {R"({"ok":true})", "bad hello: 'hello' is missing"},
      {"[]", "bad hello: not a JSON object"},
  };
  for (const auto& [line, message] : cases) {
    auto hello = parse_hello(line);
    ASSERT_FALSE(hello.ok()) << line;
    EXPECT_EQ(hello.error().message, message) << line;
  }
}

// --- requests ---

TEST(ProtocolRequestTest, SubmitWithEveryField) {
  const std::string line = encode(Request(SubmitRequest{full_spec()}));
  EXPECT_EQ(line,
            R"({"job":{"after":[3,4],"command":["python","train.py","--epochs=3"],"cwd":"/home/alice/proj",)"
            R"("environment":["HOME=/home/alice","PATH=/usr/bin:/bin"],"gpu_count":2,"kind":"batch",)"
            R"("mem_mib":20480,"name":"train","priority":-5,"retries":2,"sm_percent":25,"time_limit_s":7200.0,"umask":23},)"
            R"("op":"submit"})");
  expect_same_spec(through_the_wire(SubmitRequest{full_spec()}).spec, full_spec());
}

TEST(ProtocolRequestTest, SubmitForAMigDevice) {
  JobSpec spec = full_spec();
  spec.gpus = GpuRequest{};
  spec.gpus.mig = MigRequest{"", 40960};
  const std::string line = encode(Request(SubmitRequest{spec}));
  EXPECT_NE(line.find(R"("mig_min_mib":40960,"mig_profile":"")"), std::string::npos) << line;
  EXPECT_NE(line.find(R"("mem_mib":null)"), std::string::npos) << line;
  EXPECT_EQ(through_the_wire(SubmitRequest{spec}).spec.gpus.mig, spec.gpus.mig);
  auto profile = parsed_request<SubmitRequest>(R"({"op":"submit","job":{"command":["true"],"cwd":"/","mig_profile":"1c.3g.40gb"}})");
  EXPECT_EQ(profile.spec.gpus.mig, (MigRequest{"1c.3g.40gb", 0}));
  EXPECT_FALSE(through_the_wire(SubmitRequest{full_spec()}).spec.gpus.mig);
}

TEST(ProtocolRequestTest, MinimalSubmitTakesTheDefaults) {
  auto submit = parsed_request<SubmitRequest>(R"({"op":"submit","job":{"command":["true"],"cwd":"/"}})");
  JobSpec expected;
  expected.argv = {"true"};
  expected.cwd = "/";
  expect_same_spec(submit.spec, expected);
  EXPECT_EQ(submit.spec.umask, 022u);
  EXPECT_EQ(submit.spec.kind, JobKind::Batch);
  expect_same_spec(through_the_wire(SubmitRequest{expected}).spec, expected);
}

TEST(ProtocolRequestTest, SubmitArray) {
  SubmitRequest array{full_spec(), false, ArraySpec{{0, 4, 8}, 2}};
  std::string line = encode(Request(array));
  EXPECT_NE(line.find(R"("array":[0,4,8],"array_limit":2)"), std::string::npos) << line;
  SubmitRequest parsed = through_the_wire(array);
  ASSERT_TRUE(parsed.array);
  EXPECT_EQ(parsed.array->indices, (std::vector<unsigned>{0, 4, 8}));
  EXPECT_EQ(parsed.array->limit, 2u);
  EXPECT_FALSE(through_the_wire(SubmitRequest{full_spec()}).array);
  const std::pair<std::string, std::string> cases[] = {
      {R"("array":[])", "bad request: 'array' must have 1 to 10000 entries"},
      {R"("array":[3,1])", "bad request: 'array' must be in ascending order, each index once"},
      {R"("array":[1,1])", "bad request: 'array' must be in ascending order, each index once"},
      {R"("array":[-1])", "bad request: 'array[0]' must be a whole number from 0 to 999999"},
      {R"("array":[1],"array_limit":0)", "bad request: 'array_limit' must be a whole number from 1 to 999999"},
  };
  for (const auto& [fields, message] : cases) {
    auto bad = parse_request(R"({"op":"submit","job":{"command":["true"],"cwd":"/"},)" + fields + "}");
    ASSERT_FALSE(bad.ok()) << fields;
    EXPECT_EQ(bad.error().message, message);
  }
}

TEST(ProtocolRequestTest, SubmitHeld) {
  SubmitRequest held{full_spec(), true};
  EXPECT_NE(encode(Request(held)).find(R"("hold":true)"), std::string::npos);
  EXPECT_TRUE(through_the_wire(held).hold);
  EXPECT_FALSE(through_the_wire(SubmitRequest{full_spec()}).hold);
  auto bad = parse_request(R"({"op":"submit","hold":1,"job":{"command":["true"],"cwd":"/"}})");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message, "bad request: 'hold' must be true or false");
}

TEST(ProtocolRequestTest, SubmitToken) {
  SubmitRequest tokened{full_spec(), false, std::nullopt, "0f3a-Z_9"};
  EXPECT_NE(encode(Request(tokened)).find(R"("token":"0f3a-Z_9")"), std::string::npos);
  EXPECT_EQ(through_the_wire(tokened).token, std::optional<std::string>("0f3a-Z_9"));
  EXPECT_FALSE(through_the_wire(SubmitRequest{full_spec()}).token);
  for (const std::string& token : std::vector<std::string>{R"("")", R"("a b")", R"("\u001b[31m")", "\"" + std::string(65, 'a') + "\""}) {
    auto bad = parse_request(R"({"op":"submit","token":)" + token + R"(,"job":{"command":["true"],"cwd":"/"}})");
    ASSERT_FALSE(bad.ok()) << token;
    EXPECT_EQ(bad.error().message, "bad request: 'token' must be 1 to 64 letters, digits, '-' or '_'") << token;
  }
}

TEST(ProtocolRequestTest, Jobs) {
  EXPECT_EQ(encode(Request(JobsRequest{true, "alice", JobState::Running, 4000, 50, std::nullopt})),
            R"({"after_id":4000,"all":true,"limit":50,"op":"jobs","state":"running","user":"alice"})");
  auto full = through_the_wire(JobsRequest{true, "alice", JobState::Running, 4000, 50, std::nullopt});
  EXPECT_TRUE(full.all);
  EXPECT_EQ(full.user, "alice");
  EXPECT_EQ(full.state, JobState::Running);
  EXPECT_EQ(full.after_id, 4000u);
  EXPECT_EQ(full.limit, 50u);

  EXPECT_EQ(encode(Request(JobsRequest{})), R"({"all":false,"limit":1000,"op":"jobs","state":null,"user":null})");
  // An older client sends neither: it gets the first page.
  auto minimal = parsed_request<JobsRequest>(R"({"op":"jobs"})");
  EXPECT_FALSE(minimal.all);
  EXPECT_FALSE(minimal.user);
  EXPECT_FALSE(minimal.state);
  EXPECT_EQ(minimal.after_id, 0u);
  EXPECT_EQ(minimal.limit, kMaxJobsPage);
  through_the_wire(JobsRequest{});
  EXPECT_EQ(through_the_wire(JobsRequest{false, {}, {}, 18446744073709551615u, 1, std::nullopt}).after_id,
            18446744073709551615u);
  JobsRequest since{true, "alice", {}, 0, 10, 1764930000.5};
  EXPECT_EQ(encode(Request(since)),
            R"({"all":true,"limit":10,"op":"jobs","state":null,"submitted_since":1764930000.5,"user":"alice"})");
  EXPECT_EQ(through_the_wire(since).submitted_since, 1764930000.5);
  auto bad = parse_request(R"({"op":"jobs","submitted_since":"yesterday"})");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("submitted_since"), std::string::npos) << bad.error().message;
}

TEST(ProtocolRequestTest, ShowAndLogs) {
  EXPECT_EQ(encode(Request(ShowRequest{12})), R"({"id":12,"op":"show"})");
  EXPECT_EQ(through_the_wire(ShowRequest{12}).id, 12u);
  EXPECT_EQ(encode(Request(LogsRequest{13})), R"({"id":13,"op":"logs"})");
  EXPECT_EQ(through_the_wire(LogsRequest{13}).id, 13u);
  EXPECT_FALSE(through_the_wire(LogsRequest{13}).open);
  EXPECT_EQ(encode(Request(LogsRequest{13, LogStream::Stderr})), R"({"id":13,"op":"logs","open":"stderr"})");
  EXPECT_EQ(through_the_wire(LogsRequest{13, LogStream::Stderr}).open, LogStream::Stderr);
  EXPECT_EQ(through_the_wire(LogsRequest{13, LogStream::Stdout}).open, LogStream::Stdout);
}

TEST(ProtocolRequestTest, CancelHoldRelease) {
  EXPECT_EQ(encode(Request(JobActionRequest{JobAction::Cancel, {3, 4}})), R"({"ids":[3,4],"op":"cancel"})");
  for (JobAction action : {JobAction::Cancel, JobAction::Hold, JobAction::Release}) {
    auto parsed = through_the_wire(JobActionRequest{action, {3, 18446744073709551615u}});
    EXPECT_EQ(parsed.action, action);
    EXPECT_EQ(parsed.ids, (std::vector<JobId>{3, 18446744073709551615u}));
  }
  EXPECT_EQ(parsed_request<JobActionRequest>(R"({"op":"hold","ids":[5]})").action, JobAction::Hold);
  EXPECT_EQ(parsed_request<JobActionRequest>(R"({"op":"release","ids":[5]})").action, JobAction::Release);
}

TEST(ProtocolRequestTest, Wait) {
  EXPECT_EQ(encode(Request(WaitRequest{{9}})), R"({"ids":[9],"op":"wait"})");
  EXPECT_EQ(through_the_wire(WaitRequest{{9, 10}}).ids, (std::vector<JobId>{9, 10}));
}

TEST(ProtocolRequestTest, DrainResumeStatus) {
  EXPECT_EQ(encode(Request(AdminRequest{AdminAction::Drain, "", {}})), R"({"op":"drain"})");
  EXPECT_EQ(encode(Request(AdminRequest{AdminAction::Resume, "", {}})), R"({"op":"resume"})");
  EXPECT_EQ(through_the_wire(AdminRequest{AdminAction::Drain, "", {}}).action, AdminAction::Drain);
  EXPECT_EQ(through_the_wire(AdminRequest{AdminAction::Resume, "", {}}).action, AdminAction::Resume);
  EXPECT_EQ(encode(Request(AdminRequest{AdminAction::Drain, "swap GPU 3", {}})), R"({"op":"drain","reason":"swap GPU 3"})");
  EXPECT_EQ(through_the_wire(AdminRequest{AdminAction::Drain, "swap GPU 3", {}}).reason, "swap GPU 3");
  auto long_reason = parse_request(nlohmann::json{{"op", "drain"}, {"reason", std::string(201, 'x')}}.dump());
  ASSERT_FALSE(long_reason.ok());
  EXPECT_EQ(long_reason.error().message, "bad request: 'reason' is longer than 200 bytes");
  AdminRequest one_gpu{AdminAction::Drain, "swap", {3}};
  EXPECT_EQ(encode(Request(one_gpu)), R"({"gpus":[3],"op":"drain","reason":"swap"})");
  EXPECT_EQ(through_the_wire(one_gpu).gpus, std::vector<unsigned>{3});
  EXPECT_EQ(through_the_wire(AdminRequest{AdminAction::Resume, "", {1, 2}}).gpus, (std::vector<unsigned>{1, 2}));
  EXPECT_EQ(encode(Request(StatusRequest{})), R"({"op":"status"})");
  through_the_wire(StatusRequest{});
}

TEST(ProtocolRequestTest, Lease) {
  LeaseRequest lease;
  lease.spec = full_spec();
  lease.spec.kind = JobKind::Interactive;
  lease.spec.gpus.allowed = {0, 1, 2};
  lease.spec.gpus.excluded = {7};
  lease.stops_the_clock = true;
  const LeaseRequest parsed = through_the_wire(lease);
  EXPECT_TRUE(parsed.stops_the_clock);
  expect_same_spec(parsed.spec, lease.spec);
  EXPECT_EQ(parsed.spec.gpus.allowed, lease.spec.gpus.allowed);
  EXPECT_EQ(parsed.spec.gpus.excluded, lease.spec.gpus.excluded);

  // The command of an interactive job is only shown, so it may be empty.
  auto minimal = parsed_request<LeaseRequest>(R"({"op":"lease","job":{"cwd":"/tmp"}})");
  EXPECT_EQ(minimal.spec.kind, JobKind::Interactive);
  EXPECT_TRUE(minimal.spec.argv.empty());
  EXPECT_TRUE(minimal.spec.gpus.allowed.empty());
  EXPECT_TRUE(minimal.spec.gpus.excluded.empty());
  EXPECT_FALSE(minimal.stops_the_clock);  // a client that does not say so is never sent the signals
  through_the_wire(minimal);
}

TEST(ProtocolRequestTest, Finished) {
  EXPECT_EQ(encode(Request(FinishedRequest{0, std::nullopt, false})),
            R"({"exit_code":0,"op":"finished","signal":null,"timed_out":false})");
  auto killed = through_the_wire(FinishedRequest{137, 9, true});
  EXPECT_EQ(killed.exit_code, 137);
  EXPECT_EQ(killed.signal, 9);
  EXPECT_TRUE(killed.timed_out);
  auto minimal = parsed_request<FinishedRequest>(R"({"op":"finished","exit_code":3})");
  EXPECT_EQ(minimal.exit_code, 3);
  EXPECT_FALSE(minimal.signal);
  EXPECT_FALSE(minimal.timed_out);
}

TEST(ProtocolRequestTest, Events) {
  EventsRequest request;
  request.after = 41;
  request.since = 1700000000.5;
  request.filter = {.job = 12, .user = "alice", .kinds = {EventKind::JobFailed, EventKind::GpuQuarantined}};
  request.limit = 20;
  request.latest = true;
  request.wait = true;
  EventsRequest read = through_the_wire(request);
  EXPECT_EQ(read.after, 41u);
  EXPECT_EQ(read.since, 1700000000.5);
  EXPECT_EQ(read.filter.job, JobId{12});
  EXPECT_EQ(read.filter.user, "alice");
  EXPECT_EQ(read.filter.kinds, request.filter.kinds);
  EXPECT_EQ(read.limit, 20u);
  EXPECT_TRUE(read.latest);
  EXPECT_TRUE(read.wait);
  EventsRequest plain = parsed_request<EventsRequest>(R"({"op":"events"})");
  EXPECT_EQ(plain.after, 0u);
  EXPECT_EQ(plain.limit, 100u);
  EXPECT_FALSE(plain.wait);
  EXPECT_TRUE(plain.filter.kinds.empty());
  auto bad_kind = parse_request(R"({"op":"events","kinds":["job_failed","job_exploded"]})");
  ASSERT_FALSE(bad_kind.ok());
  EXPECT_NE(bad_kind.error().message.find("'kinds[1]': unknown event 'job_exploded'"), std::string::npos)
      << bad_kind.error().message;
  EXPECT_FALSE(parse_request(R"({"op":"events","limit":1001})").ok());
  EXPECT_FALSE(parse_request(R"({"op":"events","limit":0})").ok());
}

TEST(ProtocolResponseTest, EventsCarryEveryField) {
  Event quarantined;
  quarantined.seq = 7;
  quarantined.time = 1700000000.25;
  quarantined.kind = EventKind::GpuQuarantined;
  quarantined.gpus = {2};
  quarantined.detail = "XID 79 (the GPU fell off the bus)";
  quarantined.jobs = {12};
  quarantined.users = {"alice"};
  Event withheld;
  withheld.seq = 8;
  withheld.time = 1700000001;
  withheld.kind = EventKind::JobFailed;
  withheld.job = 12;
  withheld.user = "alice";
  withheld.gpus = {2};
  withheld.withheld = true;
  EventsResponse response{{quarantined, withheld}, true, 8};
  EventsResponse read = through_the_wire(response);
  ASSERT_EQ(read.events.size(), 2u);
  EXPECT_TRUE(read.more);
  EXPECT_EQ(read.last, 8u);
  const Event& first = read.events[0];
  EXPECT_EQ(first.seq, 7u);
  EXPECT_EQ(first.kind, EventKind::GpuQuarantined);
  EXPECT_EQ(first.job, JobId{0});
  EXPECT_EQ(first.detail, quarantined.detail);
  EXPECT_EQ(first.jobs, std::vector<JobId>{12});
  EXPECT_EQ(first.users, std::vector<std::string>{"alice"});
  EXPECT_TRUE(read.events[1].withheld);
  nlohmann::json shown = event_to_json(withheld);
  EXPECT_EQ(shown["message"], "job 12 (alice) failed on GPU 2");
  EXPECT_EQ(shown["private"], true);
  EXPECT_TRUE(event_to_json(quarantined)["job"].is_null());
}

TEST(ProtocolRequestTest, UnknownFieldsAreIgnored) {
  auto submit = parsed_request<SubmitRequest>(
      R"({"op":"submit","since":2,"job":{"command":["x"],"cwd":"/","gpu_model":"H200","id":99}})");
  EXPECT_EQ(submit.spec.argv, std::vector<std::string>{"x"});
  parsed_request<StatusRequest>(R"({"op":"status","verbose":true})");
}

TEST(ProtocolRequestTest, NullIsTheSameAsAbsent) {
  auto submit = parsed_request<SubmitRequest>(
      R"({"op":"submit","job":{"command":["x"],"cwd":"/","name":null,"umask":null,"gpu_count":null,)"
      R"("mem_mib":null,"environment":null,"after":null,"time_limit_s":null,"kind":null}})");
  JobSpec expected;
  expected.argv = {"x"};
  expected.cwd = "/";
  expect_same_spec(submit.spec, expected);
}

TEST(ProtocolRequestTest, EveryValidationErrorNamesTheField) {
  const std::string submit = R"({"op":"submit","job":{"command":["x"],"cwd":"/",)";
  const std::string lease = R"({"op":"lease","job":{"cwd":"/",)";
  const std::pair<std::string, std::string> cases[] = {
      {"[1]", "not a JSON object"},
      {submit + R"("time_limit_s":1e400}})", "not JSON (number overflow parsing '1e400')"},
      {"{}", "'op' is missing"},
      {R"({"op":3})", "'op' must be a string"},
      {R"({"op":"frobnicate"})", "unknown op 'frobnicate'"},
      {R"({"op":"two\nlines"})", "unknown op 'two\\nlines'"},
      {R"({"op":"submit"})", "'job' is missing"},
      {R"({"op":"submit","job":[]})", "'job' must be an object"},
      {R"({"op":"submit","job":{"command":["x"]}})", "'cwd' is missing"},
      {submit + R"("gpu_count":0}})", "'gpu_count' must be a whole number from 1 to 1024"},
      {submit + R"("gpu_count":1025}})", "'gpu_count' must be a whole number from 1 to 1024"},
      {submit + R"("gpu_count":1.5}})", "'gpu_count' must be a whole number from 1 to 1024"},
      {submit + R"("gpu_count":"2"}})", "'gpu_count' must be a whole number from 1 to 1024"},
      {submit + R"("gpu_count":-1}})", "'gpu_count' must be a whole number from 1 to 1024"},
      {submit + R"("retries":101}})", "'retries' must be a whole number from 0 to 100"},
      {submit + R"("time_limit_s":0}})", "'time_limit_s' must be a positive number of seconds"},
      {submit + R"("time_limit_s":-60}})", "'time_limit_s' must be a positive number of seconds"},
      {submit + R"("time_limit_s":"1h"}})", "'time_limit_s' must be a positive number of seconds"},
      {submit + R"("priority":1001}})", "'priority' must be a whole number from -1000 to 1000"},
      {submit + R"("priority":-1001}})", "'priority' must be a whole number from -1000 to 1000"},
      {submit + R"("umask":512}})", "'umask' must be a whole number from 0 to 511"},
      {submit + R"("mem_mib":0}})", "'mem_mib' must be a whole number of at least 1"},
      {submit + R"("mem_mib":1024,"sm_percent":0}})", "'sm_percent' must be a whole number from 1 to 100"},
      {submit + R"("mem_mib":1024,"sm_percent":101}})", "'sm_percent' must be a whole number from 1 to 100"},
      {submit + R"("sm_percent":50}})",
       "'sm_percent' needs 'mem_mib': a compute share is a share of a GPU that slices share"},
      {submit + R"("mig_profile":"1g.18gb","mem_mib":1024}})",
       "'mig_profile' asks for one MIG device: leave out 'mem_mib' and 'sm_percent', and 'gpu_count' 1"},
      {submit + R"("mig_profile":"1g.18gb","gpu_count":2}})",
       "'mig_profile' asks for one MIG device: leave out 'mem_mib' and 'sm_percent', and 'gpu_count' 1"},
      {submit + R"("mig_profile":"1g 18gb"}})", "'mig_profile' must be a MIG profile such as 1g.18gb (or \"\" for any)"},
      {submit + R"("mig_profile":"\u001b[2J"}})", "'mig_profile' must be a MIG profile such as 1g.18gb (or \"\" for any)"},
      {submit + R"("mig_profile":7}})", "'mig_profile' must be a string"},
      {submit + R"("mig_min_mib":1024}})", "'mig_min_mib' needs 'mig_profile' (\"\" for any MIG device)"},
      {submit + R"("mig_profile":"","mig_min_mib":-1}})", "'mig_min_mib' must be a whole number of at least 0"},
      {submit + R"("after":[1,0]}})", "'after[1]' must be a whole number of at least 1"},
      {submit + R"("after":5}})", "'after' must be a list"},
      {submit + R"("name":"a\u0000b"}})", "'name' must not contain a NUL character"},
      {submit + R"("name":["a"]}})", "'name' must be a string"},
      {submit + R"("environment":["HOME=/x","PATH"]}})", "'environment[1]' must have the form NAME=value"},
      {submit + R"("kind":"interactive"}})", "'kind' must be batch in this request"},
      {submit + R"("kind":"daemon"}})", "'kind' must be batch or interactive"},
      {R"({"op":"submit","job":{"command":[],"cwd":"/"}})", "'command' must not be empty for a batch job"},
      {R"({"op":"submit","job":{"cwd":"/"}})", "'command' must not be empty for a batch job"},
      {R"({"op":"submit","job":{"command":["x",3],"cwd":"/"}})", "'command[1]' must be a string"},
      {R"({"op":"submit","job":{"command":["x"],"cwd":"home/alice"}})", "'cwd' must be an absolute path"},
      {R"({"op":"submit","job":{"command":["x"],"cwd":""}})", "'cwd' must be an absolute path"},
      {lease + R"("kind":"batch"}})", "'kind' must be interactive in this request"},
      {lease + R"("gpu_count":2000}})", "'gpu_count' must be a whole number from 1 to 1024"},
      {lease + R"("kind":"interactive"},"allowed":[1024]})",
       "'allowed[0]' must be a whole number from 0 to 1023"},
      {lease + R"("kind":"interactive"},"excluded":[-1]})",
       "'excluded[0]' must be a whole number from 0 to 1023"},
      {R"({"op":"jobs","all":"yes"})", "'all' must be true or false"},
      {R"({"op":"jobs","user":7})", "'user' must be a string"},
      {R"({"op":"jobs","state":"sleeping"})",
       "'state' must be queued, held, running, suspended, done, failed or cancelled"},
      {R"({"op":"jobs","limit":0})", "'limit' must be a whole number from 1 to 1000"},
      {R"({"op":"jobs","limit":1001})", "'limit' must be a whole number from 1 to 1000"},
      {R"({"op":"jobs","limit":"10"})", "'limit' must be a whole number from 1 to 1000"},
      {R"({"op":"jobs","after_id":-1})", "'after_id' must be a whole number of at least 0"},
      {R"({"op":"jobs","after_id":1.5})", "'after_id' must be a whole number of at least 0"},
      {R"({"op":"logs","id":3,"open":"stdin"})", "'open' must be stdout or stderr"},
      {R"({"op":"logs","id":3,"open":true})", "'open' must be stdout or stderr"},
      {R"({"op":"show"})", "'id' is missing"},
      {R"({"op":"show","id":0})", "'id' must be a whole number of at least 1"},
      {R"({"op":"logs","id":-3})", "'id' must be a whole number of at least 1"},
      {R"({"op":"logs","id":18446744073709551616})", "'id' must be a whole number of at least 1"},
      {R"({"op":"cancel"})", "'ids' is missing"},
      {R"({"op":"cancel","ids":[]})", "'ids' must name at least one job"},
      {R"({"op":"hold","ids":"3"})", "'ids' must be a list"},
      {R"({"op":"release","ids":[3,0]})", "'ids[1]' must be a whole number of at least 1"},
      {R"({"op":"wait","ids":[]})", "'ids' must name at least one job"},
      {R"({"op":"finished"})", "'exit_code' is missing"},
      {R"({"op":"finished","exit_code":256})", "'exit_code' must be a whole number from 0 to 255"},
      {R"({"op":"finished","exit_code":-1})", "'exit_code' must be a whole number from 0 to 255"},
      {R"({"op":"finished","exit_code":0,"signal":0})", "'signal' must be a whole number from 1 to 64"},
      {R"({"op":"finished","exit_code":0,"signal":65})", "'signal' must be a whole number from 1 to 64"},
  };
  for (const auto& [line, message] : cases) {
    auto request = parse_request(line);
    ASSERT_FALSE(request.ok()) << line;
    EXPECT_EQ(request.error().message, "bad request: " + message) << line;
  }
}

TEST(ProtocolRequestTest, MalformedJsonIsOneLine) {
  for (const char* line : {R"({"op":)", "", "op=status", R"({"op":"status"} {})", "{\"op\":\"st\nx\"}"}) {
    auto request = parse_request(line);
    ASSERT_FALSE(request.ok()) << line;
    EXPECT_TRUE(request.error().message.starts_with("bad request: not JSON (parse error at "))
        << request.error().message;
    EXPECT_TRUE(request.error().message.ends_with(")")) << request.error().message;
    EXPECT_EQ(request.error().message.find('\n'), std::string::npos) << request.error().message;
  }
}

TEST(ProtocolRequestTest, ASyntaxErrorInALongTokenKeepsTheErrorShort) {
  auto request = parse_request(R"({"op":")" + std::string(5000, 'x') + "\x01\"}");
  ASSERT_FALSE(request.ok());
  EXPECT_TRUE(request.error().message.starts_with("bad request: not JSON (parse error at "))
      << request.error().message;
  EXPECT_LT(request.error().message.size(), 300u) << request.error().message;
}

TEST(ProtocolRequestTest, ListsAndLinesHaveLimits) {
  std::string many = R"({"op":"submit","job":{"command":["x"],"cwd":"/","environment":[)";
  for (size_t i = 0; i <= 100'000; ++i) many += i == 0 ? R"("A=1")" : R"(,"A=1")";
  many += "]}}";
  ASSERT_LE(many.size(), kMaxMessageBytes);
  auto request = parse_request(many);
  ASSERT_FALSE(request.ok());
  EXPECT_EQ(request.error().message, "bad request: 'environment' must have at most 100000 entries");

  std::string huge = R"({"op":"status","pad":")" + std::string(kMaxMessageBytes, 'x') + R"("})";
  auto oversized = parse_request(huge);
  ASSERT_FALSE(oversized.ok());
  EXPECT_EQ(
      oversized.error().message,
      fmt::format("bad request: the message has {} bytes, more than the limit of 1048576", huge.size()));
}

TEST(ProtocolRequestTest, StringsThatAreNotUtf8AreRepairedNotFatal) {
  JobSpec spec;
  spec.argv = {"echo", "caf\xe9"};  // Latin-1
  spec.cwd = "/";
  auto parsed = parse_request(encode(Request(SubmitRequest{spec})));
  ASSERT_TRUE(parsed.ok()) << parsed.error().message;
  EXPECT_EQ(std::get<SubmitRequest>(*parsed).spec.argv[1], "caf\xef\xbf\xbd");  // U+FFFD
}

// --- responses ---

TEST(ProtocolResponseTest, Error) {
  EXPECT_EQ(encode(Response(ErrorResponse{"no such job: 5"})), R"({"error":"no such job: 5","ok":false})");
  EXPECT_EQ(through_the_wire(ErrorResponse{"no such job: 5"}).message, "no such job: 5");
}

TEST(ProtocolResponseTest, Submit) {
  EXPECT_EQ(encode(Response(SubmitResponse{42})), R"({"id":42,"ok":true})");
  EXPECT_EQ(through_the_wire(SubmitResponse{42}).id, 42u);
  EXPECT_EQ(through_the_wire(SubmitResponse{42}).tasks, std::nullopt);
  EXPECT_EQ(encode(Response(SubmitResponse{120, 100u})), R"({"id":120,"ok":true,"tasks":100})");
  EXPECT_EQ(through_the_wire(SubmitResponse{120, 100u}).tasks, 100u);
}

TEST(ProtocolResponseTest, ArrayTasksInJobs) {
  Job task;
  task.id = 7;
  task.spec.argv = {"true"};
  task.spec.cwd = "/";
  task.array = ArrayTask{5, 2, 8};
  nlohmann::json shown = job_to_json(task);
  EXPECT_EQ(shown["array_id"], 5);
  EXPECT_EQ(shown["array_index"], 2);
  EXPECT_EQ(shown["array_limit"], 8);
  EXPECT_EQ(through_the_wire(JobsResponse{{task}}).jobs.at(0).array, task.array);
  task.array.reset();
  EXPECT_FALSE(job_to_json(task).contains("array_id"));  // a job of no array reads as before
}

TEST(ProtocolResponseTest, AWithheldJobLeavesOutWhatItRunsAndWhere) {
  Job job = full_job();
  withhold_details(job);
  nlohmann::json shown = job_to_json(job);
  EXPECT_EQ(shown["private"], true);
  for (const char* key : {"name", "command", "environment", "cwd", "umask", "stdout", "stderr", "pid"}) {
    EXPECT_FALSE(shown.contains(key)) << key;
  }
  EXPECT_EQ(shown["user"], full_job().owner.user);
  EXPECT_EQ(shown["gpu_count"], full_job().spec.gpus.count);
  Job parsed = through_the_wire(JobsResponse{{job}}).jobs.at(0);
  EXPECT_TRUE(parsed.details_withheld);
  EXPECT_EQ(parsed.spec.kind, full_job().spec.kind);
  EXPECT_EQ(parsed.gpus, full_job().gpus);
  EXPECT_FALSE(job_to_json(full_job()).contains("private"));  // an own job reads as before
}

TEST(ProtocolResponseTest, OnlyAWithheldJobMayComeWithoutItsCommandAndDirectory) {
  auto parsed = parse_response(R"({"jobs":[{"id":3,"state":"queued","user":"bob"}],"ok":true})");
  ASSERT_FALSE(parsed.ok());
  EXPECT_NE(parsed.error().message.find("'cwd' is missing"), std::string::npos) << parsed.error().message;
}

TEST(ProtocolResponseTest, JobsWithFullAndMinimalJobs) {
  Job minimal;
  minimal.id = 1;
  minimal.spec.argv = {"true"};
  minimal.spec.cwd = "/";
  auto parsed = through_the_wire(JobsResponse{{full_job(), minimal}});
  ASSERT_EQ(parsed.jobs.size(), 2u);
  EXPECT_TRUE(carried_fields(parsed.jobs[0]) == carried_fields(full_job()));
  EXPECT_TRUE(carried_fields(parsed.jobs[1]) == carried_fields(minimal));
  EXPECT_EQ(through_the_wire(JobsResponse{}).jobs.size(), 0u);
  EXPECT_EQ(encode(Response(JobsResponse{})), R"({"jobs":[],"ok":true})");
  EXPECT_FALSE(through_the_wire(JobsResponse{}).more);
  EXPECT_FALSE(through_the_wire(JobsResponse{}).descriptors);

  Job waiting = minimal;
  waiting.wait_reason = WaitReason::Reservation;
  waiting.expected_start = 1764950400.5;
  auto waiting_parsed = through_the_wire(JobsResponse{{waiting}});
  EXPECT_TRUE(carried_fields(waiting_parsed.jobs.at(0)) == carried_fields(waiting));
  Job running = minimal;
  running.usage = JobUsage{1.5, 42.0, 1764950000.0, 31949, GpuEfficiency{0.5, 0.75, 0.125, 40960}};
  auto usage = through_the_wire(JobsResponse{{running}}).jobs.at(0).usage;
  ASSERT_TRUE(usage);
  EXPECT_EQ(usage->gpu_hours, 1.5);
  EXPECT_EQ(usage->mean_utilization, 42.0);
  EXPECT_EQ(usage->idle_since, 1764950000.0);
  EXPECT_EQ(usage->efficiency, (GpuEfficiency{0.5, 0.75, 0.125, 40960}));
  EXPECT_FALSE(through_the_wire(JobsResponse{{minimal}}).jobs.at(0).usage);

  // A report carries each user's and job's efficiency; unknown figures stay unknown.
  ReportResponse report;
  report.users.push_back(UserUsageLine{"ana", 2, 3.0, 50.0, GpuEfficiency{1.5, 0.5, std::nullopt, std::nullopt}});
  report.jobs.push_back(JobUsageLine{7, "ana", "train", 3.0, 50.0, 1, 2, false, false, GpuEfficiency{}});
  report.jobs.back().efficiency.peak_memory_mib = 1024;
  auto report_parsed = through_the_wire(report);
  EXPECT_EQ(report_parsed.users.at(0).efficiency, report.users.at(0).efficiency);
  EXPECT_EQ(report_parsed.jobs.at(0).efficiency, report.jobs.at(0).efficiency);
  EXPECT_EQ(parse_response(R"({"ok":true,"report":{"users":[{"user":"a","gpu_hours":1,"energy_kwh":-1}]}})")
                .error()
                .message,
            "bad response: 'energy_kwh' must be a number of at least 0");

  auto sparse = parsed_response<JobsResponse>(
      R"({"ok":true,"jobs":[{"id":3,"state":"queued","command":["x"],"cwd":"/"}]})");
  ASSERT_EQ(sparse.jobs.size(), 1u);
  EXPECT_EQ(sparse.jobs[0].id, 3u);
  EXPECT_EQ(sparse.jobs[0].spec.gpus.count, 1u);
  EXPECT_FALSE(sparse.jobs[0].start_time);
  EXPECT_FALSE(sparse.jobs[0].wait_reason);
  EXPECT_FALSE(sparse.jobs[0].expected_start);
  EXPECT_EQ(sparse.jobs[0].owner.user, "");
}

TEST(ProtocolResponseTest, JobsPageAndLogDescriptor) {
  JobsResponse page{{full_job()}, true, std::nullopt};
  EXPECT_NE(encode(Response(page)).find(R"("more":true)"), std::string::npos);
  EXPECT_TRUE(through_the_wire(page).more);
  EXPECT_EQ(through_the_wire(page).jobs.size(), 1u);

  EXPECT_EQ(encode(Response(JobsResponse{{}, false, 0})), R"({"descriptors":0,"jobs":[],"ok":true})");
  EXPECT_EQ(through_the_wire(JobsResponse{{}, false, 0}).descriptors, 0u);
  EXPECT_EQ(through_the_wire(JobsResponse{{full_job()}, false, 1}).descriptors, 1u);
}

TEST(ProtocolResponseTest, EncodedSizeIsWhatAJobAddsToAnAnswer) {
  Job minimal;
  minimal.id = 1;
  minimal.spec.argv = {"true"};
  minimal.spec.cwd = "/";
  size_t empty = encode(Response(JobsResponse{})).size();
  size_t two = encode(Response(JobsResponse{{full_job(), minimal}})).size();
  // n jobs have n - 1 commas between them.
  EXPECT_EQ(empty + encoded_size(full_job()) + encoded_size(minimal) - 1, two);
}

TEST(ProtocolResponseTest, ActionOutcomes) {
  JobActionResponse response{{{3, std::nullopt, JobState::Cancelled}, {4, "no such job", std::nullopt}}};
  EXPECT_EQ(encode(Response(response)),
            R"({"ok":true,"outcomes":[{"id":3,"state":"cancelled"},{"error":"no such job","id":4}]})");
  auto parsed = through_the_wire(response);
  ASSERT_EQ(parsed.outcomes.size(), 2u);
  EXPECT_EQ(parsed.outcomes[0].id, 3u);
  EXPECT_FALSE(parsed.outcomes[0].error);
  EXPECT_EQ(parsed.outcomes[0].state, JobState::Cancelled);
  EXPECT_EQ(parsed.outcomes[1].error, "no such job");
  EXPECT_FALSE(parsed.outcomes[1].state);
  through_the_wire(JobActionResponse{{{5, "already finished", JobState::Done}}});
}

TEST(ProtocolResponseTest, Status) {
  StatusResponse status{"gpupoold 0.1.0", 812, true, "root", 1764945000.0, "swap GPU 3",
                        {{3, "admin", 1764945100.0, "fan"}}, {{5, "", 1764945200.0, "XID 48"}},
                        "hgx-h200", 8, 3, 1, 2, 40, std::nullopt, "mps"};
  EXPECT_EQ(encode(Response(status)),
            R"({"ok":true,"status":{"drain_reason":"swap GPU 3","drained":true,"drained_at":1764945000.0,)"
            R"("drained_by":"root","drained_gpus":[{"at":1764945100.0,"by":"admin","index":3,"reason":"fan"}],)"
            R"("gpus":8,"held":1,"machine":"hgx-h200","pid":812,)"
            R"("quarantined_gpus":[{"at":1764945200.0,"by":"","index":5,"reason":"XID 48"}],)"
            R"("queued":3,"running":2,"samples":40,"slice_enforcement":"mps","software":"gpupoold 0.1.0"}})");
  auto parsed = through_the_wire(status);
  EXPECT_EQ(parsed.slice_enforcement, "mps");
  ASSERT_EQ(parsed.quarantined_gpus.size(), 1u);
  EXPECT_EQ(parsed.quarantined_gpus[0].index, 5u);
  EXPECT_EQ(parsed.quarantined_gpus[0].reason, "XID 48");
  ASSERT_EQ(parsed.drained_gpus.size(), 1u);
  EXPECT_EQ(parsed.drained_gpus[0].index, 3u);
  EXPECT_EQ(parsed.drained_gpus[0].by, "admin");
  EXPECT_EQ(parsed.drained_gpus[0].at, 1764945100.0);
  EXPECT_EQ(parsed.drained_gpus[0].reason, "fan");
  EXPECT_EQ(parsed.drained_by, "root");
  EXPECT_EQ(parsed.drained_at, 1764945000.0);
  EXPECT_EQ(parsed.drain_reason, "swap GPU 3");
  EXPECT_EQ(parsed.software, "gpupoold 0.1.0");
  EXPECT_EQ(parsed.pid, 812);
  EXPECT_TRUE(parsed.drained);
  EXPECT_EQ(parsed.machine, "hgx-h200");
  EXPECT_EQ(parsed.gpus, 8u);
  EXPECT_EQ(parsed.queued, 3u);
  EXPECT_EQ(parsed.held, 1u);
  EXPECT_EQ(parsed.running, 2u);
  EXPECT_EQ(parsed.samples, 40u);
  auto minimal = parsed_response<StatusResponse>(R"({"ok":true,"status":{}})");
  EXPECT_FALSE(minimal.drained);
  EXPECT_FALSE(minimal.drained_at);
  EXPECT_TRUE(minimal.drained_gpus.empty());
  EXPECT_EQ(minimal.gpus, 0u);
  EXPECT_EQ(minimal.samples, 0u);
  EXPECT_FALSE(minimal.state_space);
  status.state_space = StateSpace{1 << 20, 512u << 20, 2};
  auto space = through_the_wire(status).state_space;
  ASSERT_TRUE(space);
  EXPECT_EQ(space->free_bytes, 1u << 20);
  EXPECT_EQ(space->reserve_bytes, 512u << 20);
  EXPECT_EQ(space->unsaved_jobs, 2u);
}

TEST(ProtocolResponseTest, LeaseEvents) {
  EXPECT_EQ(encode(Response(LeaseQueued{11, "waiting for 2 GPUs"})),
            R"({"event":"queued","id":11,"ok":true,"reason":"waiting for 2 GPUs"})");
  auto queued = through_the_wire(LeaseQueued{11, "waiting for 2 GPUs"});
  EXPECT_EQ(queued.id, 11u);
  EXPECT_EQ(queued.reason, "waiting for 2 GPUs");
  EXPECT_FALSE(queued.expected_start);
  EXPECT_EQ(through_the_wire(LeaseQueued{11, "next in line", 1764950400.0}).expected_start, 1764950400.0);

  LeaseGranted granted{11, {2, 3}, {"GPU-aaaa", "GPU-bbbb"}, std::nullopt, {}, 2};
  EXPECT_EQ(encode(Response(granted)),
            R"({"descriptors":2,"environment":[],"event":"granted","gpus":[2,3],"id":11,"mem_mib":null,"ok":true,)"
            R"("uuids":["GPU-aaaa","GPU-bbbb"]})");
  auto parsed = through_the_wire(granted);
  EXPECT_EQ(parsed.gpus, granted.gpus);
  EXPECT_EQ(parsed.uuids, granted.uuids);
  EXPECT_FALSE(parsed.slice_mib);
  EXPECT_EQ(parsed.descriptors, 2u);
  EXPECT_EQ(through_the_wire(LeaseGranted{1, {0}, {"GPU-x"}, 10240, {}, 1}).slice_mib, 10240u);
  std::vector<std::string> mps = {"CUDA_MPS_PIPE_DIRECTORY=/run/gpupool/mps/GPU-x/pipe",
                                  "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=10240M"};
  EXPECT_EQ(through_the_wire(LeaseGranted{1, {0}, {"GPU-x"}, 10240, mps, 1}).environment, mps);

  auto minimal =
      parsed_response<LeaseGranted>(R"({"ok":true,"event":"granted","id":4,"gpus":[5],"uuids":["u"]})");
  EXPECT_EQ(minimal.descriptors, 0u);
  EXPECT_EQ(parsed_response<LeaseQueued>(R"({"ok":true,"event":"queued","id":4})").reason, "");
}

TEST(ProtocolResponseTest, Ack) {
  EXPECT_EQ(encode(Response(Ack{})), R"({"ok":true})");
  through_the_wire(Ack{});
  parsed_response<Ack>(R"({"ok":true,"note":"from a newer daemon"})");
}

TEST(ProtocolResponseTest, EveryValidationErrorNamesTheField) {
  const std::pair<std::string, std::string> cases[] = {
      {"{}", "'ok' is missing"},
      {R"({"ok":"yes"})", "'ok' must be true or false"},
      {R"({"ok":false})", "'error' is missing"},
      {R"({"ok":false,"error":""})", "'error' must not be empty"},
      {R"({"ok":true,"id":0})", "'id' must be a whole number of at least 1"},
      {R"({"ok":true,"event":"exploded","id":1})", "unknown event 'exploded'"},
      {R"({"ok":true,"event":"queued"})", "'id' is missing"},
      {R"({"ok":true,"event":"granted","id":1})", "'gpus' is missing"},
      {R"({"ok":true,"event":"granted","id":1,"gpus":[]})", "'gpus' must name at least one GPU"},
      {R"({"ok":true,"event":"granted","id":1,"gpus":[0,1],"uuids":["a"]})",
       "'uuids' must have one entry per GPU"},
      {R"({"ok":true,"event":"granted","id":1,"gpus":[0],"uuids":["a"],"descriptors":254})",
       "'descriptors' must be a whole number from 0 to 253"},
      {R"({"ok":true,"event":"granted","id":1,"gpus":[0],"uuids":["a"],"mem_mib":0})",
       "'mem_mib' must be a whole number of at least 1"},
      {R"({"ok":true,"outcomes":[{"state":"done"}]})", "'id' is missing"},
      {R"({"ok":true,"outcomes":[{"id":1,"error":5}]})", "'error' must be a string"},
      {R"({"ok":true,"outcomes":[3]})", "'outcomes[0]' must be an object"},
      {R"({"ok":true,"status":[]})", "'status' must be an object"},
      {R"({"ok":true,"status":{"queued":-1}})", "'queued' must be a whole number of at least 0"},
      {R"({"ok":true,"jobs":{}})", "'jobs' must be a list"},
      {R"({"ok":true,"jobs":[3]})", "'jobs[0]' must be an object"},
      {R"({"ok":true,"jobs":[],"more":1})", "'more' must be true or false"},
      {R"({"ok":true,"jobs":[],"descriptors":2})", "'descriptors' must be a whole number from 0 to 1"},
      {R"({"ok":true,"jobs":[{"id":1,"command":["x"],"cwd":"/"}]})", "'state' is missing"},
      {R"({"ok":true,"jobs":[{"id":1,"state":"done","command":["x"],"cwd":"/","submit_time":-1}]})",
       "'submit_time' must be a time in Unix seconds (a number of at least 0)"},
      {R"({"ok":true,"jobs":[{"id":1,"state":"done","command":["x"],"cwd":"/","pid":0}]})",
       "'pid' must be a whole number of at least 1"},
      {R"({"ok":true,"jobs":[{"id":1,"state":"done","command":["x"],"cwd":"/","uid":-1}]})",
       "'uid' must be a whole number of at least 0"},
      {R"({"ok":true,"jobs":[{"id":1,"state":"done","command":["x"],"cwd":"/","gpus":[1024]}]})",
       "'gpus[0]' must be a whole number from 0 to 1023"},
      {R"({"ok":true,"jobs":[{"id":1,"state":"queued","command":["x"],"cwd":"/","wait_reason":"Bored"}]})",
       "'wait_reason' must be Resources, Priority, Reservation, Dependency, Held, Drained, QuotaLimit or "
       "ArrayLimit"},
      {R"({"ok":true,"jobs":[{"id":1,"state":"running","command":["x"],"cwd":"/","usage":{"gpu_hours":-1}}]})",
       "'gpu_hours' must be a number of hours of at least 0"},
      {R"({"ok":true,"event":"queued","id":1,"expected_start":-5})",
       "'expected_start' must be a time in Unix seconds (a number of at least 0)"},
  };
  for (const auto& [line, message] : cases) {
    auto response = parse_response(line);
    ASSERT_FALSE(response.ok()) << line;
    EXPECT_EQ(response.error().message, "bad response: " + message) << line;
  }
}

// --- job JSON ---

TEST(ProtocolJobJsonTest, HasTheDocumentedFields) {
  const nlohmann::json object = job_to_json(full_job());
  std::set<std::string> keys;
  for (const auto& [key, value] : object.items()) keys.insert(key);
  const std::set<std::string> documented = {
      "id",          "name",         "state",    "reason",    "kind",     "user",      "uid",
      "gpu_count",   "mem_mib",      "sm_percent", "gpus",   "gpu_uuids", "priority", "after",     "retries",
      "attempts",    "time_limit_s", "command",  "cwd",       "umask",    "exit_code", "signal",
      "submit_time", "start_time",   "end_time", "pid",       "stdout",   "stderr",    "environment"};
  EXPECT_EQ(keys, documented);
  Job waiting = full_job();
  waiting.wait_reason = WaitReason::Priority;
  waiting.expected_start = 1764950400.0;
  EXPECT_EQ(job_to_json(waiting)["wait_reason"], "Priority");
  EXPECT_EQ(job_to_json(waiting)["expected_start"], 1764950400.0);

  Job without_environment = full_job();
  without_environment.spec.environment.clear();
  EXPECT_FALSE(job_to_json(without_environment).contains("environment"));
  EXPECT_TRUE(job_to_json(without_environment)["start_time"].is_number());
  EXPECT_TRUE(job_to_json(Job{})["start_time"].is_null());
}

TEST(ProtocolJobJsonTest, AJobMustBeAnObject) {
  auto job = job_from_json(nlohmann::json::array());
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.error().message, "a job must be a JSON object");
}

// Every JSON line in the specification is a valid message (or job) of its kind.
TEST(ProtocolDocumentationTest, EveryExampleParses) {
  std::ifstream in(GPUPOOL_TEST_DATA_DIR "/../../docs/protocol.md");
  ASSERT_TRUE(in);
  std::string line;
  bool in_json = false;
  size_t examples = 0;
  while (std::getline(in, line)) {
    const std::string text = line.substr(std::min(line.find_first_not_of(' '), line.size()));
    if (text.starts_with("```")) {
      in_json = text == "```json";
      continue;
    }
    if (!in_json) continue;
    ++examples;
    if (text.find(R"("hello":)") != std::string::npos) {
      auto hello = parse_hello(text);
      EXPECT_TRUE(hello.ok()) << hello.error().message << "\n  in " << text;
    } else if (text.find(R"("op":)") != std::string::npos) {
      auto request = parse_request(text);
      EXPECT_TRUE(request.ok()) << request.error().message << "\n  in " << text;
    } else if (text.find(R"("ok":)") != std::string::npos) {
      auto response = parse_response(text);
      EXPECT_TRUE(response.ok()) << response.error().message << "\n  in " << text;
    } else {
      auto job = job_from_json(nlohmann::json::parse(text));
      EXPECT_TRUE(job.ok()) << job.error().message << "\n  in " << text;
    }
  }
  EXPECT_GE(examples, 20u);
}

// Strings of ASCII, escapes and multi-byte UTF-8, never NUL.
rc::Gen<std::string> text() {
  return rc::gen::map(
      rc::gen::container<std::vector<std::string>>(rc::gen::element<std::string>(
          "a", "Z", "7", " ", "=", "/", "\"", "\\", "\n", "\t", "\x01", "\x7f", "é", "日本", "🙂")),
      [](const std::vector<std::string>& pieces) {
        std::string joined;
        for (const auto& piece : pieces) joined += piece;
        return joined;
      });
}

rc::Gen<double> seconds(double minimum) {
  return rc::gen::suchThat(rc::gen::arbitrary<double>(), [minimum](double value) {
    return std::isfinite(value) && (minimum > 0 ? value > 0 : value >= 0);
  });
}

template <typename T>
std::optional<T> sometimes(rc::Gen<T> generator) {
  if (!*rc::gen::arbitrary<bool>()) return std::nullopt;
  return *generator;
}

Job random_job() {
  using namespace rc;
  Job job;
  job.id = *gen::inRange<JobId>(1, std::numeric_limits<JobId>::max());
  JobSpec& spec = job.spec;
  spec.name = *text();
  spec.kind = *gen::element(JobKind::Batch, JobKind::Interactive);
  spec.argv = *gen::container<std::vector<std::string>>(text());
  if (spec.kind == JobKind::Batch && spec.argv.empty()) spec.argv.push_back(*text());
  spec.environment = *gen::container<std::vector<std::string>>(
      gen::map(gen::pair(text(), text()), [](const auto& pair) { return pair.first + "=" + pair.second; }));
  spec.cwd = "/" + *text();
  spec.umask = *gen::inRange<mode_t>(0, 0777 + 1);
  spec.gpus.count = *gen::inRange(1u, 1025u);
  spec.gpus.slice_mib = sometimes(gen::inRange<uint64_t>(1, std::numeric_limits<uint64_t>::max()));
  spec.priority = *gen::inRange(-1000, 1001);
  spec.after = *gen::container<std::vector<JobId>>(gen::inRange<JobId>(1, 1'000'000));
  spec.retries = *gen::inRange(0u, 101u);
  spec.time_limit_s = sometimes(seconds(1));
  job.owner.uid = *gen::arbitrary<uid_t>();
  job.owner.user = *text();
  job.state = *gen::element(JobState::Queued, JobState::Held, JobState::Running, JobState::Done,
                            JobState::Failed, JobState::Cancelled);
  job.reason = *text();
  job.attempts = *gen::arbitrary<unsigned>();
  job.submit_time = *seconds(0);
  job.start_time = sometimes(seconds(0));
  job.end_time = sometimes(seconds(0));
  job.gpus = *gen::container<std::vector<unsigned>>(gen::inRange(0u, 1024u));
  job.gpu_uuids = *gen::container<std::vector<std::string>>(text());
  job.exit_code = sometimes(gen::inRange(0, 256));
  job.signal = sometimes(gen::inRange(1, 65));
  job.pid = sometimes(gen::inRange<pid_t>(1, std::numeric_limits<pid_t>::max()));
  job.stdout_path = *text();
  job.stderr_path = *text();
  job.suspended_s = sometimes(seconds(1)).value_or(0);
  return job;
}

RC_GTEST_PROP(ProtocolJobJsonProperty, RandomJobsRoundTripExactly, ()) {
  const Job job = random_job();
  auto back = job_from_json(job_to_json(job));
  RC_ASSERT(back.ok());
  RC_ASSERT(carried_fields(*back) == carried_fields(job));
}

RC_GTEST_PROP(ProtocolJobJsonProperty, RandomJobsRoundTripThroughTheWire, ()) {
  const Job job = random_job();
  auto response = parse_response(encode(Response(JobsResponse{{job}})));
  RC_ASSERT(response.ok());
  const auto& jobs = std::get<JobsResponse>(*response).jobs;
  RC_ASSERT(jobs.size() == 1u);
  RC_ASSERT(carried_fields(jobs[0]) == carried_fields(job));
}

}  // namespace
}  // namespace gpupool::protocol
