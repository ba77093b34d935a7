#!/usr/bin/env python3
"""Writes CUDA_VISIBLE_DEVICES / CUDA_DEVICE_ORDER values to probe the real CUDA driver with.

One JSON line per case, {"value": str or null (unset), "order": str or null (unset)}: first a
deterministic hand-picked list (every rule in docs/cuda-visible-devices.md, and the values that
settle what is still unverified), then COUNT random mixes of every form. The GPUs' UUIDs come
from the arguments or from a JSON file (any JSON: every "GPU-..." UUID string in it is taken, so
`nvidia-smi`-derived lists and gpupool's own JSON both work). Python 3 standard library only.

  cvd-corpus.py GPU-16fb8516-9f03-8d84-eb33-9dfbc4d69c74 > cases.jsonl
  cvd-corpus.py --uuids-json gpus.json --count 20000 --seed 7 -o cases.jsonl

With --fuzz-seeds DIR it instead writes COUNT (default 40) seed files for the libFuzzer target
src/machine/cuda_visible_devices_fuzz.cc, spread evenly over the hand-picked list; pass the fuzz
target's eight UUIDs (its kUuids) so that UUID entries match.
"""
import argparse
import itertools
import json
import os
import random
import re
import sys

UUID_RE = re.compile(r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", re.I)
VALID_ORDERS = ["PCI_BUS_ID", "FASTEST_FIRST"]
INVALID_ORDERS = ["pci_bus_id", "bogus", "", " PCI_BUS_ID", "PCI_BUS_ID ", "fastest_first",
                  "PCI-BUS-ID", "0"]
WORDS = ["a", "zero", "none", "all", "void", "NoDevFiles", "GPU", "MIG", "G", "x"]
JUNK_SUFFIXES = ["a", "x", "x1", ".5", ".0", " 1", " 0", ";1", ";", ":0", ":1", "|1", "/0", "e0",
                 "\t", " ", "\n", "-", "+"]
# Numbers where strtol and strtoul (or a 32-bit parse) disagree: what the next probe must settle.
PARSE_DISCRIMINATORS = ["-99999999999999999999", "9223372036854775807", "9223372036854775808",
                        "-9223372036854775808", "-9223372036854775809", "-4294967296",
                        "-4294967295", "4294967295", "2147483647", "-2147483647", "0000000000001"]


def uuids_from_json(path):
    found = []

    def walk(node):
        if isinstance(node, str):
            if UUID_RE.match(node) and node not in found:
                found.append(node)
        elif isinstance(node, list):
            for item in node:
                walk(item)
        elif isinstance(node, dict):
            for item in node.values():
                walk(item)

    with open(path) as f:
        walk(json.load(f))
    return found


def hex_of(uuid):
    return uuid[4:]


def dashless(uuid):
    return "GPU-" + hex_of(uuid).replace("-", "")


def common_prefix(a, b):
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return a[:n]


def rule_values(uuids):
    """One or more values per rule, and the unverified corners."""
    n = len(uuids)
    u = uuids[0]
    h = hex_of(u)
    values = [None, "", " ", "  ", "\t", ",", ",,", "0", " 0", "0 ", " 0 ", "\t0", "0\t", "0\n",
              "+0", "-0", "00", "000", "0x0", "0x1", "0X0", "00x0", "0.0", "0.5", "0e0", "0b0",
              "0o0", "-1", str(n), str(n + 1), "9", "10", "4294967296", str(4294967296 + n),
              "2147483648", "-2147483648", "18446744073709551616", "99999999999999999999",
              "0,,", ",0", "0,", ",0,", "0,,0", " , 0", "0, 0", "0 ,1", "0,  1", "0;1", "0;",
              "0 1", "0 0", "0:0", "0:1", "0|1", "0/0", "0a", "a0", "a,0", "0,a", "0,1,a",
              "0,a,1", "-1,0", "0,-1", "0,0", "0,00", "00,0", "0,-0", "0,+0", "0,a,0"]
    values += WORDS + PARSE_DISCRIMINATORS
    values += ["GPU-", "gpu-", "MIG-", "MIG-0", "MIG-0/0/0", "MIG-GPU-", "GPU-0",
               "GPU-00000000-0000-0000-0000-000000000000", "GPU-ffffffff",
               u, u.upper(), "gpu-" + h, "Gpu-" + h, h, h[:8], u + " ", " " + u, u + "x",
               u + "0", u + ",", u + ",0", "0," + u, u + "," + u, u.upper() + "," + u, u + ",a,0",
               u + ";0", u + " 0", u.replace("-", ""), dashless(u), "GPU" + h, "GPU " + h,
               "GPU--" + h, "MIG-" + h, "MIG-" + u, "MIG-" + u + "/0/0", u + "/0/0", u + ":0",
               "GPU-" + h[:4] + "," + u, "GPU-" + h[:6] + ",0", "0,GPU-" + h[:6],
               u + ",0," + u, "0," + u + ",0", u + ",0,0"]
    # Unverified: a stray character inside the hex part, and whether it ends the UUID.
    values += ["GPU-" + h[:8] + " " + h[8:], "GPU-" + h[:8] + "x" + h[8:], "GPU-" + h[:4] + "g",
               "GPU-" + h[:1] + ":" + h[1:], "GPU-" + h[:12] + "/0"]
    for k in [1, 2, 3, 4, 6, 8, 9, 12, 16, 24, 35, 36]:
        values += ["GPU-" + h[:k], "GPU-" + h[:k].upper()]
    for i in range(n):
        for j in range(i + 1, n):
            prefix = common_prefix(hex_of(uuids[i]).lower(), hex_of(uuids[j]).lower())
            if prefix:  # unverified: a prefix that fits two GPUs
                values.append("GPU-" + prefix)
    return values


def per_gpu_values(uuids):
    """Every GPU's own names, alone, twice, and in pairs."""
    n = len(uuids)
    values = []
    for i in range(n):
        values += [str(i), uuids[i], "GPU-" + hex_of(uuids[i])[:8], "%d,%d" % (i, i),
                   "%d,%s" % (i, uuids[i]), "%s,%d" % (uuids[i], i), "%s,%s" % (uuids[i], uuids[i])]
        for j in range(n):
            if i != j:
                values += ["%d,%d" % (i, j), uuids[i] + "," + uuids[j], "%d,%d,%d" % (i, n, j),
                           "%d,%s" % (i, uuids[j]), "%d,,%d" % (i, j)]
    if n > 1:
        values += [",".join(str(i) for i in range(n)), ",".join(reversed(uuids)),
                   ",".join(str(i) for i in reversed(range(n)))]
    return values


def orderings(n):
    """Index orders of all n GPUs: every permutation up to 4 GPUs, else reversed, rotations,
    evens before odds and a few fixed shuffles."""
    if n <= 4:
        return [list(p) for p in itertools.permutations(range(n))]
    found = [list(reversed(range(n))), list(range(0, n, 2)) + list(range(1, n, 2))]
    found += [list(range(k, n)) + list(range(k)) for k in range(1, n)]
    shuffler = random.Random(n)
    for _ in range(4):
        order = list(range(n))
        shuffler.shuffle(order)
        found.append(order)
    return found


def shortest_unique_prefix(uuids, i):
    h = hex_of(uuids[i]).lower()
    others = [hex_of(u).lower() for k, u in enumerate(uuids) if k != i]
    for k in range(1, len(h) + 1):
        if not any(o.startswith(h[:k]) for o in others):
            return h[:k]
    return h


def multi_gpu_values(uuids):
    """What only several GPUs can show: orders, repeats after another card, a list cut by an
    invalid entry, every GPU's UUID prefixes (the shortest unique one and one character less)."""
    n = len(uuids)
    if n < 2:
        return []
    values = []
    for order in orderings(n):
        values += [",".join(map(str, order)), ",".join(uuids[i] for i in order),
                   ",".join(str(i) if k % 2 == 0 else uuids[i] for k, i in enumerate(order))]
    every = ",".join(map(str, range(n)))
    values += [every + ",0", ",".join(uuids) + "," + uuids[0], ",".join(uuids) + ",0"]
    unknown = "GPU-ffffffff-ffff-ffff-ffff-ffffffffffff"
    for i in range(n):
        j = (i + 1) % n
        values += ["%d,%d,%d" % (i, j, i), "%s,%s,%s" % (uuids[i], uuids[j], uuids[i]),
                   "%d,-1,%d" % (i, j), "%d,a,%d" % (i, j), "%d,%d" % (n, i),
                   "%s,%s,%s" % (uuids[i], unknown, uuids[j]), "%s,GPU-zz,%s" % (uuids[i], uuids[j]),
                   "%s,%s" % (unknown, uuids[i])]
        shortest = shortest_unique_prefix(uuids, i)
        h = hex_of(uuids[i])
        for prefix in dict.fromkeys([shortest, shortest[:-1], h[:1], h[:2], h[:4], h[:12], h[:16], h[:-1]]):
            if prefix:
                values += ["GPU-" + prefix, "GPU-" + prefix + ",%d" % j,
                           "GPU-" + prefix + "," + uuids[j]]
    return values


def order_cases(uuids):
    """A few values under every CUDA_DEVICE_ORDER, valid or not; with several GPUs, every GPU
    alone and the reversed list under both valid orders."""
    n = len(uuids)
    values = [None, "", "0", "1,0", "0,1", uuids[0], str(n - 1), ",".join(map(str, range(n)))]
    cases = [(v, order) for order in VALID_ORDERS + INVALID_ORDERS for v in values]
    if n > 1:
        per_gpu = [str(i) for i in range(n)] + uuids + [",".join(map(str, reversed(range(n)))),
                                                       ",".join(reversed(uuids))]
        cases += [(v, order) for order in VALID_ORDERS for v in per_gpu]
    return cases


def hand_picked(uuids):
    """The deterministic cases: every rule, on every GPU, and the unverified corners."""
    values = rule_values(uuids) + per_gpu_values(uuids) + multi_gpu_values(uuids)
    return list(unique([(v, None) for v in values] + order_cases(uuids)))


class RandomCases:
    """Random mixes of every entry form; each entry form is one small method."""

    def __init__(self, uuids, rng):
        self.uuids = uuids
        self.n = len(uuids)
        self.rng = rng

    def index(self):
        return self.rng.randrange(self.n)

    def valid_index(self):
        return str(self.index())

    def invalid_index(self):
        r = self.rng
        return r.choice([str(self.n + r.randrange(10)), str(-1 - r.randrange(3)),
                         str(r.randrange(10 ** r.randrange(1, 25))),
                         r.choice(PARSE_DISCRIMINATORS)])

    def signed_or_padded_index(self):
        return self.rng.choice(["+", "-", "0", "00", "+0", "-0"]) + self.valid_index()

    def spaced_index(self):
        r = self.rng
        before = r.choice(["", " ", "\t", "  ", "\n"])
        return before + self.valid_index() + r.choice(["", " ", "\t"])

    def junk_index(self):
        return self.valid_index() + self.rng.choice(JUNK_SUFFIXES)

    def wrapped_index(self):
        r = self.rng
        return str(self.index() + r.choice([1, 2, 3, 2 ** 31]) * 2 ** 32 * r.choice([1, 1, -1]))

    def uuid(self):
        return self.uuids[self.index()]

    def full_uuid(self):
        return self.rng.choice([self.uuid(), self.uuid().upper(), dashless(self.uuid()),
                                "GPU--" + hex_of(self.uuid())])

    def uuid_prefix(self):
        h = hex_of(self.uuid())
        prefix = h[:self.rng.randrange(1, len(h) + 1)]
        return "GPU-" + (prefix.upper() if self.rng.random() < 0.3 else prefix)

    def mig_uuid(self):
        h = hex_of(self.uuid())
        return self.rng.choice(["MIG-" + h, "MIG-" + h[:8], "MIG-" + self.uuid(),
                                "MIG-" + self.uuid() + "/0/0"])

    def junk_uuid(self):
        r = self.rng
        h = hex_of(self.uuid())
        cut = r.randrange(1, len(h) + 1)
        return "GPU-" + h[:cut] + r.choice(JUNK_SUFFIXES + ["/0/0", "g", "z9"]) + h[cut:]

    def wrong_uuid(self):
        r = self.rng
        h = hex_of(self.uuid())
        return r.choice(["gpu-" + h, "Gpu-" + h, "GPU" + h, " " + self.uuid(), h, h[:8], "GPU-",
                         "GPU-0", "GPU-" + "".join(r.choice("0123456789abcdef") for _ in range(8)),
                         "MIG-GPU-", "GPU-" + h[:4] + "-"])

    def empty(self):
        return self.rng.choice(["", " ", "\t", "  "])

    def word(self):
        return self.rng.choice(WORDS)

    def entry(self):
        forms = [self.valid_index] * 6 + [self.full_uuid] * 3 + [
            self.invalid_index, self.signed_or_padded_index, self.spaced_index, self.junk_index,
            self.wrapped_index, self.uuid_prefix, self.uuid_prefix, self.mig_uuid, self.junk_uuid,
            self.wrong_uuid, self.empty, self.word]
        return self.rng.choice(forms)()

    def same_gpu_again(self, entries):
        """A duplicate of an earlier GPU by index, by UUID, or mixed (index and UUID)."""
        r = self.rng
        earlier = r.choice(entries).strip()
        if earlier.isdigit() and int(earlier) < self.n:
            i = int(earlier)
            return r.choice([str(i), "0" + str(i), "+" + str(i), " " + str(i), self.uuids[i],
                             "GPU-" + hex_of(self.uuids[i])[:6]])
        for i, uuid in enumerate(self.uuids):
            if earlier.lower().startswith(uuid[:8].lower()):
                return r.choice([str(i), uuid, uuid.upper(), "GPU-" + hex_of(uuid)[:10]])
        return earlier

    def value(self):
        r = self.rng
        roll = r.random()
        if roll < 0.04:
            return None
        if roll < 0.08:
            return self.empty()
        entries = [self.entry() for _ in range(r.choice([1, 1, 2, 2, 3, 3, 4, 5, 6]))]
        if r.random() < 0.3:
            entries.insert(r.randrange(len(entries) + 1), self.same_gpu_again(entries))
        separator = "," if r.random() < 0.95 else r.choice([", ", " ,", ";", " "])
        return separator.join(entries)

    def order(self):
        roll = self.rng.random()
        if roll < 0.6:
            return None
        if roll < 0.9:
            return self.rng.choice(VALID_ORDERS)
        return self.rng.choice(INVALID_ORDERS)


def unique(cases):
    seen = set()
    for case in cases:
        if case not in seen:
            seen.add(case)
            yield case


def random_cases(uuids, count, seed, already):
    generator = RandomCases(uuids, random.Random(seed))
    seen = set(already)
    produced = 0
    for _ in range(count * 50):  # the space is huge: this bound is never reached in practice
        case = (generator.value(), generator.order())
        if case in seen:
            continue
        seen.add(case)
        produced += 1
        yield case
        if produced == count:
            return


def spread(cases, count):
    return [cases[i * len(cases) // count] for i in range(min(count, len(cases)))]


def write_fuzz_seeds(directory, uuids, count):
    """Seed files in the fuzz target's format: flags byte, value, NUL, order."""
    os.makedirs(directory, exist_ok=True)
    rules = list(unique([(v, None) for v in rule_values(uuids)]))
    orders = order_cases(uuids)
    picked = spread(rules, count - count // 6) + spread(orders, count // 6)
    for number, (value, order) in enumerate(picked):
        flags = (1 if value is not None else 0) | (2 if order is not None else 0)
        data = bytes([flags]) + (value or "").encode() + b"\0" + (order or "").encode()
        with open(os.path.join(directory, "seed-%03d" % number), "wb") as f:
            f.write(data)
    return len(picked)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("uuids", nargs="*",
                        help="GPU UUIDs (GPU-xxxxxxxx-...), in nvidia-smi order")
    parser.add_argument("--uuids-json", help="a JSON file; every GPU UUID string in it is taken")
    parser.add_argument("--count", type=int, help="random cases (default 5000), or seed files "
                        "with --fuzz-seeds (default 40)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("-o", "--output", help="write here instead of standard output")
    parser.add_argument("--fuzz-seeds", metavar="DIR", help="write fuzz seed files into DIR")
    args = parser.parse_args()

    uuids = list(args.uuids)
    if args.uuids_json:
        uuids += [u for u in uuids_from_json(args.uuids_json) if u not in uuids]
    bad = [u for u in uuids if not UUID_RE.match(u)]
    if bad:
        sys.exit("not a GPU UUID: %s" % ", ".join(bad))
    if not uuids:
        sys.exit("no GPU UUIDs given (arguments or --uuids-json)")

    if args.fuzz_seeds:
        written = write_fuzz_seeds(args.fuzz_seeds, uuids, args.count or 40)
        print("wrote %d seed files to %s" % (written, args.fuzz_seeds), file=sys.stderr)
        return
    cases = hand_picked(uuids)
    count = 5000 if args.count is None else args.count
    out = open(args.output, "w") if args.output else sys.stdout
    total = 0
    for value, order in cases + list(random_cases(uuids, count, args.seed, cases)):
        out.write(json.dumps({"value": value, "order": order}) + "\n")
        total += 1
    if args.output:
        out.close()
    print("wrote %d cases (%d hand-picked, %d random) for %d GPU(s)"
          % (total, len(cases), total - len(cases), len(uuids)), file=sys.stderr)


if __name__ == "__main__":
    main()
