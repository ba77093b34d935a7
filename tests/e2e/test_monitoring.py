"""gpupoold's monitoring (docs/monitoring.md): /metrics checked by promtool and scraped by a real
Prometheus server, the JSON API, the dashboard in headless Chromium, accounting with the idle flag
and `gpupool report`, which outlives a restart of the daemon."""
import http.client
import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
import unittest
import urllib.parse

from browser import Chromium, find_chromium
from harness import GPUPOOLD, Daemon, main, wait_until

ARTIFACTS = os.environ.get("GPUPOOL_TEST_ARTIFACTS") or tempfile.gettempdir()
# promtool's naming advice that dcgm-exporter's own labels (modelName, UUID, Hostname) and names
# (DCGM_FI_DEV_PCIE_REPLAY_COUNTER) break on purpose: Grafana boards made for dcgm-exporter select
# on them. Anything else it says fails.
DCGM_LABEL_LINT = re.compile(r"^DCGM_FI_(?:DEV|PROF)_\w+ (?:label names should be written in 'snake_case' not 'camelCase'"
                             r"|metric name should not include type 'counter')$")
SERIES = re.compile(r'^(\w+)(?:\{(.*)\})? (\S+)$')
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def get(address, path, method="GET"):
    connection = http.client.HTTPConnection(address, timeout=10)
    try:
        connection.request(method, path)
        response = connection.getresponse()
        return response.status, response.getheader("Content-Type"), response.read().decode()
    finally:
        connection.close()


def get_json(address, path):
    status, _, body = get(address, path)
    if status != 200:
        raise AssertionError(f"GET {path}: HTTP {status}")
    return json.loads(body)


def parse_metrics(text):
    """[(name, {label: value}, number)] of every sample line in a scrape."""
    samples = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = SERIES.match(line)
        if not match:
            raise AssertionError(f"not a sample line: {line!r}")
        samples.append((match.group(1), dict(LABEL.findall(match.group(2) or "")), float(match.group(3))))
    return samples


def series(samples, name, **labels):
    return [(l, v) for n, l, v in samples if n == name and all(l.get(k) == str(w) for k, w in labels.items())]


