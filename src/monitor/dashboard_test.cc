#include "monitor/dashboard.h"

#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <algorithm>

#include "jobs/job_text.h"

namespace gpupool {
namespace {

Gpu card(unsigned index, unsigned util, uint64_t used_mib) {
  Gpu gpu;
  gpu.index = index;
  gpu.name = "NVIDIA H200";
  gpu.uuid = "GPU-" + std::to_string(index);
  gpu.pci_bus_id = "00000000:0" + std::to_string(index) + ":00.0";
  gpu.utilization_gpu = util;
  gpu.memory_total_mib = 143771;
  gpu.memory_used_mib = used_mib;
  gpu.temperature_c = 40 + index;
  gpu.power_w = 100.0 + index;
  return gpu;
}

Job running_job(JobId id, const std::string& user, std::vector<unsigned> gpus, const std::string& name) {
  Job job;
  job.id = id;
  job.owner.user = user;
  job.spec.name = name;
  job.spec.argv = {"python", "train.py"};
  job.spec.cwd = "/home/" + user;
  job.spec.gpus.count = static_cast<unsigned>(gpus.size());
  job.state = JobState::Running;
  job.gpus = std::move(gpus);
  job.submit_time = 1000;
  job.start_time = 1100;
  job.stdout_path = "/var/lib/gpupool/logs/" + std::to_string(id) + ".out";
  return job;
}

Job queued_job(JobId id, const std::string& user, unsigned gpus) {
  Job job;
  job.id = id;
  job.owner.user = user;
  job.spec.argv = {"sleep", "60"};
  job.spec.gpus.count = gpus;
  job.submit_time = 1150;
  job.reason = "waiting for GPUs";
  return job;
}

// Eight H200s: 0-1 job 12 (alice), 2 a lease from `gpupool run` (bob), 3 someone outside
// gpupool (carol), 4 two slices (alice's job 13 and dave's lease), 5-7 free; two jobs queued.
DashboardInput busy_machine() {
  DashboardInput input;
  for (unsigned i = 0; i < 8; ++i) input.machine.gpus.push_back(card(i, i < 5 ? 90 - i * 10 : 0, i < 5 ? 40000 : 0));
  input.machine.gpus[3].processes = {GpuProcess{4242, ProcessKind::Compute, 30000, "carol", "python eval.py", std::nullopt},
                                     GpuProcess{4243, ProcessKind::Compute, 10000, "carol", "python eval.py", std::nullopt}};
  input.jobs = {running_job(12, "alice", {0, 1}, "train"), running_job(13, "alice", {4}, "notebook"),
                queued_job(14, "erin", 8), queued_job(15, "alice", 1)};
  input.jobs[1].spec.gpus.slice_mib = 20480;
  input.leases = {CardLease{0, "job-12", "root", 1, std::nullopt}, CardLease{1, "job-12", "root", 1, std::nullopt},
                  CardLease{2, "run-777", "bob", 777, std::nullopt}, CardLease{4, "job-13", "root", 1, 20480},
                  CardLease{4, "nb-dave", "dave", 888, 20480}};
  input.daemon_running = true;
  input.source = "simulated hgx-h200";
  input.now = 1700;
  input.clock = "12:00:00";
  return input;
}

std::string all_text(const std::vector<ScreenLine>& frame) {
  std::string text;
  for (const auto& line : frame) text += line.text + "\n";
  return text;
}

const ScreenLine& row_of_gpu(const std::vector<ScreenLine>& frame, unsigned index) {
  // GPU rows start after the title and the header, in the view's order.
  for (size_t i = 2; i < frame.size(); ++i) {
    if (frame[i].text.rfind(fmt::format("{:>3} ", index), 0) == 0) return frame[i];
  }
  static const ScreenLine none{"(no such row)"};
  return none;
}

TEST(Dashboard, FillsAnEightyByTwentyFourTerminalExactly) {
  auto frame = render_dashboard(busy_machine(), DashboardView{}, 80, 24);
  ASSERT_EQ(frame.size(), 24u);
  for (const auto& line : frame) EXPECT_LE(line.text.size(), 80u) << line.text;
  EXPECT_EQ(frame[0].style, LineStyle::Title);
  EXPECT_NE(frame[0].text.find("8 GPUs, 5 in use"), std::string::npos) << frame[0].text;
  EXPECT_EQ(frame[0].text.substr(72), "12:00:00");
  EXPECT_NE(frame[1].text.find("HELD BY"), std::string::npos);
  EXPECT_EQ(frame.back().style, LineStyle::Dim);
  EXPECT_NE(frame.back().text.find("q quit"), std::string::npos);
}

TEST(Dashboard, AFramePrintedOnceHasNoKeyBar) {
  DashboardView once;
  once.key_bar = false;
  auto frame = render_dashboard(busy_machine(), once, 80, 24);
  ASSERT_EQ(frame.size(), 24u);
  EXPECT_EQ(all_text(frame).find("q quit"), std::string::npos) << all_text(frame);
  // Where the queue is one line too long for the screen, it gets the key bar's line.
  EXPECT_EQ(all_text(render_dashboard(busy_machine(), DashboardView{}, 80, 17)).find("   15 queued"), std::string::npos);
  EXPECT_NE(all_text(render_dashboard(busy_machine(), once, 80, 17)).find("   15 queued"), std::string::npos);
}

TEST(Dashboard, SaysWhoHoldsEachCard) {
  auto input = busy_machine();
  auto frame = render_dashboard(input, DashboardView{}, 100, 30);
  EXPECT_NE(row_of_gpu(frame, 0).text.find("job 12 (alice, train)"), std::string::npos) << all_text(frame);
  EXPECT_NE(row_of_gpu(frame, 1).text.find("job 12 (alice, train)"), std::string::npos);
  EXPECT_NE(row_of_gpu(frame, 2).text.find("run-777 (bob)"), std::string::npos);
  EXPECT_NE(row_of_gpu(frame, 3).text.find("outside: pid 4242 carol +1"), std::string::npos);
  // The daemon's lease for job 13 is job 13, not a second holder named "job-13".
  EXPECT_NE(row_of_gpu(frame, 4).text.find("2 holders: alice, dave"), std::string::npos);
  EXPECT_NE(row_of_gpu(frame, 5).text.find(" -"), std::string::npos);
  EXPECT_TRUE(card_use(input, input.machine.gpus[3]).external);
  EXPECT_EQ(card_use(input, input.machine.gpus[0]).job, JobId{12});
  EXPECT_EQ(card_use(input, input.machine.gpus[7]).holder, "");
  // A process /proc cannot name (another PID namespace) is someone's all the same.
  input.machine.gpus[7].processes = {GpuProcess{5151, ProcessKind::Compute, 1000, std::nullopt, std::nullopt, std::nullopt}};
  EXPECT_EQ(card_use(input, input.machine.gpus[7]).holder, "outside: pid 5151 unknown user");
  // The daemon's lease of a job it no longer lists still reads as that job.
  input.leases.push_back(CardLease{6, "job-99", "erin", 999, std::nullopt});
  EXPECT_EQ(card_use(input, input.machine.gpus[6]).holder, "job 99 (erin)");
}

TEST(Dashboard, DrawsBarsAndValues) {
  auto frame = render_dashboard(busy_machine(), DashboardView{}, 80, 24);
  const std::string& row = row_of_gpu(frame, 0).text;
  EXPECT_NE(row.find("H200"), std::string::npos) << row;
  EXPECT_EQ(row.find("NVIDIA"), std::string::npos) << "the vendor prefix is left out";
  EXPECT_NE(row.find("90%"), std::string::npos);
  EXPECT_NE(row.find("39/140G"), std::string::npos) << row;
  EXPECT_NE(row.find("40C"), std::string::npos);
  EXPECT_NE(row.find("100W"), std::string::npos);
  EXPECT_NE(row.find("[||||]  90%"), std::string::npos) << row;
  const std::string& free_row = row_of_gpu(frame, 7).text;
  EXPECT_NE(free_row.find("0%"), std::string::npos);
}

TEST(Dashboard, UnsupportedValuesReadNotAvailable) {
  auto input = busy_machine();
  input.machine.gpus[5].utilization_gpu.reset();
  input.machine.gpus[5].power_w.reset();
  input.machine.gpus[6].fault = "GPU is lost";
  auto frame = render_dashboard(input, DashboardView{}, 80, 24);
  EXPECT_NE(row_of_gpu(frame, 5).text.find("n/a"), std::string::npos);
  EXPECT_NE(row_of_gpu(frame, 6).text.find("FAULT: GPU is lost"), std::string::npos);
}

TEST(Dashboard, ListsTheQueueRunningFirst) {
  auto frame = render_dashboard(busy_machine(), DashboardView{}, 80, 24);
  std::string text = all_text(frame);
  EXPECT_NE(text.find("QUEUE  2 running, 2 queued, 0 held"), std::string::npos) << text;
  size_t running = text.find("   12 running");
  size_t queued = text.find("   14 queued");
  ASSERT_NE(running, std::string::npos) << text;
  ASSERT_NE(queued, std::string::npos) << text;
  EXPECT_LT(running, queued);
  EXPECT_NE(text.find("0:10:00"), std::string::npos) << "job 12 has run 600 s";
  EXPECT_NE(text.find("waiting for GPUs"), std::string::npos);
}

TEST(Dashboard, ADrainIsFlaggedAboveTheQueue) {
  auto input = busy_machine();
  input.notices = {"The queue is drained by root: upgrade. No job starts until `gpupool resume`."};
  auto frame = render_dashboard(input, DashboardView{}, 80, 24);
  auto notice = std::find_if(frame.begin(), frame.end(), [](const ScreenLine& line) {
    return line.text.rfind("The queue is drained by root", 0) == 0;
  });
  ASSERT_NE(notice, frame.end()) << all_text(frame);
  EXPECT_EQ(notice->style, LineStyle::Flagged);
  EXPECT_EQ((notice - 1)->text.rfind("QUEUE ", 0), 0u);
}

TEST(Dashboard, WithoutADaemonSaysSo) {
  auto input = busy_machine();
  input.jobs.clear();
  input.daemon_running = false;
  auto frame = render_dashboard(input, DashboardView{}, 80, 24);
  EXPECT_NE(all_text(frame).find("No gpupoold is running"), std::string::npos);
  // The daemon's own leases still show, as the jobs they are.
  EXPECT_NE(row_of_gpu(frame, 0).text.find("job 12 (root)"), std::string::npos);
}

TEST(Dashboard, SortsByUtilisationMemoryAndUser) {
  auto input = busy_machine();
  input.machine.gpus[7].utilization_gpu = 100;
  DashboardView view;
  view.sort = SortKey::Utilization;
  auto gpus = shown_gpus(input, view);
  EXPECT_EQ(gpus.front()->index, 7u);
  EXPECT_EQ(gpus[1]->index, 0u);
  view.sort = SortKey::User;
  gpus = shown_gpus(input, view);
  std::vector<unsigned> order;
  for (const Gpu* g : gpus) order.push_back(g->index);
  // alice (0, 1, 4), bob (2), carol (3), then the free cards in index order.
  EXPECT_EQ(order, (std::vector<unsigned>{0, 1, 4, 2, 3, 5, 6, 7}));
}

TEST(Dashboard, KeysCycleSortAndUsers) {
  auto input = busy_machine();
  DashboardView view;
  view = apply_key(input, view, DashboardKey::Sort);
  EXPECT_EQ(view.sort, SortKey::Utilization);
  for (int i = 0; i < 3; ++i) view = apply_key(input, view, DashboardKey::Sort);
  EXPECT_EQ(view.sort, SortKey::Index);

  std::vector<std::string> seen;
  for (int i = 0; i < 6; ++i) {
    view = apply_key(input, view, DashboardKey::User);
    seen.push_back(view.user.value_or("all"));
  }
  EXPECT_EQ(seen, (std::vector<std::string>{"alice", "bob", "carol", "dave", "erin", "all"}));
}

TEST(Dashboard, AUserFilterShowsTheirCardsAndJobsOnly) {
  auto input = busy_machine();
  DashboardView view;
  view.user = "alice";
  auto gpus = shown_gpus(input, view);
  ASSERT_EQ(gpus.size(), 3u);
  EXPECT_EQ(gpus[2]->index, 4u);
  std::string text = all_text(render_dashboard(input, view, 80, 24));
  EXPECT_NE(text.find("   15 queued"), std::string::npos) << text;
  EXPECT_EQ(text.find("   14 queued"), std::string::npos) << "erin's job is filtered out";
  view.user = "carol";
  EXPECT_EQ(shown_gpus(input, view).size(), 1u) << "carol's processes are on GPU 3";
  view.user = "nobody";
  text = all_text(render_dashboard(input, view, 80, 24));
  EXPECT_NE(text.find("No GPU is in use by nobody."), std::string::npos);
}

TEST(Dashboard, SelectionStaysOnTheCardsShown) {
  auto input = busy_machine();
  DashboardView view;
  view = apply_key(input, view, DashboardKey::Up);
  EXPECT_EQ(view.selected, 0u);
  for (int i = 0; i < 20; ++i) view = apply_key(input, view, DashboardKey::Down);
  EXPECT_EQ(view.selected, 7u);
  auto frame = render_dashboard(input, view, 80, 24);
  EXPECT_EQ(row_of_gpu(frame, 7).style, LineStyle::Selected);
  EXPECT_EQ(row_of_gpu(frame, 0).style, LineStyle::Normal);
}

TEST(Dashboard, DetailsShowTheSelectedCardsJob) {
  auto input = busy_machine();
  DashboardView view;
  view = apply_key(input, view, DashboardKey::Details);
  ASSERT_TRUE(view.details);
  std::string text = all_text(render_dashboard(input, view, 80, 24));
  EXPECT_NE(text.find("DETAILS"), std::string::npos) << text;
  EXPECT_NE(text.find("job 12 (alice, train)  batch"), std::string::npos) << text;
  EXPECT_NE(text.find("command  python train.py"), std::string::npos);
  EXPECT_NE(text.find("stdout   /var/lib/gpupool/logs/12.out"), std::string::npos);
  EXPECT_EQ(text.find("SM active"), std::string::npos) << "no profiling counters, no line";
  input.machine.gpus[0].sm_active = 0.42;
  input.machine.gpus[0].tensor_active = 0.3;
  text = all_text(render_dashboard(input, view, 80, 24));
  EXPECT_NE(text.find("SM active 42%  tensor cores 30%"), std::string::npos) << text;
  view = apply_key(input, view, DashboardKey::Close);
  EXPECT_FALSE(view.details);
  view.selected = 3;
  view = apply_key(input, view, DashboardKey::Details);
  text = all_text(render_dashboard(input, view, 80, 24));
  EXPECT_NE(text.find("pid 4242"), std::string::npos) << text;
  EXPECT_NE(text.find("No gpupool job runs on this GPU."), std::string::npos);
  // A MIG device's lease names the device.
  input.machine.gpus[3].mig_enabled = true;
  input.machine.gpus[3].mig_devices = {MigDevice{1, "MIG-x", 2, 0, 3, 3, 40960, 42, "3g.40gb"}};
  input.leases.push_back(CardLease{3, "run-55", "erin", 55, std::nullopt, "MIG-x"});
  text = all_text(render_dashboard(input, view, 80, 24));
  EXPECT_NE(text.find("lease: run-55 (erin), pid 55, MIG device 3:1 (3g.40gb)"), std::string::npos) << text;
  view = apply_key(input, view, DashboardKey::Help);
  EXPECT_TRUE(view.help);
  EXPECT_FALSE(view.details);
  EXPECT_NE(all_text(render_dashboard(input, view, 80, 24)).find("KEYS"), std::string::npos);
}

TEST(Dashboard, FlagsCardsHeldAtZeroUtilisation) {
  auto input = busy_machine();
  input.idle_flag_after_s = 300;
  input.machine.gpus[2].utilization_gpu = 0;  // bob's lease, idle
  input.machine.gpus[3].utilization_gpu = 0;  // external: not a lease, not flagged
  std::map<unsigned, double> idle;
  track_idle(idle, input);
  EXPECT_EQ(idle, (std::map<unsigned, double>{{2, 1700}}));
  input.now = 1800;
  track_idle(idle, input);
  EXPECT_EQ(idle.at(2), 1700) << "the time it went idle is kept";
  input.idle_since = idle;
  auto frame = render_dashboard(input, DashboardView{}, 80, 24);
  EXPECT_EQ(row_of_gpu(frame, 2).style, LineStyle::Normal) << "100 s is not long enough";
  input.now = 2100;
  frame = render_dashboard(input, DashboardView{}, 80, 24);
  EXPECT_EQ(row_of_gpu(frame, 2).style, LineStyle::Flagged);
  EXPECT_NE(row_of_gpu(frame, 2).text.find("IDLE 0:06:40"), std::string::npos) << row_of_gpu(frame, 2).text;
  EXPECT_NE(frame[0].text.find("1 idle too long"), std::string::npos);
  input.machine.gpus[2].utilization_gpu = 50;
  track_idle(idle, input);
  EXPECT_TRUE(idle.empty());
}

TEST(Dashboard, ADaemonJobsCardsCarryTheDaemonsIdleFlag) {
  auto input = busy_machine();
  input.idle_flag_after_s = 300;
  input.machine.gpus[0].utilization_gpu = 0;  // job 12's: the daemon decides
  std::map<unsigned, double> idle;
  track_idle(idle, input);
  EXPECT_TRUE(idle.empty()) << "top keeps no timer of its own for a daemon job's card";
  auto frame = render_dashboard(input, DashboardView{}, 100, 30);
  EXPECT_EQ(row_of_gpu(frame, 1).style, LineStyle::Normal) << "not flagged by the daemon yet";
  input.idle_jobs = {12};
  frame = render_dashboard(input, DashboardView{}, 100, 30);
  EXPECT_EQ(row_of_gpu(frame, 1).style, LineStyle::Flagged);  // GPU 0's row is the selected one
  for (unsigned gpu : {0u, 1u}) {
    EXPECT_NE(row_of_gpu(frame, gpu).text.find("IDLE job 12 (alice, train)"), std::string::npos)
        << row_of_gpu(frame, gpu).text;
  }
  EXPECT_NE(frame[0].text.find("2 idle too long"), std::string::npos) << frame[0].text;
}

TEST(Dashboard, ManyCardsScrollToTheSelectedOne) {
  auto input = busy_machine();
  for (unsigned i = 8; i < 16; ++i) input.machine.gpus.push_back(card(i, 0, 0));
  DashboardView view;
  view.selected = 15;
  auto frame = render_dashboard(input, view, 80, 24);
  ASSERT_EQ(frame.size(), 24u);
  EXPECT_EQ(row_of_gpu(frame, 15).style, LineStyle::Selected) << all_text(frame);
  EXPECT_NE(all_text(frame).find("QUEUE"), std::string::npos) << "the queue keeps some room";
}

RC_GTEST_PROP(Dashboard, EveryFrameFitsItsTerminal, ()) {
  auto input = busy_machine();
  const auto width = *rc::gen::inRange<size_t>(80, 240);
  const auto height = *rc::gen::inRange<size_t>(24, 80);
  const auto extra = *rc::gen::inRange<unsigned>(0, 24);
  for (unsigned i = 0; i < extra; ++i) input.machine.gpus.push_back(card(8 + i, i % 101, i * 1000));
  DashboardView view;
  const auto keys = *rc::gen::container<std::vector<int>>(rc::gen::inRange(0, 8));
  for (int key : keys) view = apply_key(input, view, static_cast<DashboardKey>(key));
  auto frame = render_dashboard(input, view, width, height);
  RC_ASSERT(frame.size() == height);
  for (const auto& line : frame) RC_ASSERT(line.text.size() <= width);
  RC_ASSERT(view.selected < shown_gpus(input, view).size() || shown_gpus(input, view).empty());
}

TEST(JobText, ShortensRunsOfCards) {
  EXPECT_EQ(gpu_list_text({6, 0, 1, 2, 3}), "0-3,6");
  EXPECT_EQ(gpu_list_text({}), "-");
  EXPECT_EQ(gpu_list_text({5}), "5");
  EXPECT_EQ(duration_text(3725), "1:02:05");
  EXPECT_EQ(duration_text(90000), "1d01h");
  EXPECT_EQ(duration_text(-3), "0:00:00");
}

}  // namespace
}  // namespace gpupool
