"""Shell completions and man pages, generated at build time from the command-line definitions
(gpupool-docgen into the build tree's share/): the bash completion driven the way bash drives it,
every command and long option present in every script and page, the scripts' syntax, the pages
without groff warnings, and `gpupool completion SHELL` printing the same scripts."""
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import unittest

from harness import BIN_DIR, GPUPOOL, GPUPOOLD, Daemon, clean_env, main

SHARE = os.path.join(BIN_DIR, os.pardir, "share")
PROGRAMS = ("gpupool", "gpupoold")


def script(kind, program):
    return os.path.join(SHARE, {"bash": "bash-completion/completions/{}",
                                "zsh": "zsh/vendor-completions/_{}",
                                "fish": "fish/vendor_completions.d/{}.fish"}[kind].format(program))


def page(name, section=1):
    return os.path.join(SHARE, "man", f"man{section}", f"{name}.{section}")


def read(path):
    with open(path) as f:
        return f.read()


def help_of(program, path):
    """The subcommands and long options `PROGRAM PATH... --help` lists."""
    text = subprocess.run([program, *path, "--help"], env=clean_env(), capture_output=True, text=True,
                          check=True).stdout
    section, commands, options = None, [], []
    for line in text.splitlines():
        if re.match(r"^\S.*:$", line):
            section = line
        elif section == "Subcommands:" and (m := re.match(r"^  (\S+)", line)):
            commands.append(m.group(1))
        elif section in ("Options:", "Positionals:") and (m := re.match(r"^  (-\S+)", line)):
            options += [name.split("{")[0] for name in m.group(1).split(",") if name.startswith("--")]
    return commands, options


def command_tree(program):
    """(path, long options) of the program and of every subcommand, from --help."""
    tree, todo = [], [[]]
    while todo:
        path = todo.pop(0)
        commands, options = help_of(program, path)
        tree.append((path, options))
        todo += [path + [command] for command in commands]
    return tree


def complete(words, env=None, cwd=None, line=None, wordbreaks=None):
    """What the generated bash completion offers for WORDS, the last being the word under the cursor,
    as bash splits LINE (default: the words joined by spaces; bash also splits at ':' and '=', unless
    WORDBREAKS, its COMP_WORDBREAKS, leaves them out)."""
    program = os.path.basename(words[0])
    line = " ".join(words) if line is None else line
    driver = "" if wordbreaks is None else f"COMP_WORDBREAKS={shlex.quote(wordbreaks)}; "
    driver += (f'source "$1"; COMP_WORDS=("${{@:2}}"); COMP_CWORD={len(words) - 1}; '
              f'COMP_LINE={shlex.quote(line)}; COMP_POINT={len(line)}; _{program}; printf "%s\\n" "${{COMPREPLY[@]}}"')
    run_env = clean_env(**(env or {}))
    run_env["PATH"] = os.path.abspath(BIN_DIR) + os.pathsep + run_env["PATH"]
    proc = subprocess.run(["bash", "-c", driver, "bash", script("bash", program), *words], env=run_env, cwd=cwd,
                          capture_output=True, text=True, timeout=60)
    if proc.returncode != 0 or proc.stderr:
        raise AssertionError(f"completing {words}: exit {proc.returncode}, stderr {proc.stderr!r}")
    return sorted(word for word in proc.stdout.split("\n") if word)


