"""Per-job efficiency (docs/monitoring.md, "Efficiency"): how much of the GPU time a job held
its SMs were busy, its energy and its peak GPU memory, in `show`, `jobs --json`,
`report --efficiency`, the API and /metrics, kept in the store across a restart; and
dcgm-exporter's job-mapping files, which the daemon keeps while jobs come and go."""
import os
import shutil
import tempfile
import unittest

from harness import Daemon, main, read_if_there, wait_until
from test_monitoring import get, get_json, parse_metrics, series, write_overlay

# Every GPU of the simulated H200 machine once the job runs: SMs half busy, 400 W, 30000 MiB used.
BUSY = {"sm_active": 0.5, "utilization_gpu": 100, "power_w": 400, "memory_used_mib": 30000}
H200_MAX_POWER_W = 700


class EfficiencyTest(unittest.TestCase):
    def setUp(self):
        self.scratch = tempfile.mkdtemp(prefix="gpupool-efficiency-")
        self.overlay = os.path.join(self.scratch, "overlay.json")
        self.map_dir = os.path.join(self.scratch, "job-map")
        write_overlay(self.overlay, {})

    def tearDown(self):
        shutil.rmtree(self.scratch, ignore_errors=True)

    def daemon(self, sim):
        return Daemon(sim=sim, http="127.0.0.1:0", env={"GPUPOOL_SIM_STATE": self.overlay},
                      config=f'[monitor]\njob_mapping_dir = "{self.map_dir}"\n')

    def map_file(self, gpu):
        """The file's text; None before the daemon has written it."""
        return read_if_there(os.path.join(self.map_dir, str(gpu)))

    def start_job(self, d):
        stop = os.path.join(d.work, "stop")
        job = d.submit("-g", "2", "--name", "busy", "--", "sh", "-c", f"until [ -e {stop} ]; do sleep 0.05; done")
        running = wait_until(lambda: [j for j in d.gp_json("jobs", "--json", "--all") if j["id"] == job
                                      and j["state"] == "running"], what="the job running")
        return job, running[0]["gpus"], stop

    def test_a_hopper_jobs_sm_activity_energy_and_peak_memory(self):
        with self.daemon("hgx-h200") as d:
            job, gpus, stop = self.start_job(d)
            # dcgm-exporter's mapping: the job on its GPUs' files, the others' empty.
            wait_until(lambda: self.map_file(gpus[0]) == f"{job}\n", what="the job in its GPU's mapping file")
            self.assertEqual(self.map_file(gpus[1]), f"{job}\n")
            idle = next(i for i in range(8) if i not in gpus)
            self.assertEqual(self.map_file(idle), "")

            write_overlay(self.overlay, {i: BUSY for i in range(8)})
            address = d.http_address()

            def measured():
                samples = parse_metrics(get(address, "/metrics")[2])
                peak = series(samples, "gpupool_job_peak_memory_bytes", job_id=job)
                sm = series(samples, "gpupool_job_sm_active_gpu_seconds", job_id=job)
                energy = series(samples, "gpupool_job_energy_joules", job_id=job)
                if peak and peak[0][1] == 30000 * 2**20 and sm and sm[0][1] > 0 and energy and energy[0][1] > 0:
                    return samples
                return None
            samples = wait_until(measured, what="the busy GPUs' activity, energy and memory charged to the job")
            # The simulated GPUs list no process for their 30000 MiB: all of it unattributed.
            [(_, stray)] = series(samples, "gpupool_gpu_unattributed_memory_bytes", gpu=idle)
            self.assertEqual(stray, 30000 * 2**20)
            self.assertTrue(series(samples, "gpupool_user_sm_active_gpu_seconds_total", user="root"))
            self.assertTrue(series(samples, "gpupool_user_energy_joules_total", user="root"))
            api = next(j for j in get_json(address, "/api/jobs")["jobs"] if j["id"] == job)
            self.assertEqual(api["peak_memory_mib"], 30000)
            self.assertGreater(api["sm_active_gpu_hours"], 0)
            self.assertGreater(api["energy_kwh"], 0)

            # SMs busy half the time from here on: the job's figure climbs towards 0.5, never past it.
            def half_busy():
                usage = d.gp_json("show", "--json", str(job))["usage"]
                return usage["sm_efficiency"] is not None and usage["sm_efficiency"] > 0.25 and usage
            usage = wait_until(half_busy, what="the job's SM efficiency over a quarter")
            self.assertLessEqual(usage["sm_efficiency"], 0.5 + 1e-9)

            open(stop, "w").close()
            wait_until(lambda: d.gp_json("show", "--json", str(job))["state"] == "done", what="the job ending")
            wait_until(lambda: self.map_file(gpus[0]) == "", what="its GPU's mapping file emptied")

            ended = d.gp_json("show", "--json", str(job))["usage"]
            self.assertEqual(ended["peak_memory_mib"], 30000)
            held_s = ended["gpu_hours"] * 3600
            energy_j = ended["energy_kwh"] * 3.6e6
            self.assertGreater(energy_j, 0)
            self.assertLessEqual(energy_j / held_s, H200_MAX_POWER_W, "mean power per GPU held")
            shown = d.gp("show", str(job), check=True).stdout
            self.assertRegex(shown, r"efficiency +SMs busy \d+ % of the GPU time held \(\d+\.\d\d GPU-hours\), "
                                    r"\d+\.\d{3} kWh, peak 29\.3 GiB on one GPU")
            listed = next(j for j in d.gp_json("jobs", "--json", "--all") if j["id"] == job)
            self.assertEqual(listed["usage"]["peak_memory_mib"], 30000)

            report = d.gp("report", "--efficiency", check=True).stdout
            self.assertRegex(report, r"USER +JOBS +GPU-HOURS +SM-ACTIVE +USED +ENERGY")
            line = next(l for l in report.splitlines() if l.lstrip().startswith(f"{job} "))
            self.assertRegex(line, r"\d+ % +\d+\.\d{3} +29\.3 GiB")
            [user] = d.gp_json("report", "--json")["users"]
            self.assertGreater(user["sm_active_gpu_hours"], 0)

            # The store keeps it: a new daemon says the same.
            d.stop()
            d.start()
            again = d.gp_json("show", "--json", str(job))["usage"]
            self.assertEqual(again["peak_memory_mib"], 30000)
            self.assertAlmostEqual(again["energy_kwh"], ended["energy_kwh"], delta=ended["energy_kwh"] * 1e-9)
            self.assertEqual(again["sm_efficiency"], ended["sm_efficiency"])

    def test_a_job_shorter_than_the_daemons_view_is_still_charged(self):
        with self.daemon("hgx-h200") as d:
            jobs = [d.submit("--", "true") for _ in range(10)]
            d.finish(*jobs)
            for job in jobs:
                usage = d.gp_json("show", "--json", str(job)).get("usage")
                self.assertIsNotNone(usage, f"job {job} has no usage")
                self.assertGreater(usage["gpu_hours"], 0)
            [user] = d.gp_json("report", "--json")["users"]
            self.assertEqual(user["jobs"], 10)

    def test_gpus_without_gpm_leave_sm_activity_unknown_not_zero(self):
        with self.daemon("dgx-a100") as d:
            job, _, stop = self.start_job(d)
            wait_until(lambda: (d.gp_json("show", "--json", str(job)).get("usage") or {}).get("energy_kwh"),
                       what="the job's energy (the A100 counts it)")
            open(stop, "w").close()
            wait_until(lambda: d.gp_json("show", "--json", str(job))["state"] == "done", what="the job ending")
            usage = d.gp_json("show", "--json", str(job))["usage"]
            self.assertIsNone(usage["sm_active_gpu_hours"])
            self.assertIsNone(usage["sm_efficiency"])
            line = next(l for l in d.gp("report", "--efficiency", check=True).stdout.splitlines()
                        if l.lstrip().startswith(f"{job} "))
            self.assertRegex(line, r"n/a +n/a +\d+\.\d{3} ")


if __name__ == "__main__":
    main()
