"""scripts/fetch-traces without the network: with its downloads already in DIR/raw/ (small
stand-ins in each trace's own format and archive), it extracts and fits every cluster's trace."""
import csv
import datetime
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import unittest
import zipfile

from harness import GPUPOOL, SOURCE_DIR, clean_env, main

START = datetime.datetime(2020, 6, 1)
HELIOS_HEADER = "job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue\n"
ALIBABA_HEADER = ("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
                  "deletion_time,scheduled_time\n")


def at(seconds):
    return f"{START + datetime.timedelta(seconds=seconds):%Y-%m-%d %H:%M:%S}"


class FetchTracesTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.dir)
        raw = os.path.join(self.dir, "raw")
        os.makedirs(raw)
        gpus = [1, 2, 1, 4, 8, 16, 0]  # 16: too wide for one machine; 0: CPU-only
        with open(os.path.join(raw, "openb_pod_list_default.csv"), "w") as f:
            f.write(ALIBABA_HEADER)
            for i in range(60):
                f.write(f"openb-pod-{i:04},1000,1024,{min(gpus[i % 7], 8)},{460 if i % 3 else 1000},,LS,Running,"
                        f"{i * 50},{i * 50 + 3000},{i * 50}\n")
        with zipfile.ZipFile(os.path.join(raw, "helios-data.zip"), "w") as z:
            for cluster in ["Venus", "Earth", "Saturn"]:
                rows = [f"{i},u{i % 4},vc,{gpus[i % 7]},1,1,COMPLETED,{at(i * 60)},{at(i * 60)},,{600 + i},0\n"
                        for i in range(60)]
                z.writestr(f"data/{cluster}/cluster_log.csv", HELIOS_HEADER + "".join(rows))
        jobs = [{"jobid": f"application_{i}", "user": f"u{i % 3}", "status": "Pass", "vc": "v",
                 "submitted_time": at(i * 60),
                 "attempts": [{"start_time": at(i * 60), "end_time": at(i * 60 + 900),
                               "detail": [{"ip": "m1", "gpus": [f"gpu{g}" for g in range(gpus[i % 6] or 1)]}]}]}
                for i in range(60)]
        log = os.path.join(self.dir, "cluster_job_log")
        with open(log, "w") as f:
            json.dump(jobs, f)
        with tarfile.open(os.path.join(raw, "philly-trace-data.tar.gz"), "w:gz") as t:
            t.add(log, "trace-data/cluster_job_log")

    def test_every_cluster_is_fitted_to_the_machine(self):
        proc = subprocess.run([sys.executable, os.path.join(SOURCE_DIR, "scripts", "fetch-traces"),
                               "--gpupool", GPUPOOL, "--machine", "hgx-h200", self.dir],
                              env=clean_env(), capture_output=True, text=True, timeout=120)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        names = ["alibaba-openb", "helios-venus", "helios-earth", "helios-saturn", "philly"]
        self.assertEqual([line.split(":")[0] for line in proc.stdout.splitlines()], [f"{n}.csv" for n in names])
        for name in names:
            with open(os.path.join(self.dir, f"{name}.csv")) as f:
                rows = list(csv.DictReader(f))
            self.assertGreater(len(rows), 10, name)
            self.assertTrue(all(1 <= int(r["gpus"]) <= 8 for r in rows), name)
        # Helios: 0- and 16-GPU jobs dropped (8 each), then the 30 from a third of the way in (14 of 44).
        self.assertIn("helios-saturn.csv: 60 jobs read: 30 kept, 0 never ran or have no times, 8 CPU-only, 8 wider "
                      "than 8 GPUs",
                      proc.stdout)


if __name__ == "__main__":
    main()
