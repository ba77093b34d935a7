"""gpupool top in a real terminal (tmux: send-keys, capture-pane) and `gpupool list --watch`,
against a daemon on a simulated 8-GPU machine (docs/top.md)."""
import json
import os
import shlex
import shutil
import subprocess
import time
import unittest

from harness import GPUPOOL, Daemon, clean_env, gpupool, main, wait_until


class Tmux:
    """A detached tmux session of a given size running one command, on its own server socket."""

    def __init__(self, command, env, width=100, height=30):
        self.socket = f"gpupool-top-{os.getpid()}-{time.monotonic_ns()}"
        exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items() if k.startswith("GPUPOOL_"))
        started = self.tmux(["new-session", "-d", "-s", "top", "-x", str(width), "-y", str(height),
                             f"env {exports} TERM=xterm-256color {command}; sleep 30"])
        if started.returncode != 0:  # say so now rather than as an empty screen 30 s later
            raise AssertionError(f"tmux new-session exited {started.returncode}: {started.stderr.strip()}")

    def tmux(self, args):
        return subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True, timeout=30)

    def screen(self):
        return self.tmux(["capture-pane", "-p", "-t", "top"]).stdout

    def foreground(self):
        """The name of the program in the terminal's foreground (`sleep` once the command has ended)."""
        return self.tmux(["display-message", "-p", "-t", "top", "#{pane_current_command}"]).stdout.strip()

    def keys(self, *keys):
        self.tmux(["send-keys", "-t", "top", *keys])

    def shows(self, text, timeout=30):
        return wait_until(lambda: text in self.screen() and self.screen(), timeout,
                          what=f"top showing {text!r}")

    def close(self):
        self.tmux(["kill-server"])


@unittest.skipUnless(shutil.which("tmux"), "tmux is not installed (scripts/install-deps installs it)")
class TopTest(unittest.TestCase):
    def test_the_dashboard_shows_the_gpus_a_running_job_and_answers_keys(self):
        with Daemon() as d:
            job = d.enqueue(["sleep", "60"], gpus=2, name="train-resnet")
            running = d.wait_state(job, "running")
            gpus = running["gpus"]
            user = running["user"]
            waiting = d.enqueue(["true"], gpus=8)
            term = Tmux(f"{GPUPOOL} top --interval 0.2", d.env, width=100, height=30)
            try:
                screen = term.shows(f"job {job} ({user}, train-resnet)")
                for gpu in range(8):
                    self.assertRegex(screen, rf"(?m)^\s*{gpu} H200 ", f"GPU {gpu} is listed:\n{screen}")
                held = [line for line in screen.splitlines() if f"job {job} ({user}" in line]
                self.assertEqual(len(held), len(gpus), screen)
                self.assertIn("QUEUE  1 running, 1 queued", screen)
                self.assertRegex(screen, rf"(?m)^\s*{waiting} queued ", screen)

                term.keys("u")  # the only user: the filter shows their cards only
                screen = term.shows(f"user: {user}")
                self.assertEqual(sum(1 for line in screen.splitlines() if " H200 " in line), len(gpus), screen)
                term.keys("u")
                term.shows("u user: all")

                for _ in range(gpus[0]):
                    term.keys("Down")
                term.keys("Enter")
                screen = term.shows("DETAILS")
                self.assertIn("command  sleep 60", screen)
                self.assertIn(f"job {job} ({user}, train-resnet)  batch", screen)
                term.keys("Escape")
                term.shows("QUEUE")

                term.keys("q")
                wait_until(lambda: "H200" not in term.screen(), 10, what="top quitting on q")
                # Its process too, before the terminal goes: a hangup in the middle of its exit
                # (seconds under ASan, whose leak check runs then) once left it hanging.
                wait_until(lambda: term.foreground() == "sleep", 30, what="top's process ending on q")
            finally:
                term.close()

    def test_cards_used_outside_gpupool_are_marked_outside(self):
        # The dgx1-v100 fixture has processes on GPUs 0-3 and 5 that no lease accounts for.
        frame = gpupool("top", "--once", sim="dgx1-v100", env={"COLUMNS": "80", "LINES": "24",
                                                               "GPUPOOL_RUNTIME_DIR": "/nonexistent-gpupool"})
        lines = frame.stdout.splitlines()
        self.assertEqual(len(lines), 24, frame.stdout)
        self.assertTrue(all(len(line) <= 80 for line in lines), frame.stdout)
        self.assertRegex(frame.stdout, r"(?m)^\s*0 .* outside: pid 48211 ", frame.stdout)
        self.assertIn("No gpupoold is running", frame.stdout)
        self.assertNotIn("q quit", frame.stdout, "a frame for scripts has no keys to press")

    def test_without_a_terminal_top_says_what_to_use_instead(self):
        proc = gpupool("top", check=False)
        self.assertEqual(proc.returncode, 1)
        self.assertEqual(len(proc.stderr.strip().splitlines()), 1, proc.stderr)
        self.assertIn("--once", proc.stderr)
        proc = gpupool("top", "--interval", "0", check=False)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("--interval", proc.stderr)


class ListWatchTest(unittest.TestCase):
    def test_list_watch_prints_a_table_every_interval_until_interrupted(self):
        proc = subprocess.Popen([GPUPOOL, "list", "--watch", "--interval", "0.2"], env=clean_env(GPUPOOL_SIM="h200-1"),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(2.0)
        proc.terminate()
        out, _ = proc.communicate(timeout=10)
        tables = out.count("Driver ")
        self.assertGreaterEqual(tables, 3, out)
        self.assertNotIn("\x1b[2J", out, "piped output is not cleared like a screen")

    def test_list_watch_json_prints_one_sample_per_line(self):
        proc = subprocess.Popen([GPUPOOL, "list", "--watch", "--json", "-n", "0.2"],
                                env=clean_env(GPUPOOL_SIM="pcie-4gpu"), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        time.sleep(1.5)
        proc.terminate()
        out, _ = proc.communicate(timeout=10)
        samples = [json.loads(line) for line in out.splitlines() if line.strip()]
        self.assertGreaterEqual(len(samples), 2, out)
        self.assertEqual([len(s) for s in samples], [4] * len(samples))


if __name__ == "__main__":
    main()
