"""The thread that received the fatal signal, read from a core file's ELF notes.

pystack reads a core's siginfo but not which thread it was delivered to, and the finding
rules start from that thread (``SignalInfo.tid``: the thread that crashed in
``func_dealloc`` after ``Py_Finalize``, or in a callback run from an unregistered native
thread). The kernel writes the dumping thread's NT_PRSTATUS note first
(fs/binfmt_elf.c, fill_note_info), so its ``pr_pid`` is the answer gdb also selects.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

ELF_MAGIC = b"\x7fELF"
ELFCLASS64 = 2
ELFDATA2LSB = 1
PT_NOTE = 4
NT_PRSTATUS = 1
NT_FILE = 0x46494C45  # "FILE": the files mapped into the process, with their address ranges
# struct elf_prstatus (64-bit): elf_siginfo (3 ints), short pr_cursig + padding,
# unsigned long pr_sigpend, unsigned long pr_sighold, then pid_t pr_pid.
PR_PID_OFFSET = 32
MAX_NOTES_BYTES = 64 * 1024 * 1024  # thousands of threads fit; a corrupt size must not exhaust memory


def _align4(size: int) -> int:
    return (size + 3) & ~3


def _notes(core_path: Path) -> bytes:
    """The PT_NOTE segments of a 64-bit little-endian ELF core, concatenated (b"" for anything else)."""
    found = b""
    try:
        with open(core_path, "rb") as core:
            header = core.read(64)
            if len(header) < 64 or header[:4] != ELF_MAGIC or header[4] != ELFCLASS64 or header[5] != ELFDATA2LSB:
                return b""
            phoff, = struct.unpack_from("<Q", header, 0x20)
            phentsize, phnum = struct.unpack_from("<HH", header, 0x36)
            core.seek(phoff)
            table = core.read(phentsize * phnum)
            for index in range(phnum):
                entry = table[index * phentsize:(index + 1) * phentsize]
                if len(entry) < 0x28:
                    break
                p_type, = struct.unpack_from("<I", entry, 0)
                if p_type != PT_NOTE:
                    continue
                offset, = struct.unpack_from("<Q", entry, 0x08)
                size, = struct.unpack_from("<Q", entry, 0x20)
                core.seek(offset)
                found += core.read(min(size, MAX_NOTES_BYTES - len(found)))
    except (OSError, struct.error):
        return b""
    return found


def _each_note(notes: bytes, wanted: int) -> list[bytes]:
    """The descriptors of every note of type ``wanted``, in order."""
    found = []
    position = 0
    while position + 12 <= len(notes):
        namesz, descsz, kind = struct.unpack_from("<III", notes, position)
        desc = position + 12 + _align4(namesz)
        if desc + descsz > len(notes):
            break
        if kind == wanted:
            found.append(notes[desc:desc + descsz])
        position = desc + _align4(descsz)
    return found


def crashed_thread(core_path: Path) -> int | None:
    """The kernel thread id of the thread that dumped core, or None (not a 64-bit little-endian ELF
    core, or no NT_PRSTATUS note)."""
    for desc in _each_note(_notes(core_path), NT_PRSTATUS):
        if len(desc) >= PR_PID_OFFSET + 4:
            pid, = struct.unpack_from("<i", desc, PR_PID_OFFSET)
            return pid if pid > 0 else None
    return None


def core_executable(core_path: Path) -> str | None:
    """The program that dumped core (the file mapped lowest in its address space, from the NT_FILE note),
    or None. A run of a ``--`` command has cores of whatever its processes were: a shell's, some Python's."""
    for desc in _each_note(_notes(core_path), NT_FILE):
        try:
            count, _page = struct.unpack_from("<QQ", desc, 0)
            ranges = [struct.unpack_from("<QQQ", desc, 16 + 24 * i) for i in range(count)]
        except struct.error:
            return None
        names = desc[16 + 24 * count:].split(b"\0")
        if not ranges or len(names) < count:
            return None
        lowest = min(range(count), key=lambda i: ranges[i][0])
        path = names[lowest].decode(errors="replace")
        return path if path.startswith("/") and os.path.isfile(path) else None
    return None
