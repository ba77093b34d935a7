#include "slurm/slurm_jobs.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "base/quote.h"
#include "base/text.h"

namespace gpupool {
namespace {

using nlohmann::json;

constexpr std::string_view kSlurmPrefix = "slurm:";

// Separates the fields of squeue's and sacct's lines: a byte no name, path or reason holds
// (Slurm's own "|" may be in a job name). The one free-text field, the name, comes last.
constexpr char kSeparator = '\x1f';

std::string_view trimmed(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t' || text.back() == '\r' || text.back() == '\n')) {
    text.remove_suffix(1);
  }
  return text;
}

// A job id of 1 to 18 digits (always fits), as parse_job_ids takes them.
std::optional<JobId> job_number_of(std::string_view text) {
  if (!all_digits(text) || text.size() > 18) return std::nullopt;
  std::optional<JobId> id = parse_number<JobId>(text);
  return id && *id > 0 ? id : std::nullopt;
}

// "42" or "40-45": gpupoold's ids as add_job_ids takes them.
bool is_local_id_range(std::string_view piece) {
  size_t dash = piece.find('-');
  std::optional<JobId> first = job_number_of(piece.substr(0, dash));
  if (dash == std::string_view::npos) return first.has_value();
  std::optional<JobId> last = job_number_of(piece.substr(dash + 1));
  return first && last && *first <= *last;
}

std::string id_list(std::span<const JobId> ids) { return fmt::format("{}", fmt::join(ids, ",")); }

// Slurm's ways of saying "nothing here" ("NONE": a running job's end without a time limit).
bool says_nothing(std::string_view text) {
  std::string word = lowercase(text);
  return word.empty() || word == "n/a" || word == "(null)" || word == "none" || word == "unknown";
}

std::string value_or_empty(std::string_view text) { return says_nothing(text) ? std::string() : std::string(text); }

// A time printed with SLURM_TIME_FORMAT=%s; Slurm's words for none (and 0) are no time.
Result<std::optional<double>> unix_time(std::string_view text, std::string_view what) {
  if (says_nothing(text) || text == "0") return std::optional<double>();
  std::optional<int64_t> seconds = all_digits(text) ? parse_number<int64_t>(text) : std::nullopt;
  if (!seconds) return fail("{} {} is not a Unix time", what, quote(text));
  return std::optional<double>(static_cast<double>(*seconds));
}

// "3:0", "0:15": sacct's and scontrol's exit code and signal.
Result<void> read_exit_pair(std::string_view text, SlurmJob& job) {
  if (says_nothing(text)) return {};
  size_t colon = text.find(':');
  std::optional<int> code = colon == std::string_view::npos ? std::nullopt : parse_number<int>(text.substr(0, colon));
  std::optional<int> signal = colon == std::string_view::npos ? std::nullopt : parse_number<int>(text.substr(colon + 1));
  if (!code || !signal || *code < 0 || *code > 255 || *signal < 0 || *signal > 127) {
    return fail("exit code {} is not CODE:SIGNAL", quote(text));
  }
  job.exit_code = *signal > 0 ? 128 + *signal : *code;
  if (*signal > 0) job.signal = *signal;
  return {};
}

// squeue's exit_code: the wait status itself (768 is exit 3, 9 is SIGKILL).
Result<void> read_wait_status(std::string_view text, SlurmJob& job) {
  if (says_nothing(text)) return {};
  std::optional<int> status = all_digits(text) ? parse_number<int>(text) : std::nullopt;
  if (!status) return fail("exit code {} is not a wait status", quote(text));
  int signal = *status & 0x7f;
  job.exit_code = signal > 0 ? 128 + signal : (*status >> 8) & 0xff;
  if (signal > 0) job.signal = signal;
  return {};
}

// "root(0)" (sacct -c, scontrol) or "root".
std::string login_name(std::string_view text) {
  size_t paren = text.find('(');
  return value_or_empty(paren == std::string_view::npos ? text : text.substr(0, paren));
}

// "CANCELLED by 1000" (sacct) -> "CANCELLED".
std::string state_word(std::string_view text) { return std::string(text.substr(0, text.find(' '))); }

Result<JobId> slurm_job_number(std::string_view text) {
  std::optional<JobId> id = job_number_of(text);
  if (!id) return fail("job id {} is not a number", quote(text));
  return *id;
}

// The lines of a command's output, blank ones left out, each with its number (from 1).
std::vector<std::pair<size_t, std::string_view>> output_lines(std::string_view output) {
  std::vector<std::pair<size_t, std::string_view>> lines;
  size_t number = 0;
  for (size_t start = 0; start < output.size();) {
    size_t end = output.find('\n', start);
    if (end == std::string_view::npos) end = output.size();
    ++number;
    std::string_view line = output.substr(start, end - start);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (!trimmed(line).empty()) lines.emplace_back(number, line);
    start = end + 1;
  }
  return lines;
}

// A line of `count` fields split at the separator; the last one keeps any further separators.
std::optional<std::vector<std::string_view>> separated_fields(std::string_view line, size_t count) {
  std::vector<std::string_view> fields;
  while (fields.size() + 1 < count) {
    size_t at = line.find(kSeparator);
    if (at == std::string_view::npos) return std::nullopt;
    fields.push_back(line.substr(0, at));
    line.remove_prefix(at + 1);
  }
  fields.push_back(line);
  return fields;
}

// Parses each line of a command's output with `parse_line`; an error names the command and line.
template <typename ParseLine>
Result<std::vector<SlurmJob>> parse_lines(std::string_view output, std::string_view command, ParseLine parse_line) {
  std::vector<SlurmJob> jobs;
  for (const auto& [number, line] : output_lines(output)) {
    Result<SlurmJob> job = parse_line(line);
    if (!job.ok()) return fail("{} said something unexpected on line {} ({}): {}", command, number,
                               quote(line), job.error().message);
    jobs.push_back(std::move(*job));
  }
  return jobs;
}

// --- the queries' fields ---

// Not STDOUT and STDERR: squeue prints an --output pattern given to sbatch unexpanded.
constexpr std::array<std::string_view, 13> kSqueueFields = {
    "JobID", "State", "Reason", "exit_code", "SubmitTime", "StartTime", "EndTime", "NodeList", "tres-per-node",
    "Partition", "TimeLimit", "UserName", "Name"};

constexpr std::array<std::string_view, 13> kSacctFields = {
    "JobIDRaw", "State", "Reason", "ExitCode", "Submit", "Start", "End", "NodeList", "AllocTRES",
    "Partition", "Timelimit", "User", "JobName"};

// The fields that squeue's and sacct's formats hold in the same places (kSqueueFields,
// kSacctFields); each reads the exit status (field 3) and the user (field 11) its own way.
Result<SlurmJob> shared_fields(std::string_view line, size_t count, std::string source) {
  std::optional<std::vector<std::string_view>> f = separated_fields(line, count);
  if (!f) return fail("expected {} fields", count);
  const std::vector<std::string_view>& v = *f;
  SlurmJob job;
  job.source = std::move(source);
  TRY_ASSIGN(job.id, slurm_job_number(v[0]));
  job.state = state_word(v[1]);
  if (job.state.empty()) return fail("no state");
  job.reason = value_or_empty(v[2]);
  TRY_ASSIGN(job.submit_time, unix_time(v[4], "submit time"));
  TRY_ASSIGN(job.start_time, unix_time(v[5], "start time"));
  TRY_ASSIGN(job.end_time, unix_time(v[6], "end time"));
  job.nodes = value_or_empty(v[7]);
  job.tres = value_or_empty(v[8]);
  job.partition = value_or_empty(v[9]);
  job.time_limit = value_or_empty(v[10]);
  job.name = std::string(v[12]);
  return job;
}

Result<SlurmJob> squeue_line(std::string_view line) {
  TRY_ASSIGN(SlurmJob job, shared_fields(line, kSqueueFields.size(), "squeue"));
  std::vector<std::string_view> v = *separated_fields(line, kSqueueFields.size());
  TRY(read_wait_status(v[3], job));
  job.user = value_or_empty(v[11]);
  return job;
}

Result<SlurmJob> sacct_line(std::string_view line, bool completion_log) {
  TRY_ASSIGN(SlurmJob job, shared_fields(line, kSacctFields.size(), completion_log ? "sacct -c" : "sacct"));
  std::vector<std::string_view> v = *separated_fields(line, kSacctFields.size());
  TRY(read_exit_pair(v[3], job));
  job.user = login_name(v[11]);
  return job;
}

// --- JSON of records ---

template <typename T>
json or_null(const std::optional<T>& value) {
  return value ? json(*value) : json(nullptr);
}

// Reads fields of a JSON object, the first problem kept as the error.
class FieldReader {
 public:
  explicit FieldReader(const json& object) : object_(object) {}

