"""gpupool sim: trace replay, placement explanations, the fixture list and capturing a machine, end
to end."""
import csv
import json
import os
import subprocess
import tempfile
import unittest

from harness import GPUPOOL, SHIPPED_FIXTURES, SOURCE_DIR, clean_env, gpupool, main

TRACES = os.path.join(SOURCE_DIR, "tests", "data", "traces")
HEADER = "id,submit_s,duration_s,gpus,gpu_mem_mib,user,priority,time_limit_s\n"


def sim(*args, check=True):
    """Runs `gpupool sim ...` without any simulated NVML: the fixture is read directly."""
    env = clean_env(GPUPOOL_FIXTURE_DIR=os.path.join(os.path.dirname(GPUPOOL), "..", "share",
                                                      "gpupool", "fixtures"))
    proc = subprocess.run([GPUPOOL, "sim", *args], env=env, capture_output=True, text=True,
                          timeout=120)
    if check and proc.returncode != 0:
        raise AssertionError(f"gpupool sim {' '.join(args)} exited {proc.returncode}: {proc.stderr}")
    return proc


class ReplayTest(unittest.TestCase):
    def write_trace(self, text):
        handle, path = tempfile.mkstemp(suffix=".csv")
        with os.fdopen(handle, "w") as f:
            f.write(text)
        self.addCleanup(os.unlink, path)
        return path

    def test_json_summary_and_schedule_of_a_shipped_trace(self):
        trace = os.path.join(TRACES, "h200-overload-1.csv")
        with open(trace) as f:
            jobs = {row["id"]: row for row in csv.DictReader(f) if row["gpus"] != "0"}
        out_dir = tempfile.mkdtemp()
        schedule_path = os.path.join(out_dir, "schedule.csv")
        summary = json.loads(sim("replay", "--machine", "hgx-h200", "--trace", trace,
                                 "--schedule-out", schedule_path, "--json").stdout)
        for field in ["jobs", "makespan_s", "lower_bound_s", "utilization", "mean_wait_s",
                      "p95_wait_s", "max_wait_s", "users"]:
            self.assertIn(field, summary)
        self.assertEqual(summary["policy"], "gpupool")
        self.assertEqual(summary["jobs"], len(jobs))
        self.assertGreaterEqual(summary["makespan_s"], summary["lower_bound_s"])
        self.assertLessEqual(summary["mean_wait_s"], summary["p95_wait_s"] + summary["max_wait_s"])
        self.assertEqual(sum(u["jobs"] for u in summary["users"]), len(jobs))
        with open(schedule_path) as f:
            rows = list(csv.DictReader(f))
        os.unlink(schedule_path)
        os.rmdir(out_dir)
        self.assertEqual(len(rows), len(jobs))
        for row in rows:
            job = jobs[row["id"]]
            gpus = [int(g) for g in row["gpus"].split(";")]
            self.assertEqual(len(gpus), int(job["gpus"]))
            self.assertTrue(all(0 <= g < 8 for g in gpus))
            self.assertGreaterEqual(float(row["start_s"]), float(job["submit_s"]))
            self.assertLessEqual(float(row["end_s"]) - float(row["start_s"]),
                                 float(job["duration_s"]) + 1e-6)

    def test_policies_differ_as_designed(self):
        # Two GPUs; "big" holds one until t=100, then "wide" wants both.
        trace = self.write_trace(HEADER + "big,0,100,1,,a,,100\nwide,1,10,2,,b,,\n"
                                 "small,2,500,1,,c,,\ntiny,3,20,1,,d,,50\n")
        starts = {}
        for policy in ["fifo", "backfill", "gpupool"]:
            out = tempfile.mktemp(suffix=".csv")
            sim("replay", "--machine", "mixed-workstation", "--trace", trace, "--policy", policy,
                "--schedule-out", out)
            with open(out) as f:
                starts[policy] = {r["id"]: float(r["start_s"]) for r in csv.DictReader(f)}
            os.unlink(out)
        # Strict FIFO: everyone waits behind "wide".
        self.assertEqual(starts["fifo"], {"big": 0, "wide": 100, "small": 110, "tiny": 110})
        # Greedy backfill: "small" takes the free GPU and "wide" waits for it to end.
        self.assertEqual(starts["backfill"], {"big": 0, "wide": 502, "small": 2, "tiny": 100})
        # Ours: "tiny" ends before the reservation so it backfills; "small" (no limit) may not.
        self.assertEqual(starts["gpupool"], {"big": 0, "wide": 100, "small": 110, "tiny": 3})

    def test_backfill_by_suspending_lends_reserved_gpus_and_suspends_for_the_reservation(self):
        # As above: "small" has no time limit. On loan it starts at once on the GPU reserved for
        # "wide", and is suspended when "big" ends; "wide" starts once its checkpoint is done.
        trace = self.write_trace(HEADER + "big,0,100,1,,a,,100\nwide,1,10,2,,b,,\n"
                                 "small,2,500,1,,c,,\ntiny,3,20,1,,d,,50\n")
        out = tempfile.mktemp(suffix=".csv")
        summary = json.loads(sim("replay", "--machine", "mixed-workstation", "--trace", trace,
                                 "--backfill-by-suspending", "--schedule-out", out, "--json").stdout)
        with open(out) as f:
            rows = {r["id"]: r for r in csv.DictReader(f)}
        os.unlink(out)
        self.assertEqual(float(rows["small"]["start_s"]), 2)
        released, restarted = map(float, rows["small"]["suspended"].split("-"))
        self.assertGreater(released, 100)  # the checkpoint takes a while
        self.assertEqual(float(rows["wide"]["start_s"]), released)
        self.assertEqual(restarted, released + 10)
        self.assertIn(rows["small"]["gpus"], rows["wide"]["gpus"].split(";"))
        self.assertEqual([r["suspended"] for r in rows.values()].count(""), 3)
        self.assertEqual((summary["suspensions"], summary["max_suspended_s"]), (1, 10))

    def test_slices_placed_by_fragmentation_leave_room_for_the_recent_requests(self):
        # GPU 0 keeps 50000 MiB free and GPU 1 70000; then a 30000 MiB slice comes with three of
        # 40000. Best fit puts it on GPU 0, leaving 20000 that none of them fits; placed by
        # fragmentation it goes to GPU 1, leaving 40000.
        trace = self.write_trace(HEADER + "a,0,1000,1,93771,,,\nb,1,1000,1,73771,,,\n"
                                 "c,2,10,1,30000,,,\nd,2,10,1,40000,,,\ne,2,10,1,40000,,,\n"
                                 "f,2,10,1,40000,,,\n")
        gpus = {}
        for placement in ["best-fit", "fragmentation"]:
            out = tempfile.mktemp(suffix=".csv")
            sim("replay", "--machine", "hgx-h200", "--trace", trace, "--slice-placement", placement,
                "--schedule-out", out)
            with open(out) as f:
                gpus[placement] = {r["id"]: r["gpus"] for r in csv.DictReader(f)}
            os.unlink(out)
        self.assertEqual((gpus["best-fit"]["a"], gpus["best-fit"]["b"]), ("0", "1"))
        self.assertEqual(gpus["best-fit"]["c"], "0")
        self.assertEqual(gpus["fragmentation"]["c"], "1")
        proc = sim("replay", "--machine", "hgx-h200", "--trace", trace, "--slice-placement", "fgd",
                   check=False)
        self.assertEqual(proc.returncode, 2)
        self.assertIn("--slice-placement", proc.stderr)

    def test_text_output_names_the_figures(self):
        out = sim("replay", "--machine", "hgx-h200", "--policy", "fifo",
                  "--trace", os.path.join(TRACES, "h200-overload-2.csv")).stdout
        self.assertIn("policy fifo on hgx-h200", out)
        self.assertIn("lower bound", out)
        self.assertIn("alice", out)

    def test_a_bad_row_is_reported_with_its_line_number(self):
        trace = self.write_trace(HEADER + "a,0,10,1\nb,0,ten,1\n")
        proc = sim("replay", "--machine", "hgx-h200", "--trace", trace, check=False)
        self.assertEqual(proc.returncode, 1)
        self.assertEqual(proc.stdout, "")
        self.assertEqual(proc.stderr.strip(), f"gpupool: {trace}: line 3: duration_s: expected a "
                                              "non-negative number of seconds, got 'ten'")

    def test_unknown_policy_and_machine_are_usage_errors(self):
        trace = os.path.join(TRACES, "h200-overload-1.csv")
        proc = sim("replay", "--machine", "hgx-h200", "--trace", trace, "--policy", "sjf", check=False)
        self.assertEqual(proc.returncode, 2)
        proc = sim("replay", "--machine", "no-such-box", "--trace", trace, check=False)
        self.assertEqual(proc.returncode, 1)
        self.assertIn("no-such-box", proc.stderr)


