#include "cli/slurm_queue.h"

#include <fcntl.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <ctime>
#include <map>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include "base/quote.h"
#include "base/text.h"
#include "cli/app.h"
#include "cli/commands.h"
#include "cli/value_checks.h"
#include "os/accounts.h"
#include "os/file_lock.h"
#include "os/files.h"
#include "os/paths.h"
#include "os/process.h"
#include "os/program.h"

namespace gpupool::cli {
namespace {

constexpr const char* kRecordFileName = "slurm-jobs.jsonl";

// What a Slurm program said, as one line: its error lines (else its output) joined.
std::string said(const ProgramOutcome& outcome) {
  const std::string& text = outcome.err.find_first_not_of(" \n") != std::string::npos ? outcome.err : outcome.out;
  std::string line;
  for (const std::string& piece : split(text, '\n')) {
    if (piece.find_first_not_of(' ') == std::string::npos) continue;
    line += (line.empty() ? "" : "; ") + printable(piece, 400);
  }
  return line.empty() ? fmt::format("it exited with status {} and said nothing", outcome.exit_code) : line;
}

// A Slurm client program, from PATH; its times as Unix seconds.
Result<ProgramOutcome> run_slurm(const std::vector<std::string>& argv, std::string input = {}) {
  ProgramOptions options;
  options.input = std::move(input);
  options.environment = {kSlurmQueryEnvironment};
  options.not_found_hint = "is Slurm's client installed?";
  return run_program(argv, options);
}

// --- the record file ---

// The user's own (os/paths' user_state_dir()), wherever gpupool runs.
Result<std::string> state_directory() {
  std::optional<std::string> directory = user_state_dir();
  if (!directory) return fail("no home directory to keep the record of Slurm jobs in");
  return *directory;
}

Result<std::string> record_file() {
  TRY_ASSIGN(std::string directory, state_directory());
  return directory + "/" + kRecordFileName;
}

// The file, locked (shared or exclusive) while open: two submits at once append whole lines, on a
// home directory over NFS too, and a reader never sees half of one.
class LockedFile {
 public:
  // Created if missing, locked exclusively.
  static Result<LockedFile> for_appending(const std::string& path) {
    TRY_ASSIGN(Fd fd, open_file(path, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW, 0600));
    return locked(std::move(fd), path, LockMode::exclusive);
  }
  // Locked shared; nullopt where there is no file yet (nothing recorded).
  static Result<std::optional<LockedFile>> for_reading(const std::string& path) {
    TRY_ASSIGN(std::optional<Fd> fd, open_existing(path, O_RDONLY | O_NOFOLLOW));
    if (!fd) return std::optional<LockedFile>();
    TRY_ASSIGN(LockedFile file, locked(std::move(*fd), path, LockMode::shared));
    return std::optional<LockedFile>(std::move(file));
  }
  int fd() const { return fd_.get(); }

