#!/usr/bin/env python3
"""Make an ELF64 shared object loadable on a host whose libc/libstdc++ are older
than the ones it was linked against -- by weakening the symbol versions the host
does not define.  Stdlib only; edits the file in place.

Why: ml-metadata / tensorflow-data-validation 1.21 ship only manylinux_2_39
wheels.  Their extensions require a handful of versions (GLIBC_2.38,
GLIBCXX_3.4.32, CXXABI_1.3.15) that glibc 2.36 / libstdc++ 12 lack, and the
dynamic loader refuses the whole object for any missing *non-weak* required
version.  For every file listed in `.gnu.version_r` (Verneed) we read the
`.gnu.version_d` (Verdef) of the library the host would load and, for each
required version it does not define:

  * set VER_FLG_WEAK (0x2) on the Vernaux entry: the loader then only warns
    (with LD_DEBUG) instead of failing;
  * set the `.gnu.version` (versym) entry of each symbol bound to that version
    to 1 (VER_NDX_GLOBAL): the symbol is then looked up unversioned, so it can
    be satisfied by our shim library (glibc_shim.cc).

The edit only flips flags / indices inside existing tables, so no section moves
and the result can still be processed by patchelf.  Re-running is a no-op.

Usage: elf_weaken_versions.py [--dry-run] [--lib-dir DIR ...] FILE.so [...]
Prints, per file, each weakened version and the symbols re-bound.
"""
from __future__ import annotations

import argparse
import os
import struct
import subprocess
import sys

SHT_DYNSYM = 11
SHT_GNU_VERDEF = 0x6FFFFFFD
SHT_GNU_VERNEED = 0x6FFFFFFE
SHT_GNU_VERSYM = 0x6FFFFFFF
VER_FLG_WEAK = 0x2
VER_NDX_GLOBAL = 1

DEFAULT_LIB_DIRS = [
    "/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu",
    "/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu",
    "/lib64", "/usr/lib64", "/lib", "/usr/lib",
]


class ElfError(Exception):
    pass


class Elf64:
    """Minimal little-endian ELF64 reader over a mutable buffer."""

    def __init__(self, data: bytearray, path: str):
        self.data, self.path = data, path
        if data[:4] != b"\x7fELF":
            raise ElfError(f"{path}: not an ELF file")
        if data[4] != 2 or data[5] != 1:
            raise ElfError(f"{path}: only little-endian ELF64 is supported")
        (self.shoff,) = struct.unpack_from("<Q", data, 0x28)
        self.shentsize, self.shnum, self.shstrndx = struct.unpack_from("<HHH", data, 0x3A)
        self.sections = []
        for i in range(self.shnum):
            off = self.shoff + i * self.shentsize
            (name, stype, _flags, _addr, offset, size, link, info, _align,
             entsize) = struct.unpack_from("<IIQQQQIIQQ", data, off)
            self.sections.append(dict(name=name, type=stype, offset=offset, size=size,
                                      link=link, info=info, entsize=entsize))

    def section(self, stype: int):
        found = [s for s in self.sections if s["type"] == stype]
        return found[0] if found else None

    def cstr(self, strtab: dict, index: int) -> str:
        start = strtab["offset"] + index
        end = self.data.index(b"\0", start)
        return self.data[start:end].decode("ascii", "replace")

    def verdef_names(self) -> set[str]:
        """All version names a library defines (its .gnu.version_d)."""
        sec = self.section(SHT_GNU_VERDEF)
        if sec is None:
            return set()
        strtab = self.sections[sec["link"]]
        names, off = set(), sec["offset"]
        for _ in range(sec["info"]):
            _ver, _flags, _ndx, cnt, _hash, aux, nxt = struct.unpack_from("<HHHHIII", self.data, off)
            aoff = off + aux
            for _ in range(cnt):
                vda_name, vda_next = struct.unpack_from("<II", self.data, aoff)
                names.add(self.cstr(strtab, vda_name))
                aoff += vda_next
            if not nxt:
                break
            off += nxt
        return names

    def verneed(self):
        """Yield (file, vernaux_offset, name, flags, other) for .gnu.version_r."""
        sec = self.section(SHT_GNU_VERNEED)
        if sec is None:
            return
        strtab = self.sections[sec["link"]]
        off = sec["offset"]
        for _ in range(sec["info"]):
            _ver, cnt, vn_file, vn_aux, vn_next = struct.unpack_from("<HHIII", self.data, off)
            fname = self.cstr(strtab, vn_file)
            aoff = off + vn_aux
            for _ in range(cnt):
                _hash, flags, other, name, nxt = struct.unpack_from("<IHHII", self.data, aoff)
                yield fname, aoff, self.cstr(strtab, name), flags, other
                if not nxt:
                    break
                aoff += nxt
            if not vn_next:
                break
            off += vn_next