class BashCompletion(unittest.TestCase):
    def test_top_level_offers_every_command(self):
        commands, _ = help_of(GPUPOOL, [])
        self.assertEqual(complete(["gpupool", ""]), sorted(commands))
        self.assertEqual(complete(["gpupool", "re"]), ["release", "report", "resolve", "resume"])
        self.assertIn("--version", complete(["gpupool", "--"]))

    def test_options_of_run_and_nested_commands(self):
        _, options = help_of(GPUPOOL, ["run"])
        self.assertIn("--gpu-count", options)
        self.assertEqual(complete(["gpupool", "run", "--"]), sorted(options))
        self.assertEqual(complete(["gpupool", "run", "-g", "2", "--me"]), ["--mem"])
        self.assertEqual(complete(["gpupool", "sim", ""]), ["capture", "import", "list", "place", "replay"])
        self.assertIn("--schedule-out", complete(["gpupool", "sim", "replay", "--machine", "h200-1", "--"]))

    def test_values_from_choice_lists(self):
        self.assertEqual(complete(["gpupool", "sim", "replay", "--policy", ""]), ["backfill", "fifo", "gpupool"])
        self.assertEqual(complete(["gpupool", "sim", "replay", "--policy", "=", "f"]), ["fifo"])
        self.assertEqual(complete(["gpupool", "resolve", "--order", ""]), ["fastest", "pci"])
        self.assertEqual(complete(["gpupool", "completion", ""]), ["bash", "fish", "zsh"])

    def test_paths_where_a_value_is_a_path_and_none_after_flags(self):
        with tempfile.TemporaryDirectory() as where:
            os.mkdir(os.path.join(where, "somedir"))
            open(os.path.join(where, "somefile.toml"), "w").close()
            self.assertEqual(complete(["gpupoold", "--config", "some"], cwd=where), ["somedir", "somefile.toml"])
            self.assertEqual(complete(["gpupoold", "--state-dir", "some"], cwd=where), ["somedir"])
            self.assertEqual(complete(["gpupool", "sim", "replay", "--trace", "somef"], cwd=where), ["somefile.toml"])
            # A flag takes no value: what follows is the next option, never a file.
            after_flag = complete(["gpupool", "list", "--json", ""], cwd=where)
            self.assertNotIn("somefile.toml", after_flag)
            self.assertIn("--watch", after_flag)
            self.assertEqual(complete(["gpupool", "list", "--json", "some"], cwd=where), [])
            # bash hands "run:1" over as run, :, 1 and replaces only what follows the ':'.
            for name in ("run:1.json", "run:2.json", ":odd.json"):
                open(os.path.join(where, name), "w").close()
            os.mkdir(os.path.join(where, "dir:x"))
            trace = ["gpupool", "sim", "replay", "--trace"]
            line = "gpupool sim replay --trace "
            self.assertEqual(complete(trace + ["run", ":"], cwd=where, line=line + "run:"), ["1.json", "2.json"])
            self.assertEqual(complete(trace + ["run", ":", "1"], cwd=where, line=line + "run:1"), ["1.json"])
            self.assertEqual(complete(trace[:-1] + ["--trace", "=:", "o"], cwd=where,
                                      line="gpupool sim replay --trace=:o"), ["odd.json"])
            self.assertEqual(complete(["gpupoold", "--state-dir", "dir", ":"], cwd=where,
                                      line="gpupoold --state-dir dir:"), ["x/"])
            # Typed apart, they are words of their own; where ':' does not split words, nothing is cut.
            self.assertEqual(complete(trace + ["run", ":", "1"], cwd=where, line=line + "run : 1"), [])
            self.assertEqual(complete(trace + ["run:1"], cwd=where, wordbreaks=" \t\n\"'><=;|&("),
                             ["run:1.json"])
            # A value without a list of choices: nothing to offer.
            self.assertEqual(complete(["gpupool", "run", "--name", ""], cwd=where), [])

    def test_after_double_dash_only_the_users_command(self):
        self.assertIn("bash", complete(["gpupool", "run", "-g", "2", "--", "bas"]))
        self.assertEqual(complete(["gpupool", "run", "--", "--gpu"]), [])
        self.assertEqual(complete(["gpupool", "submit", "--", "--"]), [])

    def test_job_ids_from_the_daemon(self):
        with tempfile.TemporaryDirectory() as nowhere:  # no daemon: nothing, and nothing said
            self.assertEqual(complete(["gpupool", "show", ""], env={"GPUPOOL_RUNTIME_DIR": nowhere}), [])
        with Daemon() as d:
            first = d.submit("--hold", "--", "true")
            second = d.submit("--hold", "--", "true")
            env = {"GPUPOOL_RUNTIME_DIR": d.runtime_dir, "GPUPOOL_SIM": "hgx-h200"}
            ids = sorted([str(first), str(second)])
            for command in ("show", "cancel", "hold", "release", "wait", "logs"):
                self.assertEqual(complete(["gpupool", command, ""], env=env), ids, command)
            self.assertEqual(complete(["gpupool", "cancel", str(first), ""], env=env), ids)
            self.assertEqual(complete(["gpupool", "logs", "-f", ""], env=env), ids)
            d.gp("cancel", str(first), str(second), check=True)