  std::string text(const char* key) {
    const json* value = find(key);
    if (value == nullptr) return {};
    if (!value->is_string()) return wrong(key, "a string"), std::string();
    return value->get<std::string>();
  }
  std::optional<double> number(const char* key) {
    const json* value = find(key);
    if (value == nullptr || value->is_null()) return std::nullopt;
    if (!value->is_number() || !std::isfinite(value->get<double>())) return wrong(key, "a number"), std::nullopt;
    return value->get<double>();
  }
  template <typename Int>
  std::optional<Int> whole(const char* key, Int low, Int high) {
    const json* value = find(key);
    if (value == nullptr || value->is_null()) return std::nullopt;
    if (!value->is_number_integer()) return wrong(key, "a whole number"), std::nullopt;
    // Parsed non-negative numbers are unsigned, others signed; the bounds are never negative.
    bool in_range = value->is_number_unsigned()
                        ? value->get<uint64_t>() >= static_cast<uint64_t>(low) &&
                              value->get<uint64_t>() <= static_cast<uint64_t>(high)
                        : value->get<int64_t>() >= static_cast<int64_t>(low) &&
                              value->get<int64_t>() <= static_cast<int64_t>(high);
    if (!in_range) return wrong(key, fmt::format("from {} to {}", low, high)), std::nullopt;
    return value->get<Int>();
  }
  std::vector<std::string> texts(const char* key) {
    const json* value = find(key);
    std::vector<std::string> out;
    if (value == nullptr) return out;
    if (!value->is_array()) return wrong(key, "a list of strings"), out;
    for (const json& item : *value) {
      if (!item.is_string()) return wrong(key, "a list of strings"), out;
      out.push_back(item.get<std::string>());
    }
    return out;
  }
  std::vector<JobId> ids(const char* key) {
    const json* value = find(key);
    std::vector<JobId> out;
    if (value == nullptr) return out;
    if (!value->is_array()) return wrong(key, "a list of job ids"), out;
    for (const json& item : *value) {
      if (!item.is_number_unsigned() || item.get<uint64_t>() == 0) return wrong(key, "a list of job ids"), out;
      out.push_back(item.get<JobId>());
    }
    return out;
  }
  Result<void> finish() const {
    if (error_) return *error_;
    return {};
  }

