#include "protocol/messages.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <functional>
#include <limits>
#include <type_traits>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/quote.h"

namespace gpupool::protocol {
namespace {

using nlohmann::json;

// Limits of what a message may ask for (docs/protocol.md).
constexpr size_t kMaxListEntries = 100'000;
constexpr unsigned kMaxGpus = 1024;  // gpu_count; GPU indices are below it
constexpr int kMaxPriority = 1000;
constexpr unsigned kMaxRetries = 100;
constexpr mode_t kMaxUmask = 0777;
constexpr int kMaxExitCode = 255;
constexpr int kMaxSignal = 64;             // SIGRTMAX on Linux
constexpr unsigned kMaxDescriptors = 253;  // SCM_MAX_FD: the most one sendmsg can carry
constexpr size_t kMaxDetailBytes = 200;    // of a JSON syntax error in an error line
constexpr size_t kMaxUserNameBytes = 256;  // of a user an events request asks about (Linux allows 32)

// --- reading ---

// Names a field in error lines: 'gpu_count', or one entry of a list field, 'ids[2]'.
struct Field {
  explicit Field(const char* field_key) : key(field_key) {}
  Field(const char* field_key, size_t entry) : key(field_key), index(entry) {}
  const char* key;
  std::optional<size_t> index;
};

std::string quoted(const Field& field) {
  return field.index ? fmt::format("'{}[{}]'", field.key, *field.index) : fmt::format("'{}'", field.key);
}

// A field's value; nullptr when it is absent or null, which both mean "not given".
const json* find(const json& object, const char* key) {
  auto it = object.find(key);
  return it == object.end() || it->is_null() ? nullptr : &*it;
}

Result<std::string> as_text(const json& value, const Field& field) {
  if (!value.is_string()) return fail("{} must be a string", quoted(field));
  const auto& text = value.get_ref<const std::string&>();
  if (text.find('\0') != std::string::npos) return fail("{} must not contain a NUL character", quoted(field));
  return text;
}

Result<std::string> as_absolute_path(const json& value, const Field& field) {
  TRY_ASSIGN(std::string path, as_text(value, field));
  if (!path.starts_with('/')) return fail("{} must be an absolute path", quoted(field));
  return path;
}

Result<std::string> as_assignment(const json& value, const Field& field) {
  TRY_ASSIGN(std::string entry, as_text(value, field));
  if (entry.find('=') == std::string::npos) return fail("{} must have the form NAME=value", quoted(field));
  return entry;
}

// A MIG profile as nvidia-smi names one ("1g.18gb", "1c.3g.71gb"; "" for any): short, and only
// the characters such names have, since it is shown to every user.
Result<std::string> as_mig_profile(const json& value, const Field& field) {
  TRY_ASSIGN(std::string profile, as_text(value, field));
  bool plain = std::ranges::all_of(profile, [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '+'; });
  if (profile.size() > 32 || !plain) return fail("{} must be a MIG profile such as 1g.18gb (or \"\" for any)", quoted(field));
  return profile;
}

Result<bool> as_flag(const json& value, const Field& field) {
  if (!value.is_boolean()) return fail("{} must be true or false", quoted(field));
  return value.get<bool>();
}

template <typename T>
Result<T> as_whole(const json& value, const Field& field, T min, T max) {
  static_assert(std::is_integral_v<T>);
  auto in_range = [&](auto number) {
    return std::cmp_greater_equal(number, min) && std::cmp_less_equal(number, max);
  };
  if (value.is_number_unsigned()) {
    auto number = value.get<uint64_t>();
    if (in_range(number)) return static_cast<T>(number);
  } else if (value.is_number_integer()) {
    auto number = value.get<int64_t>();
    if (in_range(number)) return static_cast<T>(number);
  }
  if (max == std::numeric_limits<T>::max())
    return fail("{} must be a whole number of at least {}", quoted(field), min);
  return fail("{} must be a whole number from {} to {}", quoted(field), min, max);
}

// A converter for as_whole with its range bound, to pass where a converter is expected.
template <typename T>
auto whole(T min, T max) {
  return [=](const json& value, const Field& field) { return as_whole<T>(value, field, min, max); };
}
template <typename T>
auto whole_from(T min) {
  return whole<T>(min, std::numeric_limits<T>::max());
}
const auto job_number = whole_from<JobId>(1);
const auto gpu_index = whole<unsigned>(0, kMaxGpus - 1);

Result<double> as_seconds(const json& value, const Field& field) {
  if (value.is_number() && std::isfinite(value.get<double>()) && value.get<double>() > 0)
    return value.get<double>();
  return fail("{} must be a positive number of seconds", quoted(field));
}

Result<double> as_time(const json& value, const Field& field) {
  if (value.is_number() && std::isfinite(value.get<double>()) && value.get<double>() >= 0)
    return value.get<double>();
  return fail("{} must be a time in Unix seconds (a number of at least 0)", quoted(field));
}

// Enums travel as their to_string names.
template <typename Enum, size_t N>
Result<Enum> as_name_of(const json& value, const Field& field, const std::array<Enum, N>& choices) {
  if (value.is_string()) {
    for (Enum choice : choices) {
      if (value.get_ref<const std::string&>() == to_string(choice)) return choice;
    }
  }
  std::string names;
  for (size_t i = 0; i < N; ++i)
    names += fmt::format("{}{}", i == 0 ? "" : i + 1 == N ? " or " : ", ", to_string(choices[i]));
  return fail("{} must be {}", quoted(field), names);
}

Result<JobState> as_state(const json& value, const Field& field) {
  return as_name_of(value, field,
                    std::array{JobState::Queued, JobState::Held, JobState::Running, JobState::Suspended,
                               JobState::Done, JobState::Failed, JobState::Cancelled});
}

Result<WaitReason> as_wait_reason(const json& value, const Field& field) {
  return as_name_of(value, field,
                    std::array{WaitReason::Resources, WaitReason::Priority, WaitReason::Reservation,
                               WaitReason::Dependency, WaitReason::Held, WaitReason::Drained,
                               WaitReason::QuotaLimit, WaitReason::ArrayLimit});
}

Result<JobKind> as_kind(const json& value, const Field& field) {
  return as_name_of(value, field, std::array{JobKind::Batch, JobKind::Interactive});
}

template <typename Convert>
using Converted = std::remove_cvref_t<
    decltype(std::declval<Convert>()(std::declval<const json&>(), std::declval<const Field&>()).value())>;

// A converter of a list whose entries `convert` reads.
template <typename Convert>
auto list_of(Convert convert) {
  return [convert](const json& value, const Field& field) -> Result<std::vector<Converted<Convert>>> {
    if (!value.is_array()) return fail("{} must be a list", quoted(field));
    if (value.size() > kMaxListEntries) {
      return fail("{} must have at most {} entries", quoted(field), kMaxListEntries);
    }
    std::vector<Converted<Convert>> entries;
    entries.reserve(value.size());
    for (size_t i = 0; i < value.size(); ++i) {
      TRY_ASSIGN(auto entry, convert(value[i], Field(field.key, i)));
      entries.push_back(std::move(entry));
    }
    return entries;
  };
}

template <typename Convert>
auto required(const json& object, const char* key, Convert convert) -> Result<Converted<Convert>> {
  const json* value = find(object, key);
  if (value == nullptr) return fail("'{}' is missing", key);
  return convert(*value, Field(key));
}

// Absent or null gives `fallback`.
template <typename T, typename Convert>
Result<T> defaulted(const json& object, const char* key, T fallback, Convert convert) {
  const json* value = find(object, key);
  if (value == nullptr) return fallback;
  TRY_ASSIGN(T converted, convert(*value, Field(key)));
  return converted;
}

// Absent or null gives nullopt.
template <typename Convert>
auto maybe(const json& object, const char* key, Convert convert)
    -> Result<std::optional<Converted<Convert>>> {
  return defaulted(object, key, std::optional<Converted<Convert>>(), convert);
}

Result<const json*> require_object(const json& value, const Field& field) {
  if (!value.is_object()) return fail("{} must be an object", quoted(field));
  return &value;
}

// --- writing ---

template <typename T>
json or_null(const std::optional<T>& value) {
  return value ? json(*value) : json(nullptr);
}

// One line: JSON escapes every control character, so the line holds no newline. Strings that
// are not UTF-8 (an environment in Latin-1) have their bad bytes replaced by U+FFFD rather
// than making the encoder fail.
std::string line_of(const json& message) {
  return message.dump(-1, ' ', false, json::error_handler_t::replace);
}

// --- job specs and jobs ---

// `withheld`: another user's job under private_data, without what it runs and where.
void add_spec_fields(const JobSpec& spec, json& object, bool withheld = false) {
  if (!withheld) {
    object["name"] = spec.name;
    object["command"] = spec.argv;
    if (!spec.environment.empty()) object["environment"] = spec.environment;
    object["cwd"] = spec.cwd;
    object["umask"] = spec.umask;
  }
  object["gpu_count"] = spec.gpus.count;
  object["mem_mib"] = or_null(spec.gpus.slice_mib);
  object["sm_percent"] = or_null(spec.gpus.sm_percent);
  if (spec.gpus.mig) {  // only a --mig job's: the others' messages stay as they were
    object["mig_profile"] = spec.gpus.mig->profile;
    object["mig_min_mib"] = spec.gpus.mig->min_memory_mib;
  }
  object["priority"] = spec.priority;
  object["after"] = spec.after;
  object["retries"] = spec.retries;
  object["time_limit_s"] = or_null(spec.time_limit_s);
  object["kind"] = to_string(spec.kind);
}

json spec_to_json(const JobSpec& spec) {
  json object = json::object();
  add_spec_fields(spec, object);
  return object;
}

Result<JobSpec> spec_from_json(const json& object, JobKind default_kind, bool withheld = false) {
  JobSpec spec;
  TRY_ASSIGN(spec.name, defaulted(object, "name", std::string(), as_text));
  TRY_ASSIGN(spec.argv, defaulted(object, "command", std::vector<std::string>(), list_of(as_text)));
  TRY_ASSIGN(spec.environment,
             defaulted(object, "environment", std::vector<std::string>(), list_of(as_assignment)));
  if (withheld) {
    TRY_ASSIGN(spec.kind, defaulted(object, "kind", default_kind, as_kind));
  } else {
    TRY_ASSIGN(spec.cwd, required(object, "cwd", as_absolute_path));
  }
  TRY_ASSIGN(spec.umask, defaulted(object, "umask", JobSpec().umask, whole<mode_t>(0, kMaxUmask)));
  TRY_ASSIGN(spec.gpus.count, defaulted(object, "gpu_count", 1u, whole<unsigned>(1, kMaxGpus)));
  TRY_ASSIGN(spec.gpus.slice_mib, maybe(object, "mem_mib", whole_from<uint64_t>(1)));
  TRY_ASSIGN(spec.gpus.sm_percent, maybe(object, "sm_percent", whole<unsigned>(1, 100)));
  if (spec.gpus.sm_percent && !spec.gpus.slice_mib) {
    return fail("'sm_percent' needs 'mem_mib': a compute share is a share of a GPU that slices share");
  }
  TRY_ASSIGN(std::optional<std::string> mig_profile, maybe(object, "mig_profile", as_mig_profile));
  TRY_ASSIGN(std::optional<uint64_t> mig_min_mib, maybe(object, "mig_min_mib", whole_from<uint64_t>(0)));
  if (mig_profile) {
    if (spec.gpus.slice_mib || spec.gpus.sm_percent || spec.gpus.count != 1) {
      return fail("'mig_profile' asks for one MIG device: leave out 'mem_mib' and 'sm_percent', and 'gpu_count' 1");
    }
    spec.gpus.mig = MigRequest{*mig_profile, mig_min_mib.value_or(0)};
  } else if (mig_min_mib) {
    return fail("'mig_min_mib' needs 'mig_profile' (\"\" for any MIG device)");
  }
  TRY_ASSIGN(spec.priority, defaulted(object, "priority", 0, whole<int>(-kMaxPriority, kMaxPriority)));
  TRY_ASSIGN(spec.after, defaulted(object, "after", std::vector<JobId>(), list_of(job_number)));
  TRY_ASSIGN(spec.retries, defaulted(object, "retries", 0u, whole<unsigned>(0, kMaxRetries)));
  TRY_ASSIGN(spec.time_limit_s, maybe(object, "time_limit_s", as_seconds));
  TRY_ASSIGN(spec.kind, defaulted(object, "kind", default_kind, as_kind));
  if (spec.kind == JobKind::Batch && spec.argv.empty() && !withheld)
    return fail("'command' must not be empty for a batch job");
  return spec;
}

// The spec of a submit (batch) or lease (interactive) request.
auto spec_of_kind(JobKind kind) {
  return [kind](const json& value, const Field& field) -> Result<JobSpec> {
    TRY(require_object(value, field));
    TRY_ASSIGN(JobKind given, defaulted(value, "kind", kind, as_kind));
    if (given != kind) return fail("'kind' must be {} in this request", to_string(kind));
    return spec_from_json(value, kind);
  };
}

Result<Suspension> as_suspension(const json& value, const Field& field) {
  TRY(require_object(value, field));
  Suspension suspension;
  TRY_ASSIGN(suspension.pids, defaulted(value, "pids", std::vector<pid_t>(), list_of(whole_from<pid_t>(1))));
  TRY_ASSIGN(suspension.by, defaulted(value, "by", std::string(), as_text));
  TRY_ASSIGN(suspension.since, defaulted(value, "since", 0.0, as_time));
  TRY_ASSIGN(suspension.host_mib, defaulted(value, "host_mib", uint64_t{0}, whole_from<uint64_t>(0)));
  TRY_ASSIGN(suspension.resume, defaulted(value, "resume", false, as_flag));
  return suspension;
}

Result<Job> as_job(const json& value, const Field& field) {
  TRY(require_object(value, field));
  return job_from_json(value);
}

// --- hello ---

json hello_json(const Hello& hello) {
  return {
      {"hello", "gpupool"}, {"protocol", hello.protocol}, {"software", hello.software}, {"user", hello.user}};
}

Result<Hello> hello_from_json(const json& object) {
  TRY_ASSIGN(std::string greeting, required(object, "hello", as_text));
  if (greeting != "gpupool") return fail("'hello' must be \"gpupool\"");
  Hello hello;
  TRY_ASSIGN(hello.protocol, required(object, "protocol", whole_from<int>(1)));
  TRY_ASSIGN(hello.software, defaulted(object, "software", std::string(), as_text));
  TRY_ASSIGN(hello.user, defaulted(object, "user", std::string(), as_text));
  return hello;
}

// --- requests ---

constexpr std::array<std::pair<JobAction, const char*>, 5> kJobActions = {{{JobAction::Cancel, "cancel"},
                                                                          {JobAction::Hold, "hold"},
                                                                          {JobAction::Release, "release"},
                                                                          {JobAction::Suspend, "suspend"},
                                                                          {JobAction::Resume, "resume_job"}}};
constexpr std::array<std::pair<AdminAction, const char*>, 2> kAdminActions = {
    {{AdminAction::Drain, "drain"}, {AdminAction::Resume, "resume"}}};
constexpr std::array<std::pair<LogStream, const char*>, 2> kLogStreams = {
    {{LogStream::Stdout, "stdout"}, {LogStream::Stderr, "stderr"}}};

template <typename Action, size_t N>
const char* name_of(Action action, const std::array<std::pair<Action, const char*>, N>& names) {
  for (const auto& [value, name] : names) {
    if (value == action) return name;
  }
  return "unknown";
}

Result<LogStream> as_log_stream(const json& value, const Field& field) {
  if (value.is_string()) {
    for (const auto& [stream, name] : kLogStreams) {
      if (value.get_ref<const std::string&>() == name) return stream;
    }
  }
  return fail("{} must be stdout or stderr", quoted(field));
}

// A submission token: 1 to 64 letters, digits, '-' and '_' (a UUID fits).
Result<std::string> as_submit_token(const json& value, const Field& field) {
  TRY_ASSIGN(std::string token, as_text(value, field));
  bool fits = !token.empty() && token.size() <= kMaxSubmitTokenBytes &&
              std::all_of(token.begin(), token.end(), [](char c) {
                return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
              });
  if (!fits) return fail("{} must be 1 to {} letters, digits, '-' or '_'", quoted(field), kMaxSubmitTokenBytes);
  return token;
}

json request_json(const SubmitRequest& request) {
  json object = {{"op", "submit"}, {"job", spec_to_json(request.spec)}};
  if (request.hold) object["hold"] = true;
  if (request.token) object["token"] = *request.token;
  if (request.array) {
    object["array"] = request.array->indices;
    if (request.array->limit > 0) object["array_limit"] = request.array->limit;
  }
  return object;
}
json request_json(const JobsRequest& request) {
  json object = {{"op", "jobs"},
                 {"all", request.all},
                 {"user", or_null(request.user)},
                 {"state", request.state ? json(to_string(*request.state)) : json(nullptr)},
                 {"limit", request.limit}};
  if (request.after_id > 0) object["after_id"] = request.after_id;
  if (request.submitted_since) object["submitted_since"] = *request.submitted_since;
  return object;
}
json request_json(const ShowRequest& request) { return {{"op", "show"}, {"id", request.id}}; }
json request_json(const JobActionRequest& request) {
  return {{"op", name_of(request.action, kJobActions)}, {"ids", request.ids}};
}
json request_json(const WaitRequest& request) { return {{"op", "wait"}, {"ids", request.ids}}; }
json request_json(const LogsRequest& request) {
  json object = {{"op", "logs"}, {"id", request.id}};
  if (request.open) object["open"] = name_of(*request.open, kLogStreams);
  return object;
}
json request_json(const AdminRequest& request) {
  json object = {{"op", name_of(request.action, kAdminActions)}};
  if (!request.reason.empty()) object["reason"] = request.reason;
  if (!request.gpus.empty()) object["gpus"] = request.gpus;
  if (request.suspend) object["suspend"] = true;
  return object;
}
json request_json(const StatusRequest&) { return {{"op", "status"}}; }
json request_json(const LeaseRequest& request) {
  json object = {{"op", "lease"},
                 {"job", spec_to_json(request.spec)},
                 {"allowed", request.spec.gpus.allowed},
                 {"excluded", request.spec.gpus.excluded}};
  if (request.stops_the_clock) object["stops_the_clock"] = true;  // version 3
  return object;
}
json request_json(const FinishedRequest& request) {
  return {{"op", "finished"},
          {"exit_code", request.exit_code},
          {"signal", or_null(request.signal)},
          {"timed_out", request.timed_out}};
}
json request_json(const ReportRequest& request) { return {{"op", "report"}, {"since", or_null(request.since)}}; }
json request_json(const EventsRequest& request) {
  json object = {{"op", "events"}, {"after", request.after}, {"limit", request.limit}};
  if (request.since) object["since"] = *request.since;
  if (request.filter.job) object["job"] = *request.filter.job;
  if (request.filter.user) object["user"] = *request.filter.user;
  if (!request.filter.kinds.empty()) {
    json kinds = json::array();
    for (EventKind kind : request.filter.kinds) kinds.push_back(to_string(kind));
    object["kinds"] = std::move(kinds);
  }
  if (request.latest) object["latest"] = true;
  if (request.wait) object["wait"] = true;
  return object;
}

Result<EventKind> as_event_kind(const json& value, const Field& field) {
  TRY_ASSIGN(std::string name, as_text(value, field));
  auto kind = parse_event_kind(name);
  if (!kind) return fail("{}: {}", quoted(field), kind.error().message);
  return *kind;
}

// At least one job: an empty list is a client's mistake, not a request for nothing.
Result<std::vector<JobId>> as_job_numbers(const json& value, const Field& field) {
  TRY_ASSIGN(std::vector<JobId> ids, list_of(job_number)(value, field));
  if (ids.empty()) return fail("{} must name at least one job", quoted(field));
  return ids;
}

// An array's indices: 1 to kMaxArrayTasks of them, ascending, each once.
Result<ArraySpec> as_array_indices(const json& value, const Field& field) {
  ArraySpec array;
  TRY_ASSIGN(array.indices, list_of(whole<unsigned>(0, kMaxArrayIndex))(value, field));
  if (array.indices.empty() || array.indices.size() > kMaxArrayTasks) {
    return fail("{} must have 1 to {} entries", quoted(field), kMaxArrayTasks);
  }
  if (std::adjacent_find(array.indices.begin(), array.indices.end(), std::greater_equal<>()) != array.indices.end()) {
    return fail("{} must be in ascending order, each index once", quoted(field));
  }
  return array;
}

Result<Request> request_from_json(const json& object) {
  TRY_ASSIGN(std::string op, required(object, "op", as_text));
  if (op == "submit") {
    TRY_ASSIGN(JobSpec spec, required(object, "job", spec_of_kind(JobKind::Batch)));
    TRY_ASSIGN(bool hold, defaulted(object, "hold", false, as_flag));
    TRY_ASSIGN(std::optional<ArraySpec> array, maybe(object, "array", as_array_indices));
    if (array) {
      TRY_ASSIGN(array->limit, defaulted(object, "array_limit", 0u, whole<unsigned>(1, kMaxArrayIndex)));
    }
    TRY_ASSIGN(std::optional<std::string> token, maybe(object, "token", as_submit_token));
    return Request(SubmitRequest{std::move(spec), hold, std::move(array), std::move(token)});
  }
  if (op == "jobs") {
    JobsRequest request;
    TRY_ASSIGN(request.all, defaulted(object, "all", false, as_flag));
    TRY_ASSIGN(request.user, maybe(object, "user", as_text));
    TRY_ASSIGN(request.state, maybe(object, "state", as_state));
    TRY_ASSIGN(request.after_id, defaulted(object, "after_id", JobId{0}, whole_from<JobId>(0)));
    TRY_ASSIGN(request.limit, defaulted(object, "limit", kMaxJobsPage, whole<unsigned>(1, kMaxJobsPage)));
    TRY_ASSIGN(request.submitted_since, maybe(object, "submitted_since", as_time));
    return Request(request);
  }
  if (op == "show") {
    TRY_ASSIGN(JobId id, required(object, "id", job_number));
    return Request(ShowRequest{id});
  }
  if (op == "logs") {
    LogsRequest request;
    TRY_ASSIGN(request.id, required(object, "id", job_number));
    TRY_ASSIGN(request.open, maybe(object, "open", as_log_stream));
    return Request(request);
  }
  for (const auto& [action, name] : kJobActions) {
    if (op != name) continue;
    TRY_ASSIGN(std::vector<JobId> ids, required(object, "ids", as_job_numbers));
    return Request(JobActionRequest{action, std::move(ids)});
  }
  if (op == "wait") {
    TRY_ASSIGN(std::vector<JobId> ids, required(object, "ids", as_job_numbers));
    return Request(WaitRequest{std::move(ids)});
  }
  for (const auto& [action, name] : kAdminActions) {
    if (op != name) continue;
    TRY_ASSIGN(std::string reason, defaulted(object, "reason", std::string(), as_text));
    if (reason.size() > kMaxReasonBytes) return fail("'reason' is longer than {} bytes", kMaxReasonBytes);
    TRY_ASSIGN(std::vector<unsigned> gpus, defaulted(object, "gpus", std::vector<unsigned>(), list_of(gpu_index)));
    TRY_ASSIGN(bool suspend, defaulted(object, "suspend", false, as_flag));
    if (suspend && action != AdminAction::Drain) return fail("'suspend' goes with drain only");
    return Request(AdminRequest{action, std::move(reason), std::move(gpus), suspend});
  }
  if (op == "status") return Request(StatusRequest{});
  if (op == "lease") {
    LeaseRequest request;
    TRY_ASSIGN(request.spec, required(object, "job", spec_of_kind(JobKind::Interactive)));
    TRY_ASSIGN(request.spec.gpus.allowed,
               defaulted(object, "allowed", std::vector<unsigned>(), list_of(gpu_index)));
    TRY_ASSIGN(request.spec.gpus.excluded,
               defaulted(object, "excluded", std::vector<unsigned>(), list_of(gpu_index)));
    TRY_ASSIGN(request.stops_the_clock, defaulted(object, "stops_the_clock", false, as_flag));
    return Request(std::move(request));
  }
  if (op == "finished") {
    FinishedRequest request;
    TRY_ASSIGN(request.exit_code, required(object, "exit_code", whole<int>(0, kMaxExitCode)));
    TRY_ASSIGN(request.signal, maybe(object, "signal", whole<int>(1, kMaxSignal)));
    TRY_ASSIGN(request.timed_out, defaulted(object, "timed_out", false, as_flag));
    return Request(request);
  }
  if (op == "report") {
    ReportRequest request;
    TRY_ASSIGN(request.since, maybe(object, "since", as_time));
    return Request(request);
  }
  if (op == "events") {
    EventsRequest request;
    TRY_ASSIGN(request.after, defaulted(object, "after", uint64_t{0}, whole_from<uint64_t>(0)));
    TRY_ASSIGN(request.since, maybe(object, "since", as_time));
    TRY_ASSIGN(request.filter.job, maybe(object, "job", job_number));
    TRY_ASSIGN(request.filter.user, maybe(object, "user", as_text));
    if (request.filter.user && request.filter.user->size() > kMaxUserNameBytes) {
      return fail("'user' is longer than {} bytes", kMaxUserNameBytes);
    }
    TRY_ASSIGN(std::vector<EventKind> kinds, defaulted(object, "kinds", std::vector<EventKind>(), list_of(as_event_kind)));
    for (EventKind kind : kinds) {
      if (std::ranges::find(request.filter.kinds, kind) == request.filter.kinds.end()) request.filter.kinds.push_back(kind);
    }
    TRY_ASSIGN(request.limit, defaulted(object, "limit", 100u, whole<unsigned>(1, kMaxEventsPage)));
    TRY_ASSIGN(request.latest, defaulted(object, "latest", false, as_flag));
    TRY_ASSIGN(request.wait, defaulted(object, "wait", false, as_flag));
    return Request(std::move(request));
  }
  return fail("unknown op {}", quote(op));
}

// --- responses ---

json outcome_json(const ActionOutcome& outcome) {
  json object = {{"id", outcome.id}};
  if (outcome.error) object["error"] = *outcome.error;
  if (outcome.state) object["state"] = to_string(*outcome.state);
  return object;
}

json response_json(const ErrorResponse& response) { return {{"ok", false}, {"error", response.message}}; }
json response_json(const SubmitResponse& response) {
  json object = {{"ok", true}, {"id", response.id}};
  if (response.tasks) object["tasks"] = *response.tasks;
  return object;
}
json response_json(const JobsResponse& response) {
  json jobs = json::array();
  for (const Job& job : response.jobs) jobs.push_back(job_to_json(job));
  json object = {{"ok", true}, {"jobs", std::move(jobs)}};
  if (response.more) object["more"] = true;
  if (response.descriptors) object["descriptors"] = *response.descriptors;
  return object;
}
json response_json(const JobActionResponse& response) {
  json outcomes = json::array();
  for (const ActionOutcome& outcome : response.outcomes) outcomes.push_back(outcome_json(outcome));
  return {{"ok", true}, {"outcomes", std::move(outcomes)}};
}
json drained_gpus_json(const std::vector<DrainedGpu>& gpus) {
  json list = json::array();
  for (const DrainedGpu& gpu : gpus) {
    list.push_back({{"index", gpu.index}, {"by", gpu.by}, {"at", gpu.at}, {"reason", gpu.reason}});
  }
  return list;
}
json response_json(const StatusResponse& response) {
  json status = {{"software", response.software},
                 {"pid", response.pid},
                 {"drained", response.drained},
                 {"drained_by", response.drained_by},
                 {"drained_at", response.drained_at ? json(*response.drained_at) : json(nullptr)},
                 {"drain_reason", response.drain_reason},
                 {"drained_gpus", drained_gpus_json(response.drained_gpus)},
                 {"quarantined_gpus", drained_gpus_json(response.quarantined_gpus)},
                 {"machine", response.machine},
                 {"gpus", response.gpus},
                 {"queued", response.queued},
                 {"held", response.held},
                 {"running", response.running},
                 {"samples", response.samples},
                 {"slice_enforcement", response.slice_enforcement}};
  if (const auto& space = response.state_space) {
    status["state_space"] = {{"free_bytes", space->free_bytes},
                             {"reserve_bytes", space->reserve_bytes},
                             {"unsaved_jobs", space->unsaved_jobs}};
  }
  return {{"ok", true}, {"status", std::move(status)}};
}
json response_json(const LeaseQueued& response) {
  json object = {{"ok", true}, {"event", "queued"}, {"id", response.id}, {"reason", response.reason}};
  if (response.expected_start) object["expected_start"] = *response.expected_start;
  return object;
}
json response_json(const LeaseGranted& response) {
  return {{"ok", true},
          {"event", "granted"},
          {"id", response.id},
          {"gpus", response.gpus},
          {"uuids", response.uuids},
          {"mem_mib", or_null(response.slice_mib)},
          {"environment", response.environment},
          {"descriptors", response.descriptors}};
}
json response_json(const Ack&) { return {{"ok", true}}; }
json response_json(const ReportResponse& response) {
  json users = json::array();
  for (const UserUsageLine& line : response.users) {
    json& user = users.emplace_back(json{{"user", line.user},
                                         {"jobs", line.jobs},
                                         {"gpu_hours", line.gpu_hours},
                                         {"mean_utilization", or_null(line.mean_utilization)}});
    put_efficiency(user, line.efficiency);
  }
  json jobs = json::array();
  for (const JobUsageLine& line : response.jobs) {
    json& job = jobs.emplace_back(json{{"id", line.id},
                                       {"user", line.user},
                                       {"name", line.name},
                                       {"gpu_hours", line.gpu_hours},
                                       {"mean_utilization", or_null(line.mean_utilization)},
                                       {"first_time", line.first_time},
                                       {"last_time", line.last_time},
                                       {"running", line.running},
                                       {"idle", line.idle}});
    put_efficiency(job, line.efficiency);
  }
  return {{"ok", true},
          {"report", {{"since", or_null(response.since)}, {"users", std::move(users)}, {"jobs", std::move(jobs)}}}};
}

json response_json(const EventsResponse& response) {
  json events = json::array();
  for (const Event& event : response.events) events.push_back(event_to_json(event));
  return {{"ok", true}, {"events", std::move(events)}, {"more", response.more}, {"last", response.last}};
}

Result<Event> as_event(const json& value, const Field& field) {
  TRY(require_object(value, field));
  Event event;
  TRY_ASSIGN(event.seq, required(value, "seq", whole_from<uint64_t>(1)));
  TRY_ASSIGN(event.time, required(value, "time", as_time));
  TRY_ASSIGN(event.kind, required(value, "kind", as_event_kind));
  TRY_ASSIGN(event.job, defaulted(value, "job", JobId{0}, job_number));
  TRY_ASSIGN(event.user, defaulted(value, "user", std::string(), as_text));
  TRY_ASSIGN(event.name, defaulted(value, "name", std::string(), as_text));
  TRY_ASSIGN(event.gpus, defaulted(value, "gpus", std::vector<unsigned>(), list_of(gpu_index)));
  TRY_ASSIGN(event.detail, defaulted(value, "detail", std::string(), as_text));
  TRY_ASSIGN(event.jobs, defaulted(value, "jobs", std::vector<JobId>(), list_of(job_number)));
  TRY_ASSIGN(event.users, defaulted(value, "users", std::vector<std::string>(), list_of(as_text)));
  TRY_ASSIGN(event.withheld, defaulted(value, "private", false, as_flag));
  return event;
}

Result<double> as_hours(const json& value, const Field& field) {
  if (value.is_number() && std::isfinite(value.get<double>()) && value.get<double>() >= 0)
    return value.get<double>();
  return fail("{} must be a number of hours of at least 0", quoted(field));
}

Result<double> as_amount(const json& value, const Field& field) {
  if (value.is_number() && std::isfinite(value.get<double>()) && value.get<double>() >= 0)
    return value.get<double>();
  return fail("{} must be a number of at least 0", quoted(field));
}

Result<GpuEfficiency> as_efficiency(const json& value) {
  GpuEfficiency efficiency;
  TRY_ASSIGN(efficiency.sm_active_gpu_hours, maybe(value, "sm_active_gpu_hours", as_hours));
  TRY_ASSIGN(efficiency.sm_efficiency, maybe(value, "sm_efficiency", as_amount));
  TRY_ASSIGN(efficiency.energy_kwh, maybe(value, "energy_kwh", as_amount));
  TRY_ASSIGN(efficiency.peak_memory_mib, maybe(value, "peak_memory_mib", whole_from<uint64_t>(0)));
  return efficiency;
}

Result<double> as_percent(const json& value, const Field& field) {
  if (value.is_number() && value.get<double>() >= 0 && value.get<double>() <= 100) return value.get<double>();
  return fail("{} must be a percentage from 0 to 100", quoted(field));
}

Result<UserUsageLine> as_user_usage(const json& value, const Field& field) {
  TRY(require_object(value, field));
  UserUsageLine line;
  TRY_ASSIGN(line.user, required(value, "user", as_text));
  TRY_ASSIGN(line.jobs, defaulted(value, "jobs", 0u, whole_from<unsigned>(0)));
  TRY_ASSIGN(line.gpu_hours, required(value, "gpu_hours", as_hours));
  TRY_ASSIGN(line.mean_utilization, maybe(value, "mean_utilization", as_percent));
  TRY_ASSIGN(line.efficiency, as_efficiency(value));
  return line;
}

Result<JobUsageLine> as_job_usage(const json& value, const Field& field) {
  TRY(require_object(value, field));
  JobUsageLine line;
  TRY_ASSIGN(line.id, required(value, "id", job_number));
  TRY_ASSIGN(line.user, required(value, "user", as_text));
  TRY_ASSIGN(line.name, defaulted(value, "name", std::string(), as_text));
  TRY_ASSIGN(line.gpu_hours, required(value, "gpu_hours", as_hours));
  TRY_ASSIGN(line.mean_utilization, maybe(value, "mean_utilization", as_percent));
  TRY_ASSIGN(line.first_time, defaulted(value, "first_time", 0.0, as_time));
  TRY_ASSIGN(line.last_time, defaulted(value, "last_time", 0.0, as_time));
  TRY_ASSIGN(line.running, defaulted(value, "running", false, as_flag));
  TRY_ASSIGN(line.idle, defaulted(value, "idle", false, as_flag));
  TRY_ASSIGN(line.efficiency, as_efficiency(value));
  return line;
}

Result<JobUsage> as_usage(const json& value, const Field& field) {
  TRY(require_object(value, field));
  JobUsage usage;
  TRY_ASSIGN(usage.gpu_hours, required(value, "gpu_hours", as_hours));
  TRY_ASSIGN(usage.mean_utilization, maybe(value, "mean_utilization", as_percent));
  TRY_ASSIGN(usage.idle_since, maybe(value, "idle_since", as_time));
  TRY_ASSIGN(usage.slice_used_mib, maybe(value, "slice_used_mib", whole_from<uint64_t>(0)));
  TRY_ASSIGN(usage.efficiency, as_efficiency(value));
  return usage;
}

Result<ReportResponse> as_report(const json& value, const Field& field) {
  TRY(require_object(value, field));
  ReportResponse report;
  TRY_ASSIGN(report.since, maybe(value, "since", as_time));
  TRY_ASSIGN(report.users, defaulted(value, "users", std::vector<UserUsageLine>(), list_of(as_user_usage)));
  TRY_ASSIGN(report.jobs, defaulted(value, "jobs", std::vector<JobUsageLine>(), list_of(as_job_usage)));
  return report;
}

Result<ActionOutcome> as_outcome(const json& value, const Field& field) {
  TRY(require_object(value, field));
  ActionOutcome outcome;
  TRY_ASSIGN(outcome.id, required(value, "id", job_number));
  TRY_ASSIGN(outcome.error, maybe(value, "error", as_text));
  TRY_ASSIGN(outcome.state, maybe(value, "state", as_state));
  return outcome;
}

Result<DrainedGpu> as_drained_gpu(const json& value, const Field& field) {
  TRY(require_object(value, field));
  DrainedGpu gpu;
  TRY_ASSIGN(gpu.index, required(value, "index", gpu_index));
  TRY_ASSIGN(gpu.by, defaulted(value, "by", std::string(), as_text));
  TRY_ASSIGN(gpu.at, defaulted(value, "at", 0.0, as_time));
  TRY_ASSIGN(gpu.reason, defaulted(value, "reason", std::string(), as_text));
  return gpu;
}

Result<StateSpace> as_state_space(const json& value, const Field& field) {
  TRY(require_object(value, field));
  const auto bytes = whole_from<uint64_t>(0);
  StateSpace space;
  TRY_ASSIGN(space.free_bytes, required(value, "free_bytes", bytes));
  TRY_ASSIGN(space.reserve_bytes, defaulted(value, "reserve_bytes", uint64_t{0}, bytes));
  TRY_ASSIGN(space.unsaved_jobs, defaulted(value, "unsaved_jobs", uint64_t{0}, bytes));
  return space;
}

Result<StatusResponse> as_status(const json& value, const Field& field) {
  TRY(require_object(value, field));
  StatusResponse status;
  const auto count = whole_from<unsigned>(0);
  TRY_ASSIGN(status.software, defaulted(value, "software", std::string(), as_text));
  TRY_ASSIGN(status.pid, defaulted(value, "pid", int64_t{0}, whole_from<int64_t>(0)));
  TRY_ASSIGN(status.drained, defaulted(value, "drained", false, as_flag));
  TRY_ASSIGN(status.drained_by, defaulted(value, "drained_by", std::string(), as_text));
  TRY_ASSIGN(status.drained_at, maybe(value, "drained_at", as_time));
  TRY_ASSIGN(status.drain_reason, defaulted(value, "drain_reason", std::string(), as_text));
  TRY_ASSIGN(status.drained_gpus,
             defaulted(value, "drained_gpus", std::vector<DrainedGpu>(), list_of(as_drained_gpu)));
  TRY_ASSIGN(status.quarantined_gpus,
             defaulted(value, "quarantined_gpus", std::vector<DrainedGpu>(), list_of(as_drained_gpu)));
  TRY_ASSIGN(status.machine, defaulted(value, "machine", std::string(), as_text));
  TRY_ASSIGN(status.gpus, defaulted(value, "gpus", 0u, count));
  TRY_ASSIGN(status.queued, defaulted(value, "queued", 0u, count));
  TRY_ASSIGN(status.held, defaulted(value, "held", 0u, count));
  TRY_ASSIGN(status.running, defaulted(value, "running", 0u, count));
  TRY_ASSIGN(status.samples, defaulted(value, "samples", uint64_t{0}, whole_from<uint64_t>(0)));
  TRY_ASSIGN(status.state_space, maybe(value, "state_space", as_state_space));
  TRY_ASSIGN(status.slice_enforcement, defaulted(value, "slice_enforcement", std::string(), as_text));
  return status;
}

Result<Response> lease_event_from_json(const json& object, const std::string& event) {
  if (event == "queued") {
    LeaseQueued queued;
    TRY_ASSIGN(queued.id, required(object, "id", job_number));
    TRY_ASSIGN(queued.reason, defaulted(object, "reason", std::string(), as_text));
    TRY_ASSIGN(queued.expected_start, maybe(object, "expected_start", as_time));
    return Response(std::move(queued));
  }
  if (event == "granted") {
    LeaseGranted granted;
    TRY_ASSIGN(granted.id, required(object, "id", job_number));
    TRY_ASSIGN(granted.gpus, required(object, "gpus", list_of(gpu_index)));
    if (granted.gpus.empty()) return fail("'gpus' must name at least one GPU");
    TRY_ASSIGN(granted.uuids, defaulted(object, "uuids", std::vector<std::string>(), list_of(as_text)));
    if (granted.uuids.size() != granted.gpus.size()) return fail("'uuids' must have one entry per GPU");
    TRY_ASSIGN(granted.slice_mib, maybe(object, "mem_mib", whole_from<uint64_t>(1)));
    TRY_ASSIGN(granted.environment,
               defaulted(object, "environment", std::vector<std::string>(), list_of(as_assignment)));
    TRY_ASSIGN(granted.descriptors,
               defaulted(object, "descriptors", 0u, whole<unsigned>(0, kMaxDescriptors)));
    return Response(std::move(granted));
  }
  return fail("unknown event {}", quote(event));
}

// A successful response's type is told by which field it has, checked in this order.
Result<Response> response_from_json(const json& object) {
  TRY_ASSIGN(bool ok, required(object, "ok", as_flag));
  if (!ok) {
    TRY_ASSIGN(std::string message, required(object, "error", as_text));
    if (message.empty()) return fail("'error' must not be empty");
    return Response(ErrorResponse{std::move(message)});
  }
  if (find(object, "event") != nullptr) {
    TRY_ASSIGN(std::string event, required(object, "event", as_text));
    return lease_event_from_json(object, event);
  }
  if (find(object, "events") != nullptr) {
    EventsResponse response;
    TRY_ASSIGN(response.events, required(object, "events", list_of(as_event)));
    TRY_ASSIGN(response.more, defaulted(object, "more", false, as_flag));
    TRY_ASSIGN(response.last, defaulted(object, "last", uint64_t{0}, whole_from<uint64_t>(0)));
    return Response(std::move(response));
  }
  if (find(object, "outcomes") != nullptr) {
    TRY_ASSIGN(std::vector<ActionOutcome> outcomes, required(object, "outcomes", list_of(as_outcome)));
    return Response(JobActionResponse{std::move(outcomes)});
  }
  if (find(object, "jobs") != nullptr) {
    JobsResponse response;
    TRY_ASSIGN(response.jobs, required(object, "jobs", list_of(as_job)));
    TRY_ASSIGN(response.more, defaulted(object, "more", false, as_flag));
    TRY_ASSIGN(response.descriptors, maybe(object, "descriptors", whole<unsigned>(0, 1)));
    return Response(std::move(response));
  }
  if (find(object, "status") != nullptr) {
    TRY_ASSIGN(StatusResponse status, required(object, "status", as_status));
    return Response(std::move(status));
  }
  if (find(object, "report") != nullptr) {
    TRY_ASSIGN(ReportResponse report, required(object, "report", as_report));
    return Response(std::move(report));
  }
  if (find(object, "id") != nullptr) {
    TRY_ASSIGN(JobId id, required(object, "id", job_number));
    TRY_ASSIGN(std::optional<unsigned> tasks, maybe(object, "tasks", whole<unsigned>(1, kMaxArrayTasks)));
    return Response(SubmitResponse{id, tasks});
  }
  return Response(Ack{});
}

// --- lines ---

// The one JSON object of a line; an error otherwise. nlohmann reports syntax errors by
// exception only: they are caught here, at the edge of the library.
Result<json> object_of_line(std::string_view line) {
  if (line.size() > kMaxMessageBytes) {
    return fail("the message has {} bytes, more than the limit of {}", line.size(), kMaxMessageBytes);
  }
  json value;
  try {
    value = json::parse(line);
  } catch (const json::exception& error) {  // a syntax error, or a number beyond a double's range
    std::string_view what = error.what();   // "[json.exception.parse_error.101] parse error at ..."
    size_t tag_end = what.find("] ");
    // The detail quotes the offending token, which may be most of the line.
    return fail(
        "not JSON ({})",
        printable(tag_end == std::string_view::npos ? what : what.substr(tag_end + 2), kMaxDetailBytes));
  }
  if (!value.is_object()) return fail("not a JSON object");
  return value;
}

// Parses a line with `from_json`, prefixing any error with what was being read.
template <typename T>
Result<T> parse_line(std::string_view line, const char* what, Result<T> (*from_json)(const json&)) {
  auto object = object_of_line(line);
  if (!object) return fail("bad {}: {}", what, object.error().message);
  auto message = from_json(*object);
  if (!message) return fail("bad {}: {}", what, message.error().message);
  return message;
}

}  // namespace

std::string encode(const Hello& hello) { return line_of(hello_json(hello)); }

Result<Hello> parse_hello(std::string_view line) {
  auto hello = parse_line(line, "hello", hello_from_json);
  if (!hello) {
    // A daemon that will not serve the client answers its hello with an error line: the
    // client shows that message as it is.
    auto refusal = parse_response(line);
    if (refusal && std::holds_alternative<ErrorResponse>(*refusal)) {
      return Error{std::get<ErrorResponse>(std::move(*refusal)).message};
    }
  }
  return hello;
}

std::string encode(const Request& request) {
  return line_of(std::visit([](const auto& alternative) { return request_json(alternative); }, request));
}

Result<Request> parse_request(std::string_view line) {
  return parse_line(line, "request", request_from_json);
}

std::string encode(const Response& response) {
  return line_of(std::visit([](const auto& alternative) { return response_json(alternative); }, response));
}

Result<Response> parse_response(std::string_view line) {
  return parse_line(line, "response", response_from_json);
}

void put_efficiency(nlohmann::json& object, const GpuEfficiency& efficiency) {
  object["sm_active_gpu_hours"] = or_null(efficiency.sm_active_gpu_hours);
  object["sm_efficiency"] = or_null(efficiency.sm_efficiency);
  object["energy_kwh"] = or_null(efficiency.energy_kwh);
  object["peak_memory_mib"] = or_null(efficiency.peak_memory_mib);
}

nlohmann::json event_to_json(const Event& event) {
  json object = {{"seq", event.seq},
                 {"time", event.time},
                 {"kind", to_string(event.kind)},
                 {"job", event.job != 0 ? json(event.job) : json(nullptr)},
                 {"user", event.user},
                 {"name", event.name},
                 {"gpus", event.gpus},
                 {"detail", event.detail},
                 {"jobs", event.jobs},
                 {"users", event.users},
                 {"message", describe_event(event)}};
  if (event.withheld) object["private"] = true;
  return object;
}

Result<Event> event_from_json(const nlohmann::json& json) { return as_event(json, Field("event")); }

nlohmann::json job_to_json(const Job& job) {
  json object = {{"id", job.id},
                 {"state", to_string(job.state)},
                 {"reason", job.reason},
                 {"user", job.owner.user},
                 {"uid", job.owner.uid},
                 {"gpus", job.gpus},
                 {"gpu_uuids", job.gpu_uuids},
                 {"attempts", job.attempts},
                 {"exit_code", or_null(job.exit_code)},
                 {"signal", or_null(job.signal)},
                 {"submit_time", job.submit_time},
                 {"start_time", or_null(job.start_time)},
                 {"end_time", or_null(job.end_time)}};
  if (job.details_withheld) {
    object["private"] = true;
  } else {
    object["pid"] = or_null(job.pid);
    object["stdout"] = job.stdout_path;
    object["stderr"] = job.stderr_path;
  }
  add_spec_fields(job.spec, object, job.details_withheld);
  // A waiting job's: absent otherwise, which keeps long listings short.
  if (job.wait_reason) object["wait_reason"] = to_string(*job.wait_reason);
  if (job.expected_start) object["expected_start"] = *job.expected_start;
  if (job.usage) {
    object["usage"] = {{"gpu_hours", job.usage->gpu_hours},
                       {"mean_utilization", or_null(job.usage->mean_utilization)},
                       {"idle_since", or_null(job.usage->idle_since)},
                       {"slice_used_mib", or_null(job.usage->slice_used_mib)}};
    put_efficiency(object["usage"], job.usage->efficiency);
  }
  if (job.array) {
    object["array_id"] = job.array->array_id;
    object["array_index"] = job.array->index;
    object["array_limit"] = job.array->limit;
  }
  if (job.suspension) {
    object["suspension"] = {{"pids", job.suspension->pids},
                            {"by", job.suspension->by},
                            {"since", job.suspension->since},
                            {"host_mib", job.suspension->host_mib},
                            {"resume", job.suspension->resume}};
  }
  if (job.suspended_s > 0) object["suspended_s"] = job.suspended_s;  // version 3
  return object;
}

Result<Job> job_from_json(const nlohmann::json& object) {
  if (!object.is_object()) return fail("a job must be a JSON object");
  Job job;
  TRY_ASSIGN(job.id, required(object, "id", job_number));
  TRY_ASSIGN(job.details_withheld, defaulted(object, "private", false, as_flag));
  TRY_ASSIGN(job.spec, spec_from_json(object, JobKind::Batch, job.details_withheld));
  TRY_ASSIGN(job.state, required(object, "state", as_state));
  TRY_ASSIGN(job.reason, defaulted(object, "reason", std::string(), as_text));
  TRY_ASSIGN(job.owner.user, defaulted(object, "user", std::string(), as_text));
  TRY_ASSIGN(job.owner.uid, defaulted(object, "uid", uid_t{0}, whole_from<uid_t>(0)));
  TRY_ASSIGN(job.gpus, defaulted(object, "gpus", std::vector<unsigned>(), list_of(gpu_index)));
  TRY_ASSIGN(job.gpu_uuids, defaulted(object, "gpu_uuids", std::vector<std::string>(), list_of(as_text)));
  TRY_ASSIGN(job.attempts, defaulted(object, "attempts", 0u, whole_from<unsigned>(0)));
  TRY_ASSIGN(job.exit_code, maybe(object, "exit_code", whole<int>(0, kMaxExitCode)));
  TRY_ASSIGN(job.signal, maybe(object, "signal", whole<int>(1, kMaxSignal)));
  TRY_ASSIGN(job.submit_time, defaulted(object, "submit_time", 0.0, as_time));
  TRY_ASSIGN(job.start_time, maybe(object, "start_time", as_time));
  TRY_ASSIGN(job.end_time, maybe(object, "end_time", as_time));
  TRY_ASSIGN(job.pid, maybe(object, "pid", whole_from<pid_t>(1)));
  TRY_ASSIGN(job.stdout_path, defaulted(object, "stdout", std::string(), as_text));
  TRY_ASSIGN(job.stderr_path, defaulted(object, "stderr", std::string(), as_text));
  TRY_ASSIGN(job.wait_reason, maybe(object, "wait_reason", as_wait_reason));
  TRY_ASSIGN(job.expected_start, maybe(object, "expected_start", as_time));
  TRY_ASSIGN(job.usage, maybe(object, "usage", as_usage));
  TRY_ASSIGN(std::optional<JobId> array_id, maybe(object, "array_id", job_number));
  if (array_id) {
    ArrayTask task{*array_id, 0, 0};
    TRY_ASSIGN(task.index, defaulted(object, "array_index", 0u, whole<unsigned>(0, kMaxArrayIndex)));
    TRY_ASSIGN(task.limit, defaulted(object, "array_limit", 0u, whole<unsigned>(0, kMaxArrayIndex)));
    job.array = task;
  }
  TRY_ASSIGN(job.suspension, maybe(object, "suspension", as_suspension));
  TRY_ASSIGN(job.suspended_s, defaulted(object, "suspended_s", 0.0, as_seconds));
  return job;
}

size_t encoded_size(const Job& job) { return line_of(job_to_json(job)).size() + 1; }  // and its comma

}  // namespace gpupool::protocol
