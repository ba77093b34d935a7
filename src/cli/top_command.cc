// gpupool top: the live dashboard. Each refresh samples the GPUs (NVML), reads the leases and
// asks the daemon, if one runs, for its queue; src/monitor/dashboard.h lays the frame out and
// this file only draws it with ncurses and turns keys into DashboardKeys.
#include <curses.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <ctime>

#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/gpu_holders.h"
#include "cli/lease_options.h"
#include "gpu/gpu_backend.h"
#include "monitor/dashboard.h"
#include "os/clock.h"
#include "os/environment.h"
#include "os/fd.h"
#include "os/signals.h"
#include "sim/open_backend.h"

namespace gpupool::cli {
namespace {

volatile std::sig_atomic_t stop_requested = 0;

void request_stop(int) { stop_requested = 1; }

struct TopOptions {
  double interval_s = 1.0;
  std::string idle_after = "10m";
  bool once = false;
};

// One sample of everything the dashboard shows. The GPUs must answer; the leases and the daemon
// are shown when they can be read.
Result<void> sample(GpuBackend& backend, DashboardInput& input) {
  // Each refresh measures the profiling activity since the one before.
  TRY_ASSIGN(input.machine, backend.discover(DiscoveryScope{.links = false, .processes = true, .activity = true}));
  input.source = backend.description();
  input.now = unix_now();
  input.clock = clock_of_day(input.now);
  read_gpu_holders(input);
  track_idle(input.idle_since, input);
  return {};
}

std::pair<size_t, size_t> plain_size() {
  auto number = [](const char* name, size_t fallback) {
    std::optional<std::string> text = environment_variable(name);
    long value = text ? std::strtol(text->c_str(), nullptr, 10) : 0;
    return value > 0 ? static_cast<size_t>(value) : fallback;
  };
  return {number("COLUMNS", 80), number("LINES", 24)};
}

DashboardKey key_of(int ch) {
  switch (ch) {
    case 's': case 'S': return DashboardKey::Sort;
    case 'u': case 'U': return DashboardKey::User;
    case KEY_UP: case 'k': return DashboardKey::Up;
    case KEY_DOWN: case 'j': return DashboardKey::Down;
    case '\n': case '\r': case KEY_ENTER: case 'd': return DashboardKey::Details;
    case 27: return DashboardKey::Close;  // Escape
    case '?': case 'h': return DashboardKey::Help;
    default: return DashboardKey::Other;
  }
}

enum Pair : short { kTitlePair = 1, kFlaggedPair = 2 };

attr_t attributes(LineStyle style) {
  switch (style) {
    case LineStyle::Normal: return A_NORMAL;
    case LineStyle::Title: return A_BOLD | COLOR_PAIR(kTitlePair);
    case LineStyle::Header: return A_REVERSE;
    case LineStyle::Selected: return A_REVERSE | A_BOLD;
    case LineStyle::Flagged: return A_BOLD | COLOR_PAIR(kFlaggedPair);
    case LineStyle::Dim: return A_DIM;
  }
  return A_NORMAL;
}

// The terminal in curses mode for as long as this lives, restored however the loop ends.
class Screen {
 public:
  Screen() {
    initscr();
    cbreak();
    noecho();
    keypad(stdscr, TRUE);
    curs_set(0);
    set_escdelay(25);
    timeout(100);  // keys stay responsive, and a stop request is seen within 0.1 s
    if (has_colors()) {
      start_color();
      use_default_colors();
      init_pair(kTitlePair, COLOR_CYAN, -1);
      init_pair(kFlaggedPair, COLOR_YELLOW, -1);
    }
  }
  ~Screen() { endwin(); }
  Screen(const Screen&) = delete;
  Screen& operator=(const Screen&) = delete;

  void draw(const std::vector<ScreenLine>& frame) {
    erase();
    for (size_t row = 0; row < frame.size() && static_cast<int>(row) < LINES; ++row) {
      attrset(attributes(frame[row].style));
      mvaddnstr(static_cast<int>(row), 0, frame[row].text.c_str(), COLS);
    }
    attrset(A_NORMAL);
    ::refresh();  // ncurses's, not a gpupool function
  }
};

Result<int> run_top(const TopOptions& options) {
  TRY_ASSIGN(auto idle_after, parse_duration(options.idle_after));
  if (options.interval_s < 0.1) return fail("--interval must be at least 0.1 s, not {}", options.interval_s);
  TRY_ASSIGN(auto backend, open_gpu_backend());
  DashboardInput input;
  input.idle_flag_after_s = std::chrono::duration<double>(idle_after).count();
  DashboardView view;
  TRY(sample(*backend, input));
  if (options.once) {
    view.key_bar = false;  // no keys to press in a script's output
    auto [width, height] = plain_size();
    for (const ScreenLine& line : render_dashboard(input, view, width, height)) fmt::print("{}\n", line.text);
    return 0;
  }
  if (!is_terminal(STDIN_FILENO) || !is_terminal(STDOUT_FILENO)) {
    return fail("top needs a terminal; `gpupool top --once`, `gpupool list --watch` or `--json` do not");
  }
  set_signal_handler({SIGINT, SIGTERM, SIGHUP}, request_stop);
  Screen screen;
  auto next_sample = std::chrono::steady_clock::now();
  std::string last_error;
  while (!stop_requested) {
    auto now = std::chrono::steady_clock::now();
    if (now >= next_sample) {
      auto sampled = sample(*backend, input);
      last_error = sampled ? "" : sampled.error().message;
      next_sample = now + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                              std::chrono::duration<double>(options.interval_s));
    }
    view = apply_key(input, view, DashboardKey::Other);  // keeps the selection on a card shown
    auto frame = render_dashboard(input, view, static_cast<size_t>(std::max(COLS, 1)),
                                  static_cast<size_t>(std::max(LINES, 1)));
    if (!last_error.empty() && frame.size() > 1) frame[frame.size() - 2] = {"sample failed: " + last_error,
                                                                            LineStyle::Flagged};
    screen.draw(frame);
    int ch = getch();
    if (ch == 'q' || ch == 'Q') break;
    if (ch != ERR && ch != KEY_RESIZE) view = apply_key(input, view, key_of(ch));
  }
  return 0;
}

}  // namespace

void add_top_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("top", "Live dashboard: every GPU's use and who holds it, and the queue");
  auto options = std::make_shared<TopOptions>();
  cmd->add_option("-n,--interval", options->interval_s, "Seconds between samples (default 1)");
  cmd->add_option("--idle-after", options->idle_after,
                  "Flag a GPU held by a lease alone at about 0 % utilisation for this long (default 10m; s, m, h); "
                  "a daemon job's GPUs carry the daemon's idle flag")
      ->type_name("DURATION");
  cmd->add_flag("--once", options->once, "Print one frame as text (COLUMNS x LINES, default 80x24) and exit");
  cmd->callback([&exit_code, options] { run_command(exit_code, [&] { return run_top(*options); }); });
}

}  // namespace gpupool::cli