class ImportTest(unittest.TestCase):
    HELIOS = ("job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue\n"
              "1,ua,vc1,1,1,1,COMPLETED,2020-06-09 18:00:00,2020-06-09 18:00:00,2020-06-09 19:00:00,3600,0\n"
              "2,ub,vc1,4,8,1,FAILED,2020-06-09 18:10:00,2020-06-09 18:10:00,2020-06-09 18:40:00,1800,0\n"
              "3,ua,vc1,32,64,4,COMPLETED,2020-06-09 18:20:00,2020-06-09 18:20:00,2020-06-09 20:20:00,7200,0\n"
              "4,ub,vc1,0,4,1,COMPLETED,2020-06-09 18:25:00,2020-06-09 18:25:00,2020-06-09 18:26:00,60,0\n"
              "5,uc,vc1,8,16,1,COMPLETED,2020-06-09 18:30:00,2020-06-09 18:30:00,2020-06-09 19:30:00,3600,0\n")

    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.addCleanup(lambda: [os.unlink(os.path.join(self.dir, f)) for f in os.listdir(self.dir)]
                        and os.rmdir(self.dir))
        self.recorded = os.path.join(self.dir, "cluster_log.csv")
        with open(self.recorded, "w") as f:
            f.write(self.HELIOS)

    def test_a_helios_log_is_fitted_to_the_machine_and_replays(self):
        fitted = os.path.join(self.dir, "fitted.csv")
        proc = sim("import", "--format", "helios", self.recorded, "--machine", "hgx-h200", "--load", "1.1",
                   "-o", fitted)
        # 1 + 2 + 8 GPU-hours over 30 min of arrivals on 8 GPUs: load 2.75; to 1.1, gaps x 2.5.
        self.assertEqual(proc.stderr.strip(),
                         "5 jobs read: 3 kept, 0 never ran or have no times, 1 CPU-only, 1 wider than 8 GPUs; "
                         "load 2.75 at the recorded arrivals, 1.10 after scaling the gaps by 2.5")
        with open(fitted) as f:
            rows = list(csv.DictReader(f))
        self.assertEqual([(r["id"], r["submit_s"], r["gpus"], r["user"]) for r in rows],
                         [("1", "0", "1", "ua"), ("2", "1500", "4", "ub"), ("5", "4500", "8", "uc")])
        summary = json.loads(sim("replay", "--machine", "hgx-h200", "--trace", fitted, "--json").stdout)
        self.assertEqual(summary["jobs"], 3)
        for field in ["mean_completion_s", "p99_completion_s", "unallocated_while_waiting", "jain_index",
                      "max_finish_time_fairness"]:
            self.assertIn(field, summary)
        self.assertEqual(len(summary["users"]), 3)

    def test_a_malformed_log_is_one_line_and_writes_nothing(self):
        with open(self.recorded, "a") as f:
            f.write("6,ua,vc1,many,1,1,COMPLETED,2020-06-09 18:40:00,,,10,0\n")
        fitted = os.path.join(self.dir, "fitted.csv")
        proc = sim("import", "--format", "helios", self.recorded, "-o", fitted, check=False)
        self.assertNotEqual(proc.returncode, 0)
        self.assertEqual(proc.stderr.strip(),
                         f"gpupool: {self.recorded}: line 7: gpu_num: expected a number, got 'many'")
        self.assertFalse(os.path.exists(fitted))