 private:
  const json* find(const char* key) const {
    auto it = object_.find(key);
    return it == object_.end() ? nullptr : &*it;
  }
  void wrong(const char* key, std::string_view expected) {
    if (!error_) error_ = fail("'{}' must be {}", key, expected);
  }
  const json& object_;
  std::optional<Error> error_;
};

Result<JobId> record_id(const json& object) {
  if (!object.is_object()) return fail("not a JSON object");
  FieldReader reader(object);
  std::optional<JobId> id = reader.whole<JobId>("slurm_id", 1, JobId{999999999999999999});
  TRY(reader.finish());
  if (!id) return fail("no 'slurm_id'");
  return *id;
}

Result<SlurmRecord> submitted_record(const json& object) {
  FieldReader reader(object);
  SlurmRecord record;
  TRY_ASSIGN(record.id, record_id(object));
  record.name = reader.text("name");
  record.argv = reader.texts("command");
  record.cwd = reader.text("cwd");
  record.stdout_path = reader.text("stdout");
  record.stderr_path = reader.text("stderr");
  record.submit_time = reader.number("submit_time").value_or(0);
  record.gpu_count = reader.whole<unsigned>("gpu_count", 1, 1024).value_or(1);
  record.slice_mib = reader.whole<uint64_t>("mem_mib", 1, uint64_t{1} << 40);
  record.time_limit_s = reader.number("time_limit_s");
  record.partition = reader.text("partition");
  record.after = reader.ids("after");
  TRY(reader.finish());
  return record;
}

Result<MappedState> failed_because(const SlurmJob& job, std::string_view why) {
  std::string reason(why);
  if (!job.reason.empty() && job.reason != "NonZeroExitCode") {
    reason += reason.empty() ? job.reason : " (" + job.reason + ")";
  }
  return MappedState{JobState::Failed, reason};
}

}  // namespace

