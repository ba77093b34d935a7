#include "monitor/dashboard.h"

#include <algorithm>
#include <cmath>
#include <set>

#include <fmt/format.h>

#include "base/display_text.h"
#include "jobs/job_text.h"
#include "sched/slice_watch.h"

namespace gpupool {
namespace {

constexpr size_t kMinHolderWidth = 24;
constexpr unsigned kIdlePercent = 1;  // "about 0 %": NVML reports 0 or 1 for an idle context

std::string bar(std::optional<double> fraction, size_t cells) {
  std::string inside(cells, ' ');
  if (fraction) {
    auto filled = static_cast<size_t>(std::lround(std::clamp(*fraction, 0.0, 1.0) * static_cast<double>(cells)));
    std::fill_n(inside.begin(), filled, '|');
  }
  return "[" + inside + "]";
}

std::string gib(uint64_t mib, bool tenths) {
  double g = static_cast<double>(mib) / 1024.0;
  return tenths ? fmt::format("{:.1f}", g) : fmt::format("{:.0f}", g);
}

std::string memory_text(const Gpu& gpu) {
  if (!gpu.memory_total_mib || !gpu.memory_used_mib) return "n/a";
  bool tenths = *gpu.memory_total_mib < 10 * 1024;
  return gib(*gpu.memory_used_mib, tenths) + "/" + gib(*gpu.memory_total_mib, tenths) + "G";
}

std::optional<double> memory_fraction(const Gpu& gpu) {
  if (!gpu.memory_total_mib || !gpu.memory_used_mib || *gpu.memory_total_mib == 0) return std::nullopt;
  return static_cast<double>(*gpu.memory_used_mib) / static_cast<double>(*gpu.memory_total_mib);
}

std::vector<const Job*> running_on(const DashboardInput& input, unsigned gpu) {
  std::vector<const Job*> jobs;
  for (const Job& job : input.jobs) {
    if (job.state == JobState::Running && std::find(job.gpus.begin(), job.gpus.end(), gpu) != job.gpus.end()) {
      jobs.push_back(&job);
    }
  }
  return jobs;
}

// A lease whose job the daemon lists ("job-12" for job 12) is shown as that job, not twice.
bool lease_of_listed_job(const DashboardInput& input, const CardLease& lease) {
  auto id = job_of_lease(lease.job);
  return id && std::any_of(input.jobs.begin(), input.jobs.end(), [&](const Job& job) { return job.id == *id; });
}

std::optional<double> idle_for(const DashboardInput& input, const Gpu& gpu) {
  auto since = input.idle_since.find(gpu.index);
  if (since == input.idle_since.end()) return std::nullopt;
  return input.now - since->second;
}

bool flagged_idle(const DashboardInput& input, const Gpu& gpu) {
  auto jobs = running_on(input, gpu.index);
  if (!jobs.empty()) {
    return std::any_of(jobs.begin(), jobs.end(), [&](const Job* job) { return input.idle_jobs.count(job->id) > 0; });
  }
  auto idle = idle_for(input, gpu);
  return idle && *idle >= input.idle_flag_after_s;
}

// "IDLE 0:06:40 " with top's own measure, "IDLE " with the daemon's flag (which has no duration).
std::string idle_mark(const DashboardInput& input, const Gpu& gpu) {
  if (!flagged_idle(input, gpu)) return "";
  auto idle = idle_for(input, gpu);
  return idle ? fmt::format("IDLE {} ", duration_text(*idle)) : "IDLE ";
}

struct Columns {
  size_t name = 12;
  size_t bar = 4;  // cells inside each bar
  size_t holder = kMinHolderWidth;
};

// Fixed parts: "IDX " 4, name+1, util bar+2+" 100%"+1, memory bar+2+" 141/141G"+1, "TEMP"+1,
// "POWER"+1. The bars grow to 12 cells; the holder takes the rest.
Columns columns_for(size_t width) {
  Columns c;
  if (width >= 120) c.name = 20;
  size_t fixed = 4 + (c.name + 1) + (7 + 1) + (11 + 1) + 5 + 6;
  size_t for_bars = width > fixed + kMinHolderWidth ? width - fixed - kMinHolderWidth : 0;
  c.bar = std::clamp<size_t>(for_bars / 2, 4, 12);
  size_t used = fixed + 2 * c.bar;
  c.holder = width > used ? width - used : 0;
  return c;
}

std::string gpu_header(const Columns& c) {
  return fmt::format("{:>3} {} {} {} {:>4} {:>5} {}", "GPU", pad_cells("NAME", c.name), pad_cells("UTIL", c.bar + 7),
                     pad_cells("MEMORY", c.bar + 11), "TEMP", "POWER", "HELD BY");
}

std::string gpu_row(const DashboardInput& input, const Gpu& gpu, const Columns& c) {
  std::string name = gpu.name.empty() ? "?" : gpu.name;
  if (name.rfind("NVIDIA ", 0) == 0) name = name.substr(7);  // every card says it
  if (gpu.fault) return fmt::format("{:>3} {} FAULT: {}", gpu.index, pad_cells(name, c.name), *gpu.fault);
  std::optional<double> util;
  if (gpu.utilization_gpu) util = *gpu.utilization_gpu / 100.0;
  std::string util_text = gpu.utilization_gpu ? fmt::format("{}%", *gpu.utilization_gpu) : "n/a";
  std::string temp = gpu.temperature_c ? fmt::format("{}C", *gpu.temperature_c) : "n/a";
  std::string power = gpu.power_w ? fmt::format("{:.0f}W", *gpu.power_w) : "n/a";
  CardUse use = card_use(input, gpu);
  std::string holder = idle_mark(input, gpu) + (use.holder.empty() ? "-" : use.holder);
  return fmt::format("{:>3} {} {} {:>4} {} {:>8} {:>4} {:>5} {}", gpu.index, pad_cells(name, c.name), bar(util, c.bar),
                     util_text, bar(memory_fraction(gpu), c.bar), memory_text(gpu), temp, power, holder);
}

bool user_matches(const DashboardView& view, const std::string& user) { return !view.user || *view.user == user; }

std::vector<const Job*> queue_rows(const DashboardInput& input, const DashboardView& view) {
  std::vector<const Job*> rows;
  for (const Job& job : input.jobs) {
    if (!is_finished(job.state) && user_matches(view, job.owner.user)) rows.push_back(&job);
  }
  auto rank = [](JobState s) { return s == JobState::Running ? 0 : s == JobState::Queued ? 1 : 2; };
  std::stable_sort(rows.begin(), rows.end(), [&](const Job* a, const Job* b) {
    return std::pair(rank(a->state), a->id) < std::pair(rank(b->state), b->id);
  });
  return rows;
}

std::vector<ScreenLine> queue_section(const DashboardInput& input, const DashboardView& view, size_t width) {
  std::vector<ScreenLine> lines;
  if (!input.daemon_running) {
    lines.push_back({fit_cells("No gpupoold is running: no queue to show (leases and processes are above).", width),
                     LineStyle::Dim});
    return lines;
  }
  auto rows = queue_rows(input, view);
  size_t running = 0, queued = 0, held = 0, suspended = 0;
  for (const Job* job : rows) {
    running += job->state == JobState::Running;
    queued += job->state == JobState::Queued;
    held += job->state == JobState::Held;
    suspended += job->state == JobState::Suspended;
  }
  lines.push_back({fit_cells(fmt::format("QUEUE  {} running, {} queued, {} held{}{}", running, queued, held,
                                   suspended > 0 ? fmt::format(", {} suspended", suspended) : "",
                                   view.user ? " (user " + *view.user + ")" : ""),
                       width),
                   LineStyle::Title});
  for (const std::string& notice : input.notices) lines.push_back({fit_cells(notice, width), LineStyle::Flagged});
  lines.push_back({fit_cells(fmt::format("{:>5} {:<9} {:<8} {:<14} {:>7} {:<7} {:>7} {}", "ID", "STATE", "USER", "NAME",
                                   "REQ", "GPUS", "TIME", "REASON"),
                       width),
                   LineStyle::Header});
  for (const Job* job : rows) {
    double since = job->state == JobState::Running ? job->start_time.value_or(input.now) : job->submit_time;
    std::optional<std::string> overrun = slice_overrun_warning(*job);
    lines.push_back({fit_cells(fmt::format("{:>5} {:<9} {} {} {:>7} {:<7} {:>7} {}", job->id, to_string(job->state),
                                     pad_cells(job->owner.user, 8), pad_cells(display_name(*job), 14), request_text(*job),
                                     gpu_list_text(job->gpus), duration_text(input.now - since),
                                     overrun.value_or(job->reason)),
                         width),
                     overrun ? LineStyle::Flagged : LineStyle::Normal});
  }
  if (rows.empty()) lines.push_back({"The queue is empty.", LineStyle::Dim});
  return lines;
}

std::vector<ScreenLine> details_section(const DashboardInput& input, const Gpu& gpu, size_t width) {
  std::vector<std::string> text;
  text.push_back(fmt::format("GPU {}  {}  {}  bus {}", gpu.index, gpu.name, gpu.uuid, gpu.pci_bus_id));
  text.push_back(fmt::format(
      "utilisation {}  memory {} MiB of {} MiB  temperature {}  power {} of {}",
      gpu.utilization_gpu ? fmt::format("{}%", *gpu.utilization_gpu) : "n/a",
      gpu.memory_used_mib ? std::to_string(*gpu.memory_used_mib) : "n/a",
      gpu.memory_total_mib ? std::to_string(*gpu.memory_total_mib) : "n/a",
      gpu.temperature_c ? fmt::format("{}C", *gpu.temperature_c) : "n/a",
      gpu.power_w ? fmt::format("{:.0f} W", *gpu.power_w) : "n/a",
      gpu.power_limit_w ? fmt::format("{:.0f} W", *gpu.power_limit_w) : "n/a"));
  // Utilisation says a kernel ran; the profiling counters say how much of the GPU worked.
  if (gpu.sm_active) {
    text.push_back(fmt::format("SM active {:.0f}%{}", *gpu.sm_active * 100,
                               gpu.tensor_active ? fmt::format("  tensor cores {:.0f}%", *gpu.tensor_active * 100) : ""));
  }
  if (auto idle = idle_for(input, gpu)) text.push_back(fmt::format("held at about 0 % for {}", duration_text(*idle)));
  for (const GpuProcess& p : gpu.processes) {
    text.push_back(fmt::format("  pid {:<7} {:<12} {:>10}  {}", p.pid, process_user_text(p),
                               p.used_memory_mib ? fmt::format("{} MiB", *p.used_memory_mib) : "n/a",
                               process_command_text(p)));
  }
  for (const CardLease& lease : input.leases) {
    if (lease.gpu != gpu.index) continue;
    std::string what = lease.slice_mib ? fmt::format(", {} MiB slice", *lease.slice_mib) : "";
    if (const MigDevice* device = mig_device_with_uuid(gpu, lease.mig_uuid)) {
      what = fmt::format(", MIG device {}:{} ({})", gpu.index, device->index, device->profile);
    }
    text.push_back(fmt::format("lease: {}, pid {}{}", lease_holder_text(lease.job, lease.user), lease.pid, what));
  }
  auto jobs = running_on(input, gpu.index);
  if (jobs.empty()) text.push_back("No gpupool job runs on this GPU.");
  for (const Job* job : jobs) {
    text.push_back(fmt::format("{}  {}", job_label(job->id, job->owner.user, display_name(*job)),
                               to_string(job->spec.kind)));
    if (job->details_withheld) {
      text.push_back("  command  (private)");
    } else {
      std::string command;
      for (const std::string& arg : job->spec.argv) command += (command.empty() ? "" : " ") + arg;
      text.push_back("  command  " + (command.empty() ? std::string("(interactive)") : command));
      text.push_back("  cwd      " + job->spec.cwd);
    }
    text.push_back(fmt::format("  gpus     {} (asked for {})", gpu_list_text(job->gpus), request_text(*job)));
    if (job->start_time) text.push_back("  running  " + duration_text(input.now - *job->start_time));
    if (!job->stdout_path.empty()) text.push_back("  stdout   " + job->stdout_path);
  }
  std::vector<ScreenLine> lines;
  lines.push_back({fit_cells("DETAILS  (Enter or Esc to go back)", width), LineStyle::Title});
  for (auto& t : text) lines.push_back({fit_cells(std::move(t), width), LineStyle::Normal});
  return lines;
}

std::vector<ScreenLine> help_section(size_t width) {
  std::vector<ScreenLine> lines{{fit_cells("KEYS", width), LineStyle::Title}};
  for (const char* t : {"q          quit", "s          sort the GPUs: index, utilisation, memory used, user",
                        "u          show one user's GPUs and jobs (each in turn, then all)",
                        "up / down  select a GPU (also k / j)", "Enter / d  the selected GPU's job in full",
                        "Esc        back", "?          this help"}) {
    lines.push_back({fit_cells(t, width), LineStyle::Normal});
  }
  return lines;
}

std::vector<std::string> users_seen(const DashboardInput& input) {
  std::set<std::string> users;
  for (const Gpu& gpu : input.machine.gpus) {
    CardUse use = card_use(input, gpu);
    users.insert(use.users.begin(), use.users.end());
  }
  for (const Job& job : input.jobs) users.insert(job.owner.user);
  return {users.begin(), users.end()};
}

}  // namespace

const char* to_string(SortKey key) {
  switch (key) {
    case SortKey::Index: return "index";
    case SortKey::Utilization: return "utilisation";
    case SortKey::Memory: return "memory";
    case SortKey::User: return "user";
  }
  return "index";
}

CardUse card_use(const DashboardInput& input, const Gpu& gpu) {
  CardUse use;
  auto jobs = running_on(input, gpu.index);
  std::vector<const CardLease*> others;
  for (const CardLease& lease : input.leases) {
    if (lease.gpu == gpu.index && !lease_of_listed_job(input, lease)) others.push_back(&lease);
  }
  for (const Job* job : jobs) use.users.push_back(job->owner.user);
  for (const CardLease* lease : others) use.users.push_back(lease->user);
  if (use.users.empty()) {
    if (gpu.processes.empty()) return use;
    for (const GpuProcess& p : gpu.processes) use.users.push_back(process_user_text(p));
    const GpuProcess& first = gpu.processes.front();
    use.external = true;
    use.user = use.users.front();
    use.holder = fmt::format("outside: pid {} {}", first.pid, use.user);
    if (gpu.processes.size() > 1) use.holder += fmt::format(" +{}", gpu.processes.size() - 1);
    return use;
  }
  use.user = use.users.front();
  if (!jobs.empty()) use.job = jobs.front()->id;
  if (use.users.size() == 1) {
    use.holder = jobs.empty() ? lease_holder_text(others.front()->job, use.user)
                              : job_label(jobs.front()->id, use.user, display_name(*jobs.front()));
    return use;
  }
  std::string names;
  for (const std::string& user : use.users) names += (names.empty() ? "" : ", ") + user;
  use.holder = fmt::format("{} holders: {}", use.users.size(), names);
  return use;
}

std::vector<const Gpu*> shown_gpus(const DashboardInput& input, const DashboardView& view) {
  std::vector<const Gpu*> gpus;
  for (const Gpu& gpu : input.machine.gpus) {
    if (!view.user) {
      gpus.push_back(&gpu);
      continue;
    }
    CardUse use = card_use(input, gpu);
    bool theirs = std::find(use.users.begin(), use.users.end(), *view.user) != use.users.end();
    for (const GpuProcess& p : gpu.processes) theirs = theirs || p.user == *view.user;
    if (theirs) gpus.push_back(&gpu);
  }
  auto by = [&](auto key) {
    std::stable_sort(gpus.begin(), gpus.end(), [&](const Gpu* a, const Gpu* b) { return key(*a) > key(*b); });
  };
  switch (view.sort) {
    case SortKey::Index: break;
    case SortKey::Utilization: by([](const Gpu& g) { return g.utilization_gpu.value_or(0); }); break;
    case SortKey::Memory: by([](const Gpu& g) { return g.memory_used_mib.value_or(0); }); break;
    case SortKey::User:
      std::stable_sort(gpus.begin(), gpus.end(), [&](const Gpu* a, const Gpu* b) {
        std::string ua = card_use(input, *a).user, ub = card_use(input, *b).user;
        return std::pair(ua.empty(), ua) < std::pair(ub.empty(), ub);  // free cards last
      });
      break;
  }
  return gpus;
}

std::vector<ScreenLine> render_dashboard(const DashboardInput& input, const DashboardView& view, size_t width,
                                         size_t height) {
  Columns c = columns_for(width);
  auto gpus = shown_gpus(input, view);
  size_t held = 0, flagged = 0;
  for (const Gpu& gpu : input.machine.gpus) {
    held += !card_use(input, gpu).holder.empty();
    flagged += flagged_idle(input, gpu);
  }
  std::string title = fmt::format("gpupool top  {} GPUs, {} in use{}  sort: {}{}  {}", input.machine.gpus.size(),
                                  held, flagged ? fmt::format(", {} idle too long", flagged) : "",
                                  to_string(view.sort), view.user ? "  user: " + *view.user : "", input.source);
  size_t clock_room = input.clock.size() + 1;
  std::string top_line = width > clock_room ? pad_cells(title, width - clock_room) + " " + input.clock : title;

  std::vector<ScreenLine> frame;
  frame.push_back({fit_cells(top_line, width), LineStyle::Title});
  frame.push_back({fit_cells(gpu_header(c), width), LineStyle::Header});

  std::vector<ScreenLine> section;
  if (view.help) {
    section = help_section(width);
  } else if (view.details && view.selected < gpus.size()) {
    section = details_section(input, *gpus[view.selected], width);
  } else {
    section = queue_section(input, view, width);
  }
  // The GPU rows come first; the section below gets at least three lines when it can.
  size_t room = height > 4 ? height - 4 : 1;
  size_t gpu_room = std::max<size_t>(1, std::min(gpus.size(), room > 3 ? room - 3 : 1));
  if (gpus.size() <= room && room - gpus.size() >= std::min<size_t>(3, section.size())) gpu_room = gpus.size();
  size_t first = view.selected >= gpu_room ? view.selected - gpu_room + 1 : 0;
  for (size_t i = first; i < gpus.size() && i < first + gpu_room; ++i) {
    LineStyle style = i == view.selected ? LineStyle::Selected
                      : flagged_idle(input, *gpus[i]) ? LineStyle::Flagged
                                                      : LineStyle::Normal;
    frame.push_back({fit_cells(gpu_row(input, *gpus[i], c), width), style});
  }
  if (gpus.empty()) {
    frame.push_back({fit_cells(view.user ? "No GPU is in use by " + *view.user + "." : "No GPU found.", width),
                     LineStyle::Dim});
  }
  frame.push_back({"", LineStyle::Normal});
  // A frame printed once has no keys to press: its last line is the section's too.
  const size_t key_bar = view.key_bar ? 1 : 0;
  for (auto& line : section) {
    if (frame.size() + key_bar >= height) break;
    frame.push_back(std::move(line));
  }
  while (frame.size() + key_bar < height) frame.push_back({"", LineStyle::Normal});
  if (!view.key_bar) return frame;
  std::string keys = fmt::format("q quit  s sort  u user: {}  up/down select  Enter details  ? help",
                                 view.user.value_or("all"));
  frame.push_back({fit_cells(keys, width), LineStyle::Dim});
  return frame;
}

DashboardView apply_key(const DashboardInput& input, DashboardView view, DashboardKey key) {
  switch (key) {
    case DashboardKey::Sort:
      view.sort = static_cast<SortKey>((static_cast<int>(view.sort) + 1) % 4);
      break;
    case DashboardKey::User: {
      auto users = users_seen(input);
      if (!view.user) {
        if (!users.empty()) view.user = users.front();
      } else {
        auto it = std::upper_bound(users.begin(), users.end(), *view.user);
        view.user = it == users.end() ? std::nullopt : std::optional<std::string>(*it);
      }
      view.selected = 0;
      view.details = false;
      break;
    }
    case DashboardKey::Up:
      if (view.selected > 0) --view.selected;
      break;
    case DashboardKey::Down:
      if (view.selected + 1 < shown_gpus(input, view).size()) ++view.selected;
      break;
    case DashboardKey::Details:
      view.details = !view.details && !shown_gpus(input, view).empty();
      view.help = false;
      break;
    case DashboardKey::Close:
      view.details = false;
      view.help = false;
      break;
    case DashboardKey::Help:
      view.help = !view.help;
      view.details = false;
      break;
    case DashboardKey::Other: break;
  }
  size_t shown = shown_gpus(input, view).size();
  if (view.selected >= shown) view.selected = shown > 0 ? shown - 1 : 0;
  return view;
}

void track_idle(std::map<unsigned, double>& idle_since, const DashboardInput& input) {
  for (const Gpu& gpu : input.machine.gpus) {
    CardUse use = card_use(input, gpu);
    bool idle_but_held = !use.holder.empty() && !use.external && !use.job && gpu.utilization_gpu &&
                         *gpu.utilization_gpu <= kIdlePercent;
    if (!idle_but_held) {
      idle_since.erase(gpu.index);
    } else if (!idle_since.count(gpu.index)) {
      idle_since[gpu.index] = input.now;
    }
  }
}

}  // namespace gpupool