class PlaceTest(unittest.TestCase):
    def test_json_names_the_chosen_set_its_score_and_the_runner_up(self):
        out = json.loads(sim("place", "--machine", "dgx1-v100", "--free", "0-7", "-g", "4",
                             "--json").stdout)
        self.assertEqual(len(out["chosen"]["gpus"]), 4)
        self.assertIn("worst link", out["chosen"]["score"]["explanation"])
        self.assertIsNotNone(out["runner_up"])
        self.assertNotEqual(out["runner_up"]["gpus"], out["chosen"]["gpus"])

    def test_text_and_errors(self):
        out = sim("place", "--machine", "hgx-h200", "--free", "1,3,5", "-g", "2").stdout
        self.assertIn("chosen", out)
        self.assertIn("runner-up  none", out)
        proc = sim("place", "--machine", "hgx-h200", "--free", "0,1", "-g", "3", check=False)
        self.assertEqual(proc.returncode, 1)
        self.assertIn("need 3 GPUs but only 2 are free", proc.stderr)
        proc = sim("place", "--machine", "hgx-h200", "--free", "a,b", "-g", "1", check=False)
        self.assertIn("invalid --free 'a,b'", proc.stderr)


class CaptureTest(unittest.TestCase):
    """`gpupool sim capture` reads the machine through NVML (here the simulated library), so a
    captured fixture must give back, through the same library, what the original gives."""

    def setUp(self):
        self.dir = tempfile.mkdtemp()

    def tearDown(self):
        for name in os.listdir(self.dir):
            os.unlink(os.path.join(self.dir, name))
        os.rmdir(self.dir)

    def test_a_captured_machine_lists_links_and_places_like_the_original(self):
        lost_gpu = os.path.join(SOURCE_DIR, "tests", "data", "fixtures", "lost-gpu.json")
        for machine in ["dgx1-v100", "pcie-4gpu", "hgx-h200", lost_gpu]:
            with self.subTest(machine=machine):
                name = os.path.basename(machine).removesuffix(".json")
                path = os.path.join(self.dir, f"copy-of-{name}.json")
                proc = gpupool("sim", "capture", "-o", path, sim=machine)
                self.assertIn(f"written to {path}: use it with GPUPOOL_SIM={path}", proc.stderr)
                with open(path) as f:
                    self.assertEqual(json.load(f)["name"], f"copy-of-{name}")
                for command in (["list", "--json"], ["topo", "--json"]):
                    original = json.loads(gpupool(*command, sim=machine).stdout)
                    copy = json.loads(gpupool(*command, sim=path).stdout)
                    self.assertEqual(copy, original, command)
                if machine != lost_gpu:
                    original = json.loads(sim("place", "--machine", machine, "-g", "3",
                                              "--json").stdout)
                    copy = json.loads(sim("place", "--machine", path, "-g", "3", "--json").stdout)
                    self.assertEqual(copy["chosen"], original["chosen"])

    def test_prints_to_standard_output_with_a_name_and_description(self):
        out = gpupool("sim", "capture", "--name", "box", "--description", "our box",
                      sim="h200-1").stdout
        fixture = json.loads(out)
        self.assertEqual((fixture["name"], fixture["description"]), ("box", "our box"))
        default = json.loads(gpupool("sim", "capture", sim="h200-1").stdout)
        self.assertEqual(default["name"], "captured")
        self.assertEqual(default["description"],
                         "1 x NVIDIA H200, driver 580.159.04, as NVML reported them "
                         "(gpupool sim capture)")

    def test_errors_are_one_line(self):
        proc = gpupool("sim", "capture", "-o", os.path.join(self.dir, "no", "such", "dir.json"),
                       check=False, sim="h200-1")
        self.assertEqual(proc.returncode, 1)
        self.assertEqual(proc.stderr.count("\n"), 1, proc.stderr)
        self.assertIn("cannot write the fixture to", proc.stderr)
        proc = gpupool("sim", "capture", check=False, sim="no-such-machine")
        self.assertEqual(proc.returncode, 1)
        self.assertEqual(proc.stderr.count("\n"), 1, proc.stderr)


class ListTest(unittest.TestCase):
    def test_lists_every_shipped_fixture(self):
        names = sim("list").stdout.split()
        for fixture in SHIPPED_FIXTURES:
            self.assertIn(fixture, names)


if __name__ == "__main__":
    main()