// --- ids ---

Result<JobIds> parse_any_job_ids(std::span<const std::string> texts) {
  JobIds ids;
  for (const std::string& text : texts) {
    for (const std::string& piece : split(text, ',')) {
      bool slurm = piece.starts_with(kSlurmPrefix);
      std::optional<JobId> id = slurm ? job_number_of(piece.substr(kSlurmPrefix.size())) : std::nullopt;
      if (slurm ? !id : !is_local_id_range(piece)) {
        return fail("invalid job id {}: expected a number like 42, a range like 40-45, or slurm:42 for a Slurm job",
                    quote(piece));
      }
      if (slurm) {
        ids.slurm.push_back(*id);
      } else {
        TRY(add_job_ids(piece, ids.local));  // gpupoold's ids, ranges included
      }
    }
  }
  return ids;
}

std::string slurm_id_text(JobId id) { return fmt::format("{}{}", kSlurmPrefix, id); }

// --- submitting ---

std::string slurm_time_limit(double seconds) {
  auto minutes = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(seconds / 60.0)));
  int64_t days = minutes / 1440;
  int64_t hours = minutes % 1440 / 60;
  if (days > 0) return fmt::format("{}-{:02}:{:02}:00", days, hours, minutes % 60);
  return fmt::format("{:02}:{:02}:00", hours, minutes % 60);
}

Result<std::string> expand_slurm_filename(std::string_view pattern, const SlurmFilenameFields& fields) {
  if (pattern.find('\\') != std::string_view::npos) {
    return fail("output pattern {}: backslashes turn off Slurm's %-patterns; gpupool takes %j, %x, %u and %% only",
                quote(pattern));
  }
  std::string name;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '%') {
      name += pattern[i];
      continue;
    }
    size_t digits_end = i + 1;
    while (digits_end < pattern.size() && pattern[digits_end] >= '0' && pattern[digits_end] <= '9') ++digits_end;
    std::string_view digits = pattern.substr(i + 1, digits_end - i - 1);
    char letter = digits_end < pattern.size() ? pattern[digits_end] : '\0';
    // Slurm pads numbers to at most 10 digits.
    size_t width = digits.empty() ? 0 : std::min<size_t>(10, parse_number<size_t>(digits).value_or(10));
    if (letter == 'j' || letter == 'A') {
      std::string id = std::to_string(fields.id);
      name += std::string(width > id.size() ? width - id.size() : 0, '0') + id;
    } else if (letter == 'x') {
      name += fields.name;
    } else if (letter == 'u') {
      name += fields.user;
    } else if (letter == '%' && digits.empty()) {
      name += '%';
    } else {
      return fail("output pattern {}: {} names what is known only once the job runs, so gpupool could not find "
                  "the file; use %j, %x, %u or %%",
                  quote(pattern), quote(pattern.substr(i, digits_end - i + (letter == '\0' ? 0 : 1))));
    }
    i = digits_end;
  }
  return name;
}