def write_overlay(path, gpus):
    """The simulated library's live overlay (docs/fixtures.md), replaced atomically."""
    with open(path + ".new", "w") as f:
        json.dump({"gpus": {str(index): values for index, values in gpus.items()}}, f)
    os.rename(path + ".new", path)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class MonitoringTest(unittest.TestCase):
    def setUp(self):
        self.scratch = tempfile.mkdtemp(prefix="gpupool-monitoring-")
        self.overlay = os.path.join(self.scratch, "overlay.json")
        write_overlay(self.overlay, {0: {"utilization_gpu": 73, "memory_used_mib": 40960}, 1: {"utilization_gpu": 12}})

    def tearDown(self):
        shutil.rmtree(self.scratch, ignore_errors=True)

    def daemon(self, config=""):
        return Daemon(http="127.0.0.1:0", config=config, env={"GPUPOOL_SIM_STATE": self.overlay})

    def test_metrics_api_prometheus_and_dashboard(self):
        with self.daemon() as d:
            address = d.http_address()

            def sampled():
                status, content_type, text = get(address, "/metrics")
                samples = parse_metrics(text)
                return series(samples, "DCGM_FI_DEV_GPU_UTIL", gpu=0) and (content_type, text, samples)
            content_type, text, samples = wait_until(sampled, what="a first sample")
            self.assertTrue(content_type.startswith("text/plain; version=0.0.4"), content_type)
            [(labels, value)] = series(samples, "DCGM_FI_DEV_GPU_UTIL", gpu=0)
            self.assertEqual(value, 73)
            self.assertEqual(set(labels), {"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname"})
            self.assertEqual((labels["device"], labels["modelName"]), ("nvidia0", "NVIDIA H200"))
            self.assertEqual(len(series(samples, "DCGM_FI_DEV_FB_USED")), 8)
            self.assertEqual(series(samples, "DCGM_FI_DEV_FB_USED", gpu=0)[0][1], 40960)
            for name in ("DCGM_FI_DEV_MEM_COPY_UTIL", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_GPU_TEMP",
                         "DCGM_FI_DEV_POWER_USAGE", "gpupool_dispatch_latency_seconds_count",
                         "gpupool_queue_wait_seconds_count", "gpupool_gpu_leased", "gpupool_idle_jobs"):
                self.assertTrue(series(samples, name), f"{name} missing from /metrics")
            self.assertEqual(series(samples, "gpupool_jobs", state="running")[0][1], 0)

            if shutil.which("promtool") is None:
                self.fail("no promtool on PATH (scripts/install-deps installs it)")
            lint = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
            complaints = [line for line in (lint.stdout + lint.stderr).splitlines() if not DCGM_LABEL_LINT.match(line)]
            self.assertEqual(complaints, [], "promtool check metrics")
            self.assertIn(lint.returncode, (0, 3))  # 3: lint advice only (the dcgm labels above)

            job = d.enqueue(["sleep", "60"], gpus=2, name="trainer")
            running = d.wait_state(job, "running")

            def labelled():
                samples = parse_metrics(get(address, "/metrics")[2])
                return series(samples, "DCGM_FI_DEV_GPU_UTIL", job_id=job) and samples
            samples = wait_until(labelled, what="the job's labels on its GPUs")
            held = sorted(int(l["gpu"]) for l, _ in series(samples, "DCGM_FI_DEV_GPU_UTIL", job_id=job))
            self.assertEqual(held, sorted(running["gpus"]))
            self.assertTrue(all(l["user"] == "root" for l, _ in series(samples, "DCGM_FI_DEV_GPU_UTIL", job_id=job)))
            self.assertEqual(series(samples, "gpupool_jobs", state="running")[0][1], 1)
            self.assertEqual(series(samples, "gpupool_dispatch_latency_seconds_count")[0][1], 1)

            gpus = get_json(address, "/api/gpus")
            self.assertEqual(len(gpus["gpus"]), 8)
            self.assertEqual(gpus["gpus"][0]["sample"]["utilization_gpu"], 73)
            holders = {g["index"]: [j["id"] for j in g["jobs"]] for g in gpus["gpus"]}
            self.assertEqual([i for i, ids in holders.items() if ids == [job]], sorted(running["gpus"]))
            jobs = get_json(address, "/api/jobs")
            self.assertEqual([(j["id"], j["name"], j["state"]) for j in jobs["jobs"]], [(job, "trainer", "running")])
            history = wait_until(lambda: (h := get_json(address, "/api/history?seconds=60"))
                                 and len(h["gpus"][0]["time"]) >= 3 and h, what="three samples in the history")
            times = history["gpus"][0]["time"]
            self.assertEqual(times, sorted(times))
            self.assertEqual(set(history["gpus"][0]["utilization_gpu"]), {73})
            self.check_http_errors(address)

            self.check_prometheus(address, job)
            self.check_dashboard(address, d, job)
            d.request({"op": "cancel", "ids": [job]})
            d.finish(job)

    def check_http_errors(self, address):
        """Every refusal says why in JSON: 404 for no such page, 405 (with Allow) for another
        method than GET, 400 for a query value that is not a number."""
        def refusal(path, method="GET"):
            connection = http.client.HTTPConnection(address, timeout=10)
            try:
                connection.request(method, path)
                response = connection.getresponse()
                body = response.read().decode()
                self.assertEqual(response.getheader("Content-Type"), "application/json", body)
                return response.status, response.getheader("Allow"), json.loads(body)["error"]
            finally:
                connection.close()
        self.assertEqual(refusal("/nowhere"), (404, None, "no page /nowhere"))
        self.assertEqual(refusal("/api/nothing")[:2], (404, None))
        for method in ("POST", "PUT", "DELETE"):
            with self.subTest(method=method):
                status, allow, error = refusal("/api/jobs", method)
                self.assertEqual((status, allow), (405, "GET, HEAD"))
                self.assertIn(method, error)
        self.assertEqual(refusal("/metrics", "POST")[0], 405)
        self.assertEqual(refusal("/nowhere", "POST")[0], 404)
        for query in ("since=yesterday", "seconds=10x", "seconds=-5", "since=nan"):
            with self.subTest(query=query):
                status, _, error = refusal(f"/api/history?{query}")
                self.assertEqual(status, 400)
                self.assertIn(query.split("=")[1], error)
        self.assertEqual(get(address, "/api/history?seconds=0.5")[0], 200)

    def check_prometheus(self, address, job):
        """A real Prometheus server scrapes the daemon; its query API returns the simulated values."""
        if shutil.which("prometheus") is None:
            self.fail("no prometheus on PATH (scripts/install-deps installs it)")
        config = os.path.join(self.scratch, "prometheus.yml")
        with open(config, "w") as f:
            f.write(f"global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: gpupool\n"
                    f"    static_configs:\n      - targets: ['{address}']\n")
        web = f"127.0.0.1:{free_port()}"
        log = open(os.path.join(self.scratch, "prometheus.log"), "w")
        server = subprocess.Popen(["prometheus", f"--config.file={config}", f"--web.listen-address={web}",
                                   f"--storage.tsdb.path={os.path.join(self.scratch, 'tsdb')}"],
                                  stdout=log, stderr=log)
        try:
            def query(expression):
                try:
                    answer = get_json(web, "/api/v1/query?" + urllib.parse.urlencode({"query": expression}))
                except (OSError, AssertionError):
                    return None
                return answer["data"]["result"] if answer.get("status") == "success" else None
            utilization = wait_until(lambda: query('DCGM_FI_DEV_GPU_UTIL{gpu="0"}'), 60,
                                     what="Prometheus having scraped gpupoold")
            self.assertEqual(float(utilization[0]["value"][1]), 73)
            self.assertEqual(utilization[0]["metric"]["job"], "gpupool")
            held = wait_until(lambda: query(f'DCGM_FI_DEV_GPU_UTIL{{job_id="{job}"}}'), 30,
                              what="the job's series in Prometheus")
            self.assertEqual(len(held), 2)
            # The panels of NVIDIA's Grafana board for dcgm-exporter, its variables (instance, gpu)
            # filled in: each draws every GPU, the power total one line.
            selector = f'{{instance="{address}", gpu=~".*"}}'
            for expression, lines in [(f"DCGM_FI_DEV_GPU_TEMP{selector}", 8), (f"DCGM_FI_DEV_POWER_USAGE{selector}", 8),
                                      (f"sum(DCGM_FI_DEV_POWER_USAGE{selector})", 1),
                                      (f"DCGM_FI_DEV_SM_CLOCK{selector} * 1000000", 8),
                                      (f"DCGM_FI_DEV_MEM_CLOCK{selector} * 1000000", 8),
                                      (f"DCGM_FI_DEV_GPU_UTIL{selector}", 8), (f"DCGM_FI_DEV_MEM_COPY_UTIL{selector}", 8),
                                      (f"DCGM_FI_DEV_FB_USED{selector}", 8),
                                      (f"DCGM_FI_PROF_GR_ENGINE_ACTIVE{selector}", 8),
                                      (f"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{selector}", 8)]:
                with self.subTest(panel=expression):
                    drawn = wait_until(lambda: query(expression), 30, what=f"{expression} answered by Prometheus")
                    self.assertEqual(len(drawn), lines)
        finally:
            server.terminate()
            server.wait(30)
            log.close()

    def check_dashboard(self, address, d, job):
        """The page in headless Chromium: every GPU's chart draws, the running job and one submitted
        while the page is open appear; the screenshot is kept (GPUPOOL_TEST_ARTIFACTS)."""
        if find_chromium() is None:
            self.fail("no chromium on PATH (scripts/install-deps installs it)")
        with Chromium(height=1000) as browser:
            browser.navigate(f"http://{address}/")
            rendered = browser.wait_for("document.body.dataset.chartsRendered === '8'", what="eight charts")
            self.assertTrue(rendered)
            # One request per refresh, so an open page holds one of the daemon's HTTP connections.
            api = browser.evaluate("[...new Set(performance.getEntriesByType('resource')"
                                   ".map(e => new URL(e.name).pathname).filter(p => p.startsWith('/api/')))]")
            self.assertEqual(api, ["/api/dashboard"])
            browser.wait_for(f"!!document.querySelector('#queue tr[data-job=\"{job}\"]')", what="the running job")
            held_text = ",".join(str(g) for g in sorted(d.show(job)["gpus"]))
            holder = browser.evaluate(f"[...document.querySelectorAll('.card')].filter(c => "
                                      f"c.querySelector('.holder').textContent.startsWith('job {job} (root, trainer)')).length")
            self.assertEqual(holder, 2)
            # Times in 24 hours, as the command line shows them.
            started = browser.evaluate(f"document.querySelector('#queue tr[data-job=\"{job}\"]').children[5].textContent")
            self.assertEqual(started, time.strftime("%H:%M:%S", time.localtime(d.show(job)["start_time"])))
            later = d.enqueue(["sleep", "60"], gpus=8, name="waits-for-all")
            row = browser.wait_for(f"document.querySelector('#queue tr[data-job=\"{later}\"]')?.textContent",
                                   what="the job submitted while the page is open")
            self.assertIn("waits-for-all", row)
            self.assertIn("queued", row)
            # Why it waits: GPU 0 is used outside gpupool (the overlay), two by the running job.
            why = f"waiting for 8 GPUs: 3 busy (GPU 0: 40960 MiB used by processes not visible here; GPU {held_text}"
            self.assertIn(why, row)
            self.assertTrue(d.show(later)["reason"].startswith(why), d.show(later)["reason"])
            # The chart of GPU 0 holds the overlay's 73 %.
            points = browser.wait_for("Chart.getChart(document.querySelector('.card[data-gpu=\"0\"] canvas'))"
                                      ".data.datasets[0].data.map(p => p.y)", what="GPU 0's points")
            self.assertIn(73, points)
            os.makedirs(ARTIFACTS, exist_ok=True)
            shot = os.path.join(ARTIFACTS, "dashboard.png")
            browser.screenshot(shot)
            with open(shot, "rb") as f:
                self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
            d.request({"op": "cancel", "ids": [later]})

    def test_report_counts_jobs_that_end_between_samples(self):
        # A sample a minute: the jobs start and end before any sample sees them.
        slow = "[daemon]\nsample_interval_s = 60\nkill_grace_s = 0.5\n"
        with Daemon(base_config=slow, env={"GPUPOOL_SIM_STATE": self.overlay}) as d:
            jobs = [d.enqueue(["sleep", "0.3"], gpus=2, name=f"blip{i}") for i in range(3)]
            d.finish(*jobs)

            def stored():
                report = json.loads(d.gp("report", "--json", check=True).stdout)
                return len(report["jobs"]) == 3 and not any(j["running"] for j in report["jobs"]) and report
            report = wait_until(stored, 20, what="the three short jobs in the report")
            self.assertEqual([(u["user"], u["jobs"]) for u in report["users"]], [("root", 3)])
            for line in report["jobs"]:
                # Two GPUs for at least the 0.3 s each job slept, measured or not.
                self.assertGreaterEqual(line["gpu_hours"], 2 * 0.3 / 3600)
                self.assertLess(line["gpu_hours"], 2 * 30 / 3600)

    def test_accounting_idle_flag_and_report(self):
        with self.daemon(config='[monitor]\nidle_flag_after = "1s"\n') as d:
            address = d.http_address()
            write_overlay(self.overlay, {})  # every GPU at 0 %
            idle = d.enqueue(["sleep", "60"], gpus=1, name="idler")
            gpu = d.wait_state(idle, "running")["gpus"][0]

            def flagged(want):
                jobs = {j["id"]: j for j in get_json(address, "/api/jobs")["jobs"]}
                return jobs.get(idle, {}).get("idle") is want
            wait_until(lambda: flagged(True), 20, what="the idle flag")
            samples = parse_metrics(get(address, "/metrics")[2])
            self.assertEqual(series(samples, "gpupool_job_idle", job_id=idle)[0][1], 1)
            self.assertEqual(series(samples, "gpupool_idle_jobs")[0][1], 1)
            report = json.loads(d.gp("report", "--json", check=True).stdout)
            [line] = [j for j in report["jobs"] if j["id"] == idle]
            self.assertEqual((line["running"], line["idle"], line["user"], line["name"]), (True, True, "root", "idler"))
            self.assertIn("running, IDLE", d.gp("report", check=True).stdout)
            # top shows the daemon's flag, not a timer of its own (which would start at 0 now).
            frame = d.gp("top", "--once", env={"COLUMNS": "100", "LINES": "30"}, check=True).stdout
            self.assertRegex(frame, rf"(?m)^\s*{gpu} .* IDLE job {idle} \(root, idler\)", frame)
            # Told once as an event (by the daemon's loop, after the sample that flagged it).
            def idle_events():
                return [json.loads(line) for line in
                        d.gp("events", "--kind", "job_idle", "--json", check=True).stdout.splitlines()]
            [told] = wait_until(idle_events, what="the job_idle event")
            self.assertEqual((told["job"], told["user"], told["name"], told["gpus"]), (idle, "root", "idler", [gpu]))
            self.assertRegex(told["message"], rf"^job {idle} \(root, idler\) is idle on GPU {gpu}: about 0 % utilisation for ")

            write_overlay(self.overlay, {gpu: {"utilization_gpu": 90}})
            wait_until(lambda: flagged(False), 20, what="the idle flag cleared by work")
            time.sleep(1)
            d.request({"op": "cancel", "ids": [idle]})
            d.finish(idle)

            def stored():
                report = json.loads(d.gp("report", "--json", check=True).stdout)
                jobs = [j for j in report["jobs"] if j["id"] == idle]
                return jobs and not jobs[0]["running"] and report
            report = wait_until(stored, 20, what="the ended job in the report")
            [line] = report["jobs"]
            self.assertGreater(line["gpu_hours"], 0)
            self.assertLess(line["gpu_hours"], 60 / 3600)
            self.assertGreater(line["mean_utilization"], 0)
            self.assertLess(line["mean_utilization"], 90)
            self.assertEqual([(u["user"], u["jobs"]) for u in report["users"]], [("root", 1)])
            self.assertEqual(json.loads(d.gp("report", "--since", "1h", "--json", check=True).stdout)["jobs"],
                             report["jobs"])
            future = d.gp("report", "--since", "2099-01-01", "--json", check=True)
            self.assertEqual(json.loads(future.stdout)["jobs"], [])
            bad = d.gp("report", "--since", "yesterday-ish")
            self.assertNotEqual(bad.returncode, 0)
            self.assertEqual(len(bad.stderr.strip().splitlines()), 1, bad.stderr)
            self.assertIn("--since", bad.stderr)

            # The accounting is stored: a restarted daemon reports the same job.
            d.stop()
            d.start()
            again = json.loads(d.gp("report", "--json", check=True).stdout)
            self.assertEqual([(j["id"], round(j["gpu_hours"], 9)) for j in again["jobs"]],
                             [(line["id"], round(line["gpu_hours"], 9))])
            d.http_address(starts=2)

            # --user and --limit narrow the report, its JSON too.
            self.assertEqual(json.loads(d.gp("report", "--user", "root", "--json", check=True).stdout)["jobs"],
                             again["jobs"])
            nobody = json.loads(d.gp("report", "--user", "nobody", "--json", check=True).stdout)
            self.assertEqual((nobody["users"], nobody["jobs"]), ([], []))
            self.assertIn("No job of nobody held a GPU", d.gp("report", "-u", "nobody", check=True).stdout)
            later = d.enqueue(["sleep", "60"], gpus=1, name="later")
            d.wait_state(later, "running")
            wait_until(lambda: len(json.loads(d.gp("report", "--json", check=True).stdout)["jobs"]) == 2, 20,
                       what="the second job in the report")
            latest = json.loads(d.gp("report", "--limit", "1", "--json", check=True).stdout)
            self.assertEqual([j["id"] for j in latest["jobs"]], [later])
            self.assertEqual([(u["user"], u["jobs"]) for u in latest["users"]], [("root", 2)])
            self.assertIn("(the latest 1 of 2 jobs)", d.gp("report", "-n", "1", check=True).stdout)
            d.request({"op": "cancel", "ids": [later]})
            d.finish(later)

    def test_bad_http_addresses(self):
        with self.daemon() as d:
            address = d.http_address()
            # A second daemon cannot have the port: it says so once and serves its socket anyway.
            with Daemon(http=address) as other:
                self.assertIn(f"cannot listen for HTTP on {address}", other.log_text())
                self.assertIsNotNone(other.status())
        for bad in ("9400", "localhost:99999", "127.0.0.1:port"):
            proc = subprocess.run([GPUPOOLD, "--http", bad], capture_output=True, text=True, env=d.env, timeout=30)
            self.assertEqual(proc.returncode, 2, proc.stderr)
            self.assertEqual(proc.stderr.strip().splitlines(), [f"gpupoold: --http {bad}: expected HOST:PORT or off"])


if __name__ == "__main__":
    main()