 private:
  explicit LockedFile(Fd fd) : fd_(std::move(fd)) {}
  static Result<LockedFile> locked(Fd fd, const std::string& path, LockMode mode) {
    if (auto taken = lock_file(fd.get(), mode); !taken) return fail("cannot lock {}: {}", path, taken.error().message);
    return LockedFile(std::move(fd));
  }
  Fd fd_;
};

Result<void> append_records(const std::vector<std::string>& lines) {
  TRY_ASSIGN(std::string directory, state_directory());
  TRY(make_directories(directory, 0700));  // the XDG rule's mode
  TRY_ASSIGN(std::string path, record_file());
  TRY_ASSIGN(LockedFile file, LockedFile::for_appending(path));
  std::string text;
  for (const std::string& line : lines) text += line + "\n";
  if (auto written = write_all(file.fd(), text); !written) {
    return fail("cannot write {}: {}", path, written.error().message);
  }
  return {};
}

Result<std::vector<SlurmRecord>> read_records() {
  TRY_ASSIGN(std::string path, record_file());
  TRY_ASSIGN(std::optional<LockedFile> file, LockedFile::for_reading(path));
  if (!file) return std::vector<SlurmRecord>();
  auto text = read_to_end(file->fd());
  if (!text) return fail("cannot read {}: {}", path, text.error().message);
  return parse_slurm_records(*text, path);
}

// --- asking Slurm ---

// What Slurm says about these jobs now. One by one, scontrol (the most it says about a job);
// else squeue, one call for all (finished jobs too, for MinJobAge). Then, for the ids the
// controller no longer holds, the accounting (sacct) and the job completion log (sacct -c,
// e.g. JobCompType=jobcomp/filetxt), where the cluster keeps them. An id none knows is left out.
Result<std::map<JobId, SlurmJob>> ask_slurm(std::span<const JobId> ids, bool one_by_one) {
  std::map<JobId, SlurmJob> known;
  if (ids.empty()) return known;
  if (one_by_one) {
    for (JobId id : ids) {
      TRY_ASSIGN(ProgramOutcome shown, run_slurm(scontrol_show_argv(id)));
      if (shown.exit_code != 0 && squeue_knows_none(shown.err)) continue;
      if (shown.exit_code != 0) return fail("scontrol: {}", said(shown));
      TRY_ASSIGN(SlurmJob job, parse_scontrol_job(shown.out));
      known[job.id] = std::move(job);
    }
  } else {
    TRY_ASSIGN(ProgramOutcome queue, run_slurm(squeue_argv(ids)));
    if (queue.exit_code != 0 && !squeue_knows_none(queue.err)) return fail("squeue: {}", said(queue));
    if (queue.exit_code == 0) {
      TRY_ASSIGN(std::vector<SlurmJob> jobs, parse_squeue(queue.out));
      for (SlurmJob& job : jobs) known[job.id] = std::move(job);
    }
  }
  for (bool completion_log : {false, true}) {
    std::vector<JobId> rest;
    for (JobId id : ids) {
      if (!known.contains(id)) rest.push_back(id);
    }
    if (rest.empty()) break;
    TRY_ASSIGN(ProgramOutcome accounting, run_slurm(sacct_argv(rest, completion_log)));
    if (accounting.exit_code != 0) continue;  // not kept on this cluster
    TRY_ASSIGN(std::vector<SlurmJob> jobs, parse_sacct(accounting.out, completion_log));
    for (SlurmJob& job : jobs) {
      if (std::find(rest.begin(), rest.end(), job.id) != rest.end()) known[job.id] = std::move(job);
    }
  }
  return known;
}

// A job gpupool follows: recorded at submission, or (in_file false) one it did not submit,
// known from Slurm alone.
struct Tracked {
  SlurmRecord record;
  bool in_file = true;
};

// Asks Slurm about the tracked jobs not yet seen to end and remembers those that have ended
// now (in `tracked`, and in the record file for recorded ones). Their statuses, in order.
Result<std::vector<SlurmJobStatus>> refresh(std::vector<Tracked>& tracked, bool one_by_one) {
  std::vector<JobId> ask;
  for (const Tracked& t : tracked) {
    if (!t.record.ended) ask.push_back(t.record.id);
  }
  TRY_ASSIGN(auto known, ask_slurm(ask, one_by_one));
  std::string user = user_name(real_user_id());
  std::vector<std::string> ended_lines;
  std::vector<SlurmJobStatus> statuses;
  for (Tracked& t : tracked) {
    std::optional<SlurmJob> slurm = t.record.ended;
    if (auto it = known.find(t.record.id); !slurm && it != known.end()) slurm = it->second;
    if (!t.in_file && !slurm) {
      return fail("no Slurm job {}: gpupool did not submit it and Slurm does not know it", t.record.id);
    }
    if (!t.in_file) {
      t.record.name = slurm->name;
      t.record.stdout_path = slurm->stdout_path;
      t.record.stderr_path = slurm->stderr_path;
      t.record.submit_time = slurm->submit_time.value_or(0);
      t.record.partition = slurm->partition;
    }
    TRY_ASSIGN(SlurmJobStatus status, slurm_job_status(t.record, slurm, user));
    status.job.owner.uid = real_user_id();
    if (!t.record.ended && status.known && is_finished(status.job.state)) {
      t.record.ended = slurm;
      if (t.in_file) ended_lines.push_back(ended_record_line(*slurm));
    }
    statuses.push_back(std::move(status));
  }
  if (!ended_lines.empty()) TRY(append_records(ended_lines));
  return statuses;
}

// The jobs with these ids: recorded ones with their record, others to be learnt from Slurm.
Result<std::vector<Tracked>> track(std::span<const JobId> ids) {
  TRY_ASSIGN(std::vector<SlurmRecord> records, read_records());
  std::vector<Tracked> tracked;
  for (JobId id : ids) {
    auto it = std::find_if(records.begin(), records.end(), [id](const SlurmRecord& r) { return r.id == id; });
    Tracked t;
    t.in_file = it != records.end();
    if (t.in_file) {
      t.record = *it;
    } else {
      t.record.id = id;
    }
    tracked.push_back(std::move(t));
  }
  return tracked;
}

}  // namespace

void add_slurm_submit_options(CLI::App& cmd, SlurmSubmitOptions& options) {
  auto* slurm = cmd.add_flag("--slurm", options.enabled,
                             "Hand the job to Slurm (sbatch) instead of gpupoold; prints slurm:ID");
  cmd.add_option("--partition", options.partition, "With --slurm: the Slurm partition")
      ->type_name("NAME")
      ->needs(slurm);
  cmd.add_option("--shard-mib", options.shard_mib,
                 "With --slurm and --mem: MiB per GPU shard, as `gpupool slurm gres-conf --shard-mib` "
                 "configured (default 1024)")
      ->type_name("MIB")
      ->check(whole_number(1, uint64_t{1} << 30))
      ->needs(slurm);
  cmd.add_option("--output", options.output,
                 "With --slurm: the output file, sbatch's pattern (%j, %x, %u; default gpupool-%j.out here)")
      ->type_name("PATTERN")
      ->needs(slurm);
  cmd.add_option("--error", options.error,
                 "With --slurm: the error file (default: --output's file if given, else gpupool-%j.err here)")
      ->type_name("PATTERN")
      ->needs(slurm);
}

Result<int> submit_to_slurm(const JobSpec& spec, const std::string& after, bool hold,
                            const SlurmSubmitOptions& options) {
  SlurmSubmitSettings settings;
  settings.partition = options.partition;
  settings.shard_mib = options.shard_mib;
  settings.output = options.output;
  settings.error = options.error;
  settings.hold = hold;
  if (!after.empty()) {
    TRY_ASSIGN(JobIds ids, parse_any_job_ids(std::array{after}));
    if (!ids.local.empty()) {
      return fail("a Slurm job can wait only for Slurm jobs (slurm:ID), not for gpupoold's job {}",
                  ids.local.front());
    }
    settings.after = ids.slurm;
  }
  if (spec.gpus.slice_mib) {  // a slice is shards: ask whether the cluster has any
    std::vector<std::string> sinfo = {"sinfo", "--noheader", "--format=%G"};
    if (!options.partition.empty()) sinfo.push_back("--partition=" + options.partition);
    TRY_ASSIGN(ProgramOutcome offered, run_slurm(sinfo));
    if (offered.exit_code != 0) return fail("sinfo: {}", said(offered));
    TRY_ASSIGN(settings.cluster_has_shards, sinfo_offers_shards(offered.out));
  }
  TRY_ASSIGN(SbatchCall call, sbatch_call(spec, settings));
  double now = static_cast<double>(std::time(nullptr));
  TRY_ASSIGN(ProgramOutcome submitted, run_slurm(call.argv, call.script));
  if (submitted.exit_code != 0) return fail("{}", said(submitted));
  fmt::print(stderr, "{}", submitted.err);  // sbatch's warnings, as it said them
  TRY_ASSIGN(JobId id, parse_sbatch_answer(submitted.out));

  SlurmRecord record;
  record.id = id;
  record.name = call.name;
  record.argv = spec.argv;
  record.cwd = spec.cwd;
  SlurmFilenameFields fields{id, call.name, user_name(real_user_id())};
  TRY_ASSIGN(record.stdout_path, expand_slurm_filename(call.output_pattern, fields));
  TRY_ASSIGN(record.stderr_path, expand_slurm_filename(call.error_pattern, fields));
  record.submit_time = now;
  record.gpu_count = spec.gpus.count;
  record.slice_mib = spec.gpus.slice_mib;
  record.time_limit_s = spec.time_limit_s;
  record.partition = options.partition;
  record.after = settings.after;
  fmt::print("{}\n", slurm_id_text(id));
  std::fflush(stdout);
  Result<void> recorded = append_records({submitted_record_line(record)});
  if (!recorded.ok()) {
    return fail("Slurm took it, but gpupool could not record it, so `gpupool jobs` will not list it: {}",
                recorded.error().message);
  }
  return 0;
}

Result<std::optional<std::vector<SlurmJobStatus>>> recorded_slurm_jobs() {
  TRY_ASSIGN(std::vector<SlurmRecord> records, read_records());
  if (records.empty()) return std::optional<std::vector<SlurmJobStatus>>();
  std::vector<Tracked> tracked;
  for (SlurmRecord& record : records) tracked.push_back({std::move(record), true});
  TRY_ASSIGN(std::vector<SlurmJobStatus> statuses, refresh(tracked, false));
  return std::optional<std::vector<SlurmJobStatus>>(std::move(statuses));
}

Result<std::vector<SlurmJobStatus>> slurm_jobs_now(std::span<const JobId> ids, bool one_by_one) {
  TRY_ASSIGN(std::vector<Tracked> tracked, track(ids));
  return refresh(tracked, one_by_one);
}

int act_on_slurm_jobs(protocol::JobAction action, std::span<const JobId> ids) {
  if (ids.empty()) return kExitOk;
  if (action == protocol::JobAction::Cancel) {
    // Quiet, scancel says nothing of an unknown or finished job and exits 0; verbose, it names each.
    std::vector<std::string> argv = {"scancel", "--verbose"};
    for (JobId id : ids) argv.push_back(std::to_string(id));
    Result<ProgramOutcome> cancelled = run_slurm(argv);
    if (!cancelled.ok()) return report(cancelled.error());
    int code = cancelled->exit_code == 0 ? kExitOk : kExitError;
    for (const std::string& line : split(cancelled->err, '\n')) {
      if (line.find("error:") == std::string::npos) continue;
      fmt::print(stderr, "gpupool: {}\n", printable(line, 400));
      code = kExitError;
    }
    return code;
  }
  // uhold: a hold its user may release, whoever placed it (an administrator's `hold` is not).
  Result<ProgramOutcome> changed = run_slurm({"scontrol", action == protocol::JobAction::Hold ? "uhold" : "release",
                                              fmt::format("{}", fmt::join(ids, ","))});
  if (!changed.ok()) return report(changed.error());
  if (changed->exit_code == 0) return kExitOk;
  return report(fail("scontrol: {}", said(*changed)));
}

Result<std::vector<SlurmJobStatus>> wait_for_slurm_jobs(std::span<const JobId> ids) {
  if (ids.empty()) return std::vector<SlurmJobStatus>();
  TRY_ASSIGN(std::vector<Tracked> tracked, track(ids));
  // Gently on slurmctld: from a quarter of a second up to every 5 s.
  auto pause = std::chrono::milliseconds(250);
  for (;;) {
    TRY_ASSIGN(std::vector<SlurmJobStatus> statuses, refresh(tracked, false));
    if (std::all_of(statuses.begin(), statuses.end(),
                    [](const SlurmJobStatus& s) { return !s.known || is_finished(s.job.state); })) {
      return statuses;
    }
    std::this_thread::sleep_for(pause);
    pause = std::min<std::chrono::milliseconds>(pause * 3 / 2, std::chrono::seconds(5));
  }
}

nlohmann::json slurm_job_json(const SlurmJobStatus& status) {
  nlohmann::json object = protocol::job_to_json(status.job);
  object["id"] = slurm_id_text(status.job.id);
  if (!status.known) object["state"] = "unknown";
  object["slurm"] = status.slurm ? slurm_job_to_json(*status.slurm) : nlohmann::json{{"id", status.job.id}};
  return object;
}

std::vector<std::pair<std::string, std::string>> slurm_detail_lines(const SlurmJobStatus& status) {
  if (!status.slurm) return {{"slurm", "Slurm has forgotten this job (no accounting or job completion log)"}};
  const SlurmJob& slurm = *status.slurm;
  std::vector<std::pair<std::string, std::string>> lines = {
      {"slurm state", slurm.state + (slurm.reason.empty() ? "" : " (" + slurm.reason + ")")}};
  auto add = [&](const char* key, const std::string& value) {
    if (!value.empty()) lines.emplace_back(key, value);
  };
  add("partition", slurm.partition);
  add("nodes", slurm.nodes);
  add("tres", slurm.tres);
  add("slurm limit", slurm.time_limit);
  add("said by", slurm.source);
  return lines;
}

}  // namespace gpupool::cli