Result<SbatchCall> sbatch_call(const JobSpec& spec, const SlurmSubmitSettings& settings) {
  if (spec.argv.empty()) return fail("no command to submit");
  if (spec.argv.front().starts_with('-')) {
    return fail("the command {} starts with '-', which sh's exec would read as an option", quote(spec.argv.front()));
  }
  if (!spec.cwd.starts_with('/')) return fail("the working directory {} is not absolute", quote(spec.cwd));
  if (spec.priority > 0) {
    return fail("--priority above 0 has no Slurm equivalent for users (sbatch --nice below 0 is for administrators)");
  }
  if (spec.retries > 0) {
    return fail("--retries cannot go to Slurm: it does not run a failed job again (its --requeue is for node "
                "failures and preemption)");
  }
  if (settings.shard_mib == 0) return fail("--shard-mib must be more than 0");

  SbatchCall call;
  Job named;
  named.spec = spec;
  call.name = display_name(named);
  auto absolute = [&](const std::string& pattern) {
    return pattern.starts_with('/') ? pattern : spec.cwd + "/" + pattern;
  };
  call.output_pattern = absolute(settings.output.empty() ? "gpupool-%j.out" : settings.output);
  call.error_pattern = !settings.error.empty()  ? absolute(settings.error)
                       : settings.output.empty() ? absolute("gpupool-%j.err")
                                                 : call.output_pattern;
  // Refused now, not after the job is queued: a pattern whose file gpupool could not name.
  TRY(expand_slurm_filename(call.output_pattern, {}));
  TRY(expand_slurm_filename(call.error_pattern, {}));

  std::vector<std::string>& argv = call.argv;
  argv = {"sbatch", "--parsable", "--job-name=" + call.name, "--chdir=" + spec.cwd, "--export=ALL",
          "--output=" + call.output_pattern, "--error=" + call.error_pattern};
  if (!settings.partition.empty()) argv.push_back("--partition=" + settings.partition);
  if (spec.gpus.slice_mib) {
    if (!settings.cluster_has_shards) {
      return fail("this Slurm cluster has no GPU shards configured, so --mem cannot be a part of a GPU there; "
                  "ask for whole GPUs (-g N without --mem)");
    }
    // Without MULTIPLE_SHARING_GRES_PJ (Slurm 23.02 on), a job's shards all come from one GPU.
    if (spec.gpus.count != 1) {
      return fail("a Slurm job's shards come from one GPU: --mem goes with -g 1 only (or ask for whole GPUs)");
    }
    uint64_t shards = (*spec.gpus.slice_mib + settings.shard_mib - 1) / settings.shard_mib;
    argv.push_back(fmt::format("--gres=shard:{}", shards));
  } else {
    argv.push_back(fmt::format("--gres=gpu:{}", spec.gpus.count));
  }
  if (spec.time_limit_s) argv.push_back("--time=" + slurm_time_limit(*spec.time_limit_s));
  if (!settings.after.empty()) argv.push_back(fmt::format("--dependency=afterok:{}", fmt::join(settings.after, ":")));
  if (spec.priority < 0) argv.push_back(fmt::format("--nice={}", -spec.priority));
  if (settings.hold) argv.push_back("--hold");

  // exec: the command replaces the shell, so scancel's signals reach it and its status is the job's.
  call.script = "#!/bin/sh\nexec";
  for (const std::string& word : spec.argv) call.script += " " + shell_quote(word);
  call.script += "\n";
  return call;
}

Result<bool> sinfo_offers_shards(std::string_view output) {
  for (const auto& [number, line] : output_lines(output)) {
    std::string_view rest = trimmed(line);
    if (rest == "(null)") continue;
    while (!rest.empty()) {
      // One resource: NAME[:TYPE][:COUNT][(S:...)], the socket list may hold commas.
      size_t end = 0;
      int depth = 0;
      while (end < rest.size() && (rest[end] != ',' || depth > 0)) {
        depth += rest[end] == '(' ? 1 : rest[end] == ')' ? -1 : 0;
        ++end;
      }
      std::string_view resource = rest.substr(0, end);
      std::string_view name = resource.substr(0, resource.find_first_of(":("));
      if (name.empty()) return fail("sinfo said something unexpected on line {}: {}", number, quote(line));
      if (name == "shard") return true;
      rest.remove_prefix(std::min(rest.size(), end + 1));
    }
  }
  return false;
}

Result<JobId> parse_sbatch_answer(std::string_view output) {
  std::string_view answer = trimmed(output);
  std::optional<JobId> id = job_number_of(answer.substr(0, answer.find(';')));
  if (!id) return fail("sbatch answered {} instead of a job id", quote(answer));
  return *id;
}

// --- what Slurm says ---