def ldconfig_paths() -> dict[str, str]:
    """soname -> path for the host's 64-bit libraries, from `ldconfig -p`."""
    paths: dict[str, str] = {}
    for exe in ("ldconfig", "/sbin/ldconfig", "/usr/sbin/ldconfig"):
        try:
            out = subprocess.run([exe, "-p"], capture_output=True, text=True, check=True).stdout
        except (OSError, subprocess.CalledProcessError):
            continue
        for line in out.splitlines()[1:]:
            if "=>" not in line:
                continue
            left, path = line.rsplit("=>", 1)
            soname = left.strip().split(" ", 1)[0]
            if ("x86-64" in left or "AArch64" in left or "64bit" in left) and soname not in paths:
                paths[soname] = path.strip()
        break
    return paths


def find_host_lib(soname: str, user_dirs: list[str], cache: dict[str, str]) -> str | None:
    """Where the loader would find `soname`: --lib-dir, then ld.so.cache, then usual dirs."""
    candidates = [os.path.join(d, soname) for d in user_dirs]
    candidates += [cache[soname]] if soname in cache else []
    candidates += [os.path.join(d, soname) for d in DEFAULT_LIB_DIRS]
    for p in candidates:
        if os.path.exists(p):
            return os.path.realpath(p)
    return None


def weaken(path: str, lib_dirs: list[str], dry_run: bool = False) -> int:
    """Patch one file; return the number of version requirements weakened."""
    with open(path, "rb") as f:
        data = bytearray(f.read())
    elf = Elf64(data, path)
    ldcache = ldconfig_paths()
    host_defs: dict[str, set[str] | None] = {}
    weakened: dict[int, tuple[str, str]] = {}  # versym index -> (file, version)
    for fname, aoff, vname, flags, other in elf.verneed():
        if fname not in host_defs:
            lib = find_host_lib(fname, lib_dirs, ldcache)
            if lib is None:
                print(f"  warning: {fname} not found on host; leaving its versions alone")
                host_defs[fname] = None
            else:
                with open(lib, "rb") as lf:
                    host_defs[fname] = Elf64(bytearray(lf.read()), lib).verdef_names()
        defs = host_defs[fname]
        if defs is None or vname in defs:
            continue
        weakened[other] = (fname, vname)
        if not flags & VER_FLG_WEAK:
            struct.pack_into("<H", data, aoff + 4, flags | VER_FLG_WEAK)

    versym, dynsym = elf.section(SHT_GNU_VERSYM), elf.section(SHT_DYNSYM)
    rebound: dict[int, list[str]] = {idx: [] for idx in weakened}
    if weakened and versym and dynsym:
        dynstr = elf.sections[dynsym["link"]]
        for i in range(versym["size"] // 2):
            off = versym["offset"] + 2 * i
            (v,) = struct.unpack_from("<H", data, off)
            if (v & 0x7FFF) in weakened:
                (st_name,) = struct.unpack_from("<I", data, dynsym["offset"] + i * 24)
                rebound[v & 0x7FFF].append(elf.cstr(dynstr, st_name))
                struct.pack_into("<H", data, off, VER_NDX_GLOBAL)

    for idx, (fname, vname) in sorted(weakened.items(), key=lambda kv: kv[1]):
        syms = ", ".join(sorted(rebound[idx])) or "none left (already patched)"
        print(f"  {os.path.basename(path)}: {vname} ({fname}) -> weak; rebound: {syms}")
    if not weakened:
        print(f"  {os.path.basename(path)}: all required versions are defined by the host")
    if weakened and not dry_run:
        with open(path, "r+b") as f:
            f.write(data)
    return len(weakened)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+", help="ELF64 shared objects to patch in place")
    ap.add_argument("--lib-dir", action="append", default=[],
                    help="look here first for the host libraries (repeatable)")
    ap.add_argument("--dry-run", action="store_true", help="report only, write nothing")
    args = ap.parse_args(argv)
    try:
        for path in args.files:
            weaken(path, args.lib_dir, args.dry_run)
    except (ElfError, OSError, struct.error) as exc:
        print(f"elf_weaken_versions: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
