#!/usr/bin/env python3
"""The layering test: src/ is one folder per domain, each a library that declares which folders
it may use (gpupool_library in its CMakeLists.txt, written to layers.txt by the build). Fails,
naming file and line, on:
  - an #include of a folder the including folder does not declare (tests may also use their
    TEST_USES, *_main.cc files their MAIN_USES),
  - an #include "folder/file.h" that does not exist,
  - a folder of src/ that declares nothing, or a cycle among the declared uses,
  - two files of src/ with the same name,
  - a system call or an environment read outside src/os (the one OS boundary).

Usage: check_layers.py SRC_DIR LAYERS_FILE
"""
import collections
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/([^"]+)"')

# Calls that reach the kernel or the process environment. Written as calls (name followed by
# "("), not qualified by an object or a namespace other than the global one.
OS_CALLS = """
getenv secure_getenv setenv unsetenv putenv clearenv
fork vfork execv execve execvp execvpe execl execlp posix_spawn posix_spawnp
waitpid waitid wait4 kill killpg pidfd_open pidfd_send_signal syscall
socket socketpair connect bind listen accept accept4 getsockopt setsockopt sendmsg recvmsg
open openat creat close read write pread pwrite lseek pipe pipe2 dup dup2 dup3 ioctl fcntl flock lockf mmap munmap
prctl setsid setpgid getpgid chdir fchdir chmod fchmod chown fchown lchown unlink unlinkat
mkdir mkdirat rmdir rename renameat symlink readlink link stat lstat fstat fstatat statfs
poll ppoll epoll_create1 epoll_ctl epoll_wait signalfd timerfd_create timerfd_settime eventfd
sigaction sigprocmask pthread_sigmask sigemptyset sigaddset sigwait sigtimedwait
sched_setaffinity sched_getaffinity setuid setgid seteuid setegid setresuid setresgid
setgroups initgroups getgrouplist getpwnam getpwnam_r getpwuid getpwuid_r getgrnam getgrnam_r
getgrgid getgrgid_r dlopen dlsym dlvsym dlclose dlerror dladdr bpf mount umount umask gethostname
uname clock_gettime sysconf getuid geteuid getgid getegid getpid getppid gettid
isatty ttyname tcgetattr tcsetattr opendir readdir closedir realpath mkstemp mkdtemp
""".split()
CALL = re.compile(r'(?<![\w.>:])(?:(?:std)?::)?\b(' + '|'.join(OS_CALLS) + r')\s*\(')
ENVIRON = re.compile(r'(?<![\w.>])\benviron\b')

# Files outside src/os that may make such calls, and why.
OS_EXCEPTIONS = {
    # The simulated libnvidia-ml.so.1 stands in for NVIDIA's driver library: it is loaded into
    # other processes and links none of gpupool's libraries above the fixtures.
    'sim/fake_nvml.cc',
    'sim/fake_nvml_simulator.cc',
    # The simulated libcuda.so.1 likewise, and the state files it shares with the simulated NVML.
    'sim/fake_cuda.cc',
    'sim/fake_cuda_state.cc',
    # The CUDA driver probe and checkpoint helper are built on GPU machines with a bare compiler
    # and depend on nothing.
    'gpu/cuda_probe_main.cc',
    'gpu/cuda_checkpoint_main.cc',
}


def strip_comments_and_strings(text):
    text = re.sub(r'/\*.*?\*/', lambda m: '\n' * m.group(0).count('\n'), text, flags=re.S)
    text = re.sub(r'//[^\n]*', '', text)
    text = re.sub(r'R"(\w*)\((.*?)\)\1"', lambda m: '""' + '\n' * m.group(0).count('\n'), text, flags=re.S)
    return re.sub(r'"(?:\\.|[^"\\\n])*"', '""', text)


def read_layers(path):
    layers = {}
    for line in open(path):
        if not line.strip():
            continue
        name, rest = line.split(':', 1)
        uses, tests, mains = (part.split(':', 1)[-1] for part in rest.split('|'))
        split = lambda text: {word for word in re.split(r'[;\s]+', text) if word}
        layers[name.strip()] = (split(uses), split(tests), split(mains))
    return layers


def find_cycle(graph):
    state = {}
    def visit(node, path):
        state[node] = 'open'
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 'open':
                return path[path.index(nxt):] + [nxt] if nxt in path else path + [nxt]
            if nxt not in state:
                found = visit(nxt, path + [nxt])
                if found:
                    return found
        state[node] = 'done'
        return None
    for node in sorted(graph):
        if node not in state:
            found = visit(node, [node])
            if found:
                return found
    return None


def main():
    src, layers_file = sys.argv[1], sys.argv[2]
    layers = read_layers(layers_file)
    problems = []
    folders = sorted(d for d in os.listdir(src) if os.path.isdir(os.path.join(src, d)))
    for folder in folders:
        if folder not in layers:
            problems.append(f'src/{folder}: not a library (add gpupool_library to its CMakeLists.txt)')
    for name, (uses, tests, mains) in layers.items():
        for used in uses | tests | mains:
            if used not in layers:
                problems.append(f'src/{name}/CMakeLists.txt: uses "{used}", which is not a library')
    cycle = find_cycle({name: uses for name, (uses, _, _) in layers.items()})
    if cycle:
        problems.append('a cycle among the libraries: ' + ' -> '.join(cycle))

    seen = collections.defaultdict(list)
    for folder in folders:
        for file in sorted(os.listdir(os.path.join(src, folder))):
            if not file.endswith(('.cc', '.h')):
                continue
            seen[file].append(folder)
            relative = f'{folder}/{file}'
            uses, tests, mains = layers.get(folder, (set(), set(), set()))
            allowed = {folder} | uses
            if re.search(r'_(test|fuzz)\.cc$|_testing\.h$', file):
                allowed |= tests
            if file.endswith('_main.cc'):
                allowed |= mains
            raw = open(os.path.join(src, folder, file)).read()
            for number, line in enumerate(raw.splitlines(), 1):
                match = INCLUDE.match(line)
                if not match:
                    continue
                other, header = match.groups()
                if not os.path.isdir(os.path.join(src, other)):
                    continue  # a library's own folder layout, e.g. <fmt/...> written with quotes
                if not os.path.exists(os.path.join(src, other, header)):
                    problems.append(f'src/{relative}:{number}: includes "{other}/{header}", which does not exist')
                elif other not in allowed:
                    problems.append(f'src/{relative}:{number}: includes "{other}/{header}", but {folder} '
                                    f'may not use {other} (src/{folder}/CMakeLists.txt)')
            if folder == 'os' or relative in OS_EXCEPTIONS or re.search(r'_test\.cc$', file):
                continue
            code = strip_comments_and_strings(raw)
            for number, line in enumerate(code.splitlines(), 1):
                for match in CALL.finditer(line):
                    before = line[:match.start()]
                    if re.search(r'(\w|>|(?<!&)&|\*)\s+$', before) and not re.search(
                            r'\b(return|else|do|case|co_return)\s+$', before):
                        continue  # a declaration of our own function of that name: `Result<X> open(`
                    problems.append(f'src/{relative}:{number}: calls {match.group(1)}() outside src/os '
                                    '(put it behind an interface there)')
                if ENVIRON.search(line):
                    problems.append(f'src/{relative}:{number}: reads environ outside src/os (use os/environment)')
    for file, where in sorted(seen.items()):
        if len(where) > 1:
            problems.append(f'{file}: in {", ".join("src/" + w for w in where)}; names must be unique')

    for problem in problems:
        print(problem)
    print(f'layering: {len(layers)} libraries, {len(problems)} problem(s)')
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main())