nlohmann::json slurm_job_to_json(const SlurmJob& job) {
  return {{"id", job.id},
          {"name", job.name},
          {"user", job.user},
          {"state", job.state},
          {"reason", job.reason},
          {"exit_code", or_null(job.exit_code)},
          {"signal", or_null(job.signal)},
          {"submit_time", or_null(job.submit_time)},
          {"start_time", or_null(job.start_time)},
          {"end_time", or_null(job.end_time)},
          {"nodes", job.nodes},
          {"partition", job.partition},
          {"time_limit", job.time_limit},
          {"tres", job.tres},
          {"stdout", job.stdout_path},
          {"stderr", job.stderr_path},
          {"source", job.source}};
}

Result<SlurmJob> slurm_job_from_json(const nlohmann::json& object) {
  if (!object.is_object()) return fail("a Slurm job must be a JSON object");
  FieldReader reader(object);
  SlurmJob job;
  std::optional<JobId> id = reader.whole<JobId>("id", 1, JobId{999999999999999999});
  job.name = reader.text("name");
  job.user = reader.text("user");
  job.state = reader.text("state");
  job.reason = reader.text("reason");
  job.exit_code = reader.whole<int>("exit_code", 0, 255);
  job.signal = reader.whole<int>("signal", 1, 127);
  job.submit_time = reader.number("submit_time");
  job.start_time = reader.number("start_time");
  job.end_time = reader.number("end_time");
  job.nodes = reader.text("nodes");
  job.partition = reader.text("partition");
  job.time_limit = reader.text("time_limit");
  job.tres = reader.text("tres");
  job.stdout_path = reader.text("stdout");
  job.stderr_path = reader.text("stderr");
  job.source = reader.text("source");
  TRY(reader.finish());
  if (!id) return fail("a Slurm job needs its 'id'");
  if (job.state.empty()) return fail("a Slurm job needs its 'state'");
  job.id = *id;
  return job;
}

std::vector<std::string> squeue_argv(std::span<const JobId> ids) {
  std::string format;
  for (size_t i = 0; i < kSqueueFields.size(); ++i) {
    // FIELD:0 prints the whole value; the suffix after it separates the fields.
    format += fmt::format("{}{}:0{}", i == 0 ? "" : ",", kSqueueFields[i],
                          i + 1 < kSqueueFields.size() ? std::string(1, kSeparator) : "");
  }
  return {"squeue", "--noheader", "--states=all", "--jobs=" + id_list(ids), "--Format=" + format};
}

Result<std::vector<SlurmJob>> parse_squeue(std::string_view output) {
  return parse_lines(output, "squeue", squeue_line);
}

bool squeue_knows_none(std::string_view error_output) {
  return error_output.find("Invalid job id specified") != std::string_view::npos;
}

std::vector<std::string> sacct_argv(std::span<const JobId> ids, bool completion_log) {
  std::vector<std::string> argv = {"sacct"};
  if (completion_log) argv.push_back("--completion");
  argv.insert(argv.end(), {"--allocations", "--parsable2", "--noheader", std::string("--delimiter=") + kSeparator,
                           "--jobs=" + id_list(ids),
                           fmt::format("--format={}", fmt::join(kSacctFields, ","))});
  return argv;
}

Result<std::vector<SlurmJob>> parse_sacct(std::string_view output, bool completion_log) {
  return parse_lines(output, completion_log ? "sacct -c" : "sacct",
                     [completion_log](std::string_view line) { return sacct_line(line, completion_log); });
}

std::vector<std::string> scontrol_show_argv(JobId id) {
  return {"scontrol", "--oneliner", "show", "job", std::to_string(id)};
}

