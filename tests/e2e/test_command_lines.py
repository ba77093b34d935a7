"""The command lines people type every day: gpupool's options end at the program's first word or
at `--`, and everything after belongs to the program, byte for byte (README, "Commands")."""
import os
import tempfile
import unittest

from harness import GPUPOOL, Daemon, gpupool, main, one_line


class ProgramWordsTest(unittest.TestCase):
    def test_run_leaves_the_programs_options_to_it(self):
        proc = gpupool("run", "-q", "--wait", "10m", "--", "echo", "train.py", "--name", "3")
        self.assertEqual(proc.stdout, "train.py --name 3\n")
        proc = gpupool("run", "-q", "--name", "mine", "echo", "--wait", "--", "-g", "2")
        self.assertEqual(proc.stdout, "--wait -- -g 2\n", "without --, the program's first word ends ours")

    def test_an_optional_value_does_not_swallow_the_separator(self):
        proc = gpupool("launch", "-g", "2", "--wait", "--", "sh", "-c", 'echo "$0"', "-v")
        self.assertEqual(sorted(proc.stdout.splitlines()), ["[rank 0] -v", "[rank 1] -v"], proc.stderr)

    def test_a_command_is_required_and_unknown_options_are_usage_errors(self):
        for args in (["run", "-q"], ["run", "--bogus", "true"], ["launch", "--"], ["submit", "-g", "1"]):
            with self.subTest(args=args):
                proc = gpupool(*args, check=False, input="")  # submit reads a script from a non-terminal
                self.assertEqual(proc.returncode, 2, proc.stderr)
                self.assertTrue(one_line(proc), proc.stderr)

    def test_submit_stores_the_program_as_typed(self):
        with Daemon() as d:
            plain = d.submit("echo", "train.py", "--name", "x")
            separated = d.submit("--name", "mine", "--", "echo", "--", "--hold")
            shown = d.show(plain)
            self.assertEqual(shown["command"], ["echo", "train.py", "--name", "x"])
            self.assertNotEqual(shown["name"], "x")
            shown = d.show(separated)
            self.assertEqual((shown["name"], shown["command"]), ("mine", ["echo", "--", "--hold"]))
            self.assertEqual([job["state"] for job in d.finish(plain, separated)], ["done", "done"])
            self.assertEqual(d.gp("logs", str(plain), check=True).stdout, "train.py --name x\n")


class UsageErrorsTest(unittest.TestCase):
    """Every mistake in a command line is one line naming it and the help to read, and exit 2."""

    def expect_usage_error(self, args, line):
        proc = gpupool(*args, check=False)
        self.assertEqual((proc.returncode, proc.stdout, proc.stderr), (2, "", f"gpupool: {line}\n"))

    def test_an_unknown_command_suggests_the_nearest(self):
        self.expect_usage_error(["lsit"], "unknown command 'lsit' (did you mean 'list'?) (see gpupool --help)")
        self.expect_usage_error(["frobnicate", "-x"], "unknown command 'frobnicate' (see gpupool --help)")

    def test_bad_options_and_values_name_the_commands_help(self):
        self.expect_usage_error(["run", "-g", "abc", "--", "true"],
                                "--gpu-count: 'abc' is not a whole number from 1 to 1024 (see gpupool run --help)")
        self.expect_usage_error(["list", "--bogus"], "unknown option '--bogus' (see gpupool list --help)")
        for args in (["submit", "--mem", "20Q", "--", "true"], ["run", "--wait", "10x", "--", "true"],
                     ["jobs", "--state", "runing"], ["report", "--since", "yesterday"],
                     ["launch", "--grace", "soon", "--", "true"], ["submit", "--time", "-1h", "--", "true"],
                     ["cancel", "7", "x"], ["show", "0"], ["wait", "1,,2"]):
            with self.subTest(args=args):
                proc = gpupool(*args, check=False, input="")  # submit reads a script from a non-terminal
                self.assertEqual(proc.returncode, 2, proc.stderr)
                self.assertTrue(one_line(proc), proc.stderr)
                self.assertIn(f"(see gpupool {args[0]} --help)", proc.stderr)

    def test_no_command_prints_the_help(self):
        proc = gpupool(check=False)
        self.assertEqual(proc.returncode, 2)
        self.assertIn("Usage: gpupool", proc.stdout)
        self.assertEqual(gpupool("help").stdout, proc.stdout)


class UntrustedTextTest(unittest.TestCase):
    """A job's name and command come from its submitter: other users' terminals get them escaped,
    one row per job, cut in display cells and never inside a character."""

    EVIL = "evil\x1b[31mred\nline2\x1b]0;title\x07\u202e"

    def assert_harmless(self, text, what):
        self.assertNotIn("\x1b", text, what)
        self.assertNotIn("\x07", text, what)
        self.assertNotIn("\u202e", text, what)
        self.assertNotIn("\nline2", text, what)

    def test_names_and_commands_reach_terminals_escaped(self):
        with Daemon() as d:
            job = d.submit("--name", self.EVIL, "--", "sh", "-c", f"sleep 60 # {self.EVIL}")
            wide = d.submit("--hold", "--name", "αβγ-日本語-名前がとても長い-x", "--", "true")
            d.wait_state(job, "running")
            listed = d.gp("jobs", check=True).stdout
            self.assert_harmless(listed, "jobs")
            self.assertEqual(len(listed.splitlines()), 3, listed)
            self.assertIn(" evil\\x1b[31m~ ", listed, "escaped, then cut at 13 cells")
            row = next(line for line in listed.splitlines() if line.lstrip().startswith(str(wide)))
            self.assertIn(" αβγ-日本語-~  ", row, "cut at 13 cells, between characters")
            shown = d.gp("show", str(job), check=True).stdout
            self.assert_harmless(shown, "show")
            self.assertIn("command      sh -c 'sleep 60 # evil\\x1b[31mred\\nline2", shown)
            frame = d.gp("top", "--once", check=True).stdout
            self.assert_harmless(frame, "top --once")
            d.gp("cancel", str(job), str(wide), check=True)

    def test_lease_holders_reach_terminals_escaped(self):
        with tempfile.TemporaryDirectory() as runtime:
            env = {"GPUPOOL_RUNTIME_DIR": runtime, "PATH": f"{os.path.dirname(GPUPOOL)}:{os.environ['PATH']}"}
            leases = gpupool("run", "-q", "--name", self.EVIL, "--", "gpupool", "leases", env=env)
        self.assert_harmless(leases.stdout, "leases")
        self.assertIn("evil\\x1b[31mred", leases.stdout)


if __name__ == "__main__":
    main()
