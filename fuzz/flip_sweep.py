#!/usr/bin/env python3
"""One flipped byte at a time: copies a case file, inverts one byte, runs tdiff commands on the
copy and counts the outcomes (exit 0/1, exit 2 with one line, anything else: a crash).

Offsets: every byte of the HDF5 metadata (what is not a dataset's raw data, found with h5py),
or a random sample of --metadata of them, plus --data random bytes of raw data. The seal
(the integrity record in the user block, docs/reference/case-file-format.md) rejects every
flip outside it; --reseal records each copy's new checksum first (as `tdiff case seal` would,
without HDF5), so that the flip reaches the HDF5 read path behind the check.

  fuzz/flip_sweep.py --tdiff build/tdiff --case /tmp/d/tiny.h5 --metadata 2500 --commands info
"""
import argparse
import collections
import hashlib
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile

import h5py

PIECE = 64 << 20
MAGIC = b"tdiff-seal 1\n"


def raw_ranges(path):
    """(offset, length) of every dataset's raw data, file offsets (user block included)."""
    out = []
    with h5py.File(path, "r") as f:
        base = f.id.get_create_plist().get_userblock()

        def visit(name, obj):
            if not isinstance(obj, h5py.Dataset):
                return
            if obj.chunks is None:
                off = obj.id.get_offset()
                if off is not None:
                    out.append((off + base, obj.id.get_storage_size()))
                return
            for i in range(obj.id.get_num_chunks()):
                c = obj.id.get_chunk_info(i)
                out.append((c.byte_offset + base, c.size))

        f.visititems(visit)
    return out, base


def quick_fingerprint(data, block):
    body = data[block:]
    h = hashlib.sha256(struct.pack("<Q", len(data)))
    ends = 1 << 20
    h.update(body[:ends])
    h.update(body[max(len(body) - ends, 0):][:ends])
    sample = 64 << 10
    for i in range(16):
        at = (len(body) - sample) // 15 * i if len(body) > sample else 0
        h.update(body[at:at + sample])
    return h.hexdigest()


def reseal(data):
    """The bytes with a fresh integrity record (src/base/file_seal.h), if they carry one."""
    block = 512
    if not data.startswith(MAGIC) and b"\nsha256=" not in data[:block]:
        return data
    body = data[block:]
    sums = "".join(hashlib.sha256(body[i:i + PIECE]).hexdigest() for i in range(0, len(body), PIECE))
    record = "tdiff-seal 1\nblock={}\nsize={}\nquick={}\nsha256={}\n".format(
        block, len(data), quick_fingerprint(data, block), hashlib.sha256(sums.encode()).hexdigest())
    return record.encode().ljust(block, b"\0") + body


def classify(rc, err):
    lines = [l for l in err.decode(errors="replace").splitlines() if l.strip()]
    if rc in (0, 1):
        return "ok"
    if rc == 2 and len(lines) == 1:
        return "exit2"
    return "CRASH rc={} {}".format(rc, (lines[-1] if lines else "")[:160])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tdiff", required=True)
    ap.add_argument("--case", required=True)
    ap.add_argument("--metadata", type=int, default=0, help="random metadata offsets (0: every one)")
    ap.add_argument("--data", type=int, default=50)
    ap.add_argument("--commands", default="info", help="comma-separated: info,run,stats,golden,compare")
    ap.add_argument("--reseal", action="store_true")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    data = open(a.case, "rb").read()
    ranges, base = raw_ranges(a.case)
    is_raw = bytearray(len(data))
    for off, n in ranges:
        is_raw[off:off + n] = b"\1" * n
    meta = [i for i in range(base, len(data)) if not is_raw[i]]
    raw = [i for i in range(len(data)) if is_raw[i]]
    rng = random.Random(a.seed)
    offsets = meta if a.metadata == 0 else sorted(rng.sample(meta, min(a.metadata, len(meta))))
    offsets += sorted(rng.sample(raw, min(a.data, len(raw))))
    print("{}: {} bytes, {} of metadata, {} flips".format(a.case, len(data), len(meta), len(offsets)), flush=True)
    tmp = tempfile.mkdtemp(prefix="flip-")
    counts = collections.Counter()
    crashes = []
    for off in offsets:
        b = bytearray(data)
        b[off] ^= 0xFF
        mutant = bytes(b)
        if a.reseal:
            mutant = reseal(mutant)
        path = os.path.join(tmp, "m.h5")
        open(path, "wb").write(mutant)
        for cmd in a.commands.split(","):
            argv = {"info": [a.tdiff, "info", path], "stats": [a.tdiff, "stats", path],
                    "run": [a.tdiff, "run", path, "--backend", "emu", "--no-reports"],
                    "golden": [a.tdiff, "golden", path, "--stages", "embed"],
                    "compare": [a.tdiff, "compare", path, path]}[cmd]
            try:
                p = subprocess.run(argv, capture_output=True, timeout=60)
                verdict = classify(p.returncode, p.stderr)
            except subprocess.TimeoutExpired:
                verdict = "CRASH timeout"
            counts[(cmd, verdict if not verdict.startswith("CRASH") else "crash")] += 1
            if verdict.startswith("CRASH"):
                crashes.append((off, cmd, verdict))
                print("offset {} {}: {}".format(off, cmd, verdict), flush=True)
    shutil.rmtree(tmp)
    for k in sorted(counts):
        print("{} {}: {}".format(k[0], k[1], counts[k]))
    print("crashes: {} of {} runs".format(len(crashes), sum(counts.values())))
    return 1 if crashes else 0


if __name__ == "__main__":
    sys.exit(main())