Result<SlurmJob> parse_scontrol_job(std::string_view output) {
  std::vector<std::pair<size_t, std::string_view>> lines = output_lines(output);
  if (lines.empty()) return fail("scontrol said nothing about the job");
  std::string_view line = lines.front().second;
  // Key=Value words; a word that does not start a key continues the value before it.
  std::map<std::string, std::string, std::less<>> fields;
  std::string* value = nullptr;
  for (const std::string& word : split(line, ' ')) {
    size_t equals = word.find('=');
    std::string_view key = std::string_view(word).substr(0, equals);
    bool starts_key = equals != std::string::npos && !key.empty() && std::isalpha(static_cast<unsigned char>(key[0])) &&
                      std::all_of(key.begin(), key.end(), [](char c) {
                        return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '/' || c == ':';
                      });
    if (starts_key) {
      value = &fields[std::string(key)];
      *value = word.substr(equals + 1);
    } else if (value != nullptr) {
      *value += " " + word;
    } else if (!word.empty()) {
      return fail("scontrol said something unexpected: {}", quote(line));
    }
  }
  auto field = [&](std::string_view key) -> std::string_view {
    auto it = fields.find(key);
    return it == fields.end() ? std::string_view() : std::string_view(it->second);
  };
  Result<SlurmJob> read = [&]() -> Result<SlurmJob> {
    SlurmJob job;
    job.source = "scontrol";
    TRY_ASSIGN(job.id, slurm_job_number(field("JobId")));
    job.name = std::string(field("JobName"));
    job.user = login_name(field("UserId"));
    job.state = state_word(field("JobState"));
    if (job.state.empty()) return fail("no JobState");
    job.reason = value_or_empty(field("Reason"));
    TRY(read_exit_pair(field("ExitCode"), job));
    TRY_ASSIGN(job.submit_time, unix_time(field("SubmitTime"), "SubmitTime"));
    TRY_ASSIGN(job.start_time, unix_time(field("StartTime"), "StartTime"));
    TRY_ASSIGN(job.end_time, unix_time(field("EndTime"), "EndTime"));
    job.nodes = value_or_empty(field("NodeList"));
    job.partition = value_or_empty(field("Partition"));
    job.time_limit = value_or_empty(field("TimeLimit"));
    job.tres = value_or_empty(field("TRES"));
    job.stdout_path = value_or_empty(field("StdOut"));
    job.stderr_path = value_or_empty(field("StdErr"));
    return job;
  }();
  if (!read.ok()) return fail("scontrol said something unexpected ({}): {}", quote(line), read.error().message);
  return read;
}

Result<MappedState> map_slurm_state(const SlurmJob& job) {
  const std::string& s = job.state;
  if (s == "PENDING" || s == "REQUEUED" || s == "REQUEUE_FED") {
    if (job.reason == "JobHeldUser") return MappedState{JobState::Held, "held by its user"};
    if (job.reason == "JobHeldAdmin") return MappedState{JobState::Held, "held by an administrator"};
    return MappedState{JobState::Queued, s == "PENDING" ? job.reason : "requeued"};
  }
  if (s == "REQUEUE_HOLD" || s == "SPECIAL_EXIT" || s == "RESV_DEL_HOLD") {
    return MappedState{JobState::Held, lowercase(s)};
  }
  if (s == "RUNNING" || s == "CONFIGURING" || s == "COMPLETING" || s == "RESIZING" || s == "SIGNALING" ||
      s == "STAGE_OUT") {
    return MappedState{JobState::Running, ""};
  }
  if (s == "SUSPENDED" || s == "STOPPED") return MappedState{JobState::Running, lowercase(s)};
  if (s == "COMPLETED") return MappedState{JobState::Done, ""};
  if (s == "FAILED") return failed_because(job, "");
  if (s == "TIMEOUT") return failed_because(job, "time limit");
  if (s == "NODE_FAIL") return failed_because(job, "node failure");
  if (s == "OUT_OF_MEMORY") return failed_because(job, "out of memory");
  if (s == "BOOT_FAIL") return failed_because(job, "node boot failure");
  if (s == "DEADLINE") return failed_because(job, "deadline reached");
  if (s == "PREEMPTED") return failed_because(job, "preempted");
  if (s == "CANCELLED") return MappedState{JobState::Cancelled, job.reason};
  if (s == "REVOKED") return MappedState{JobState::Cancelled, "revoked: started on another cluster"};
  return fail("Slurm job {} is in a state gpupool does not know: {}", job.id, quote(s));
}

// --- gpupool's record ---