class EveryScriptAndPage(unittest.TestCase):
    def test_every_command_and_long_option_everywhere(self):
        for program in PROGRAMS:
            binary = GPUPOOL if program == "gpupool" else GPUPOOLD
            scripts = {kind: read(script(kind, program)) for kind in ("bash", "zsh", "fish")}
            for path, options in command_tree(binary):
                if program == "gpupoold":
                    man = read(page("gpupoold", 8))
                else:
                    man = read(page("gpupool" if not path else f"gpupool-{path[0]}"))
                for name in path:
                    self.assertRegex(scripts["bash"], rf"echo '[^']*\b{name}\b", (program, path))
                    self.assertIn(f"'{name}:", scripts["zsh"], (program, path))
                    self.assertIn(f"-a '{name}'", scripts["fish"], (program, path))
                if len(path) == 1:  # listed on gpupool(1), with a page of its own
                    listed = "\\fBgpupool\\-" + path[0].replace("-", "\\-") + "\\fR(1)"
                    self.assertIn(listed, read(page("gpupool")), path)
                elif path:  # a section of its parent's page
                    self.assertIn('.SS "gpupool ' + " ".join(path).replace("-", "\\-") + '"', man, path)
                for option in options:
                    where = (program, path, option)
                    self.assertRegex(scripts["bash"], rf"'{re.escape(' '.join([program, *path]))}'\) echo '[^']*"
                                     rf"{re.escape(option)}\b", where)
                    self.assertIn(option, scripts["zsh"], where)
                    self.assertIn(f"-l {option[2:]} ", scripts["fish"], where)
                    self.assertIn("\\fB" + option.replace("-", "\\-") + "\\fR", man, where)

    def test_the_scripts_parse(self):
        for program in PROGRAMS:
            subprocess.run(["bash", "-n", script("bash", program)], check=True)
            for shell, argv in (("zsh", ["zsh", "-n"]), ("fish", ["fish", "--no-execute"])):
                if shutil.which(shell) is None:
                    print(f"skipped: {shell} is not installed")
                    continue
                proc = subprocess.run([*argv, script(shell, program)], capture_output=True, text=True)
                self.assertEqual((proc.returncode, proc.stderr), (0, ""), (shell, program))

    def test_zsh_and_fish_complete(self):
        if shutil.which("fish"):
            driver = f"source {script('fish', 'gpupool')}; complete -C 'gpupool sim replay --policy '"
            out = subprocess.run(["fish", "--no-config", "-c", driver], capture_output=True, text=True, check=True)
            self.assertEqual(sorted(line.split("\t")[0] for line in out.stdout.splitlines()),
                             ["backfill", "fifo", "gpupool"])
            driver = f"source {script('fish', 'gpupool')}; complete -C 'gpupool sim '"
            out = subprocess.run(["fish", "--no-config", "-c", driver], capture_output=True, text=True, check=True)
            self.assertEqual(sorted(line.split("\t")[0] for line in out.stdout.splitlines()),
                             ["capture", "import", "list", "place", "replay"])

    def test_man_pages_render_without_warnings(self):
        pages = [os.path.join(SHARE, "man", d, f) for d in ("man1", "man8") for f in os.listdir(os.path.join(SHARE, "man", d))]
        commands, _ = help_of(GPUPOOL, [])
        self.assertEqual(sorted(os.path.basename(p) for p in pages),
                         sorted(["gpupool.1", "gpupoold.8"] + [f"gpupool-{c}.1" for c in commands]))
        if shutil.which("groff") is None:
            self.skipTest("groff is not installed")
        for path in pages:
            proc = subprocess.run(["groff", "-man", "-Tutf8", "-ww", "-z", path], capture_output=True, text=True)
            self.assertEqual((proc.returncode, proc.stderr), (0, ""), path)
        text = subprocess.run(["groff", "-man", "-Tutf8", page("gpupool")], capture_output=True, text=True,
                              check=True, env=dict(os.environ, GROFF_NO_SGR="1")).stdout
        text = re.sub(".\b", "", text)  # overstruck bold and underline
        for section in ("SYNOPSIS", "COMMANDS", "ENVIRONMENT", "EXIT STATUS", "FILES", "SEE ALSO"):
            self.assertIn(section, text)
        for variable in ("GPUPOOL_SIM", "GPUPOOL_RUNTIME_DIR", "CUDA_VISIBLE_DEVICES"):
            self.assertIn(variable, text)
        daemon = read(page("gpupoold", 8))
        for needed in ("GPUPOOL_CONFIG", "GPUPOOL_STATE_DIR", ".SH \"SIGNALS\"", "/etc/gpupool/gpupool.toml"):
            self.assertIn(needed, daemon)

    def test_completion_command_prints_the_generated_scripts(self):
        for shell in ("bash", "zsh", "fish"):
            out = subprocess.run([GPUPOOL, "completion", shell], env=clean_env(), capture_output=True, text=True,
                                 check=True).stdout
            self.assertEqual(out, read(script(shell, "gpupool")), shell)
        proc = subprocess.run([GPUPOOL, "completion", "tcsh"], env=clean_env(), capture_output=True, text=True)
        self.assertEqual(proc.returncode, 2)
        self.assertIn("completion", subprocess.run([GPUPOOL, "--help"], env=clean_env(), capture_output=True,
                                                   text=True).stdout)


if __name__ == "__main__":
    main()