std::string submitted_record_line(const SlurmRecord& record) {
  return json{{"slurm_id", record.id},
              {"name", record.name},
              {"command", record.argv},
              {"cwd", record.cwd},
              {"stdout", record.stdout_path},
              {"stderr", record.stderr_path},
              {"submit_time", record.submit_time},
              {"gpu_count", record.gpu_count},
              {"mem_mib", or_null(record.slice_mib)},
              {"time_limit_s", or_null(record.time_limit_s)},
              {"partition", record.partition},
              {"after", record.after}}
      .dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string ended_record_line(const SlurmJob& job) {
  return json{{"slurm_id", job.id}, {"ended", slurm_job_to_json(job)}}.dump(-1, ' ', false,
                                                                               json::error_handler_t::replace);
}

Result<std::vector<SlurmRecord>> parse_slurm_records(std::string_view text, std::string_view file_name) {
  std::vector<SlurmRecord> records;
  std::map<JobId, size_t> index;  // id -> its latest record
  auto read_line = [&](std::string_view line) -> Result<void> {
    json object = json::parse(line, nullptr, false);
    if (object.is_discarded()) return fail("not valid JSON");
    TRY_ASSIGN(JobId id, record_id(object));
    auto ended = object.find("ended");
    if (ended == object.end()) {
      TRY_ASSIGN(SlurmRecord record, submitted_record(object));
      auto known = index.find(id);
      if (known != index.end()) records[known->second].id = 0;  // replaced: left out below
      index[id] = records.size();
      records.push_back(std::move(record));
      return {};
    }
    TRY_ASSIGN(SlurmJob job, slurm_job_from_json(*ended));
    if (job.id != id) return fail("'ended' is about job {}, not {}", job.id, id);
    auto known = index.find(id);
    if (known == index.end()) return fail("job {} ended but was never recorded", id);
    records[known->second].ended = std::move(job);
    return {};
  };
  for (const auto& [number, line] : output_lines(text)) {
    Result<void> read = read_line(line);
    if (!read.ok()) return fail("{} line {}: {}", file_name, number, read.error().message);
  }
  std::erase_if(records, [](const SlurmRecord& record) { return record.id == 0; });
  return records;
}

// --- gpupool's view ---

Result<SlurmJobStatus> slurm_job_status(const SlurmRecord& record, const std::optional<SlurmJob>& slurm,
                                        const std::string& user) {
  SlurmJobStatus status;
  Job& job = status.job;
  job.id = record.id;
  job.spec.name = record.name;
  job.spec.argv = record.argv;
  job.spec.cwd = record.cwd;
  job.spec.gpus.count = record.gpu_count;
  job.spec.gpus.slice_mib = record.slice_mib;
  job.spec.time_limit_s = record.time_limit_s;
  job.spec.after = record.after;
  job.owner.user = user;
  job.submit_time = record.submit_time;
  job.stdout_path = record.stdout_path;
  job.stderr_path = record.stderr_path;
  status.slurm = slurm;
  if (!slurm) {
    job.reason = "Slurm has forgotten it";
    return status;
  }
  TRY_ASSIGN(MappedState mapped, map_slurm_state(*slurm));
  status.known = true;
  job.state = mapped.state;
  job.reason = mapped.reason;
  if (job.state == JobState::Queued && slurm->reason == "Dependency" && !record.after.empty()) {
    std::vector<std::string> ids;
    for (JobId after : record.after) ids.push_back(slurm_id_text(after));
    job.reason = fmt::format("waiting for {}", fmt::join(ids, ","));
  }
  if (!slurm->user.empty()) job.owner.user = slurm->user;
  if (slurm->submit_time) job.submit_time = *slurm->submit_time;
  // A queued job's start and a running one's end are Slurm's expectations, not facts.
  bool started = job.state == JobState::Running || is_finished(job.state);
  if (started && slurm->start_time) job.start_time = slurm->start_time;
  if (is_finished(job.state)) {
    job.end_time = slurm->end_time;
    job.exit_code = slurm->exit_code;
    job.signal = slurm->signal;
    job.attempts = slurm->start_time ? 1 : 0;
  } else if (job.state == JobState::Running) {
    job.attempts = 1;
  }
  return status;
}

}  // namespace gpupool
