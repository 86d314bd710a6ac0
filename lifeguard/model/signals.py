"""The signal that ended a process, as a core or a parked handler tells it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# SIGILL, SIGFPE, SIGSEGV, SIGBUS: the signals a fault raises, with the faulting address in si_addr.
FAULT_SIGNALS = (4, 8, 11, 7)
TERMINATION_SIGNAL = 15  # SIGTERM


@dataclass(frozen=True)
class SignalInfo:
    """The signal that killed a process (from a core file)."""

    name: str | None  # "SIGSEGV"
    number: int | None = None
    code: int | None = None  # si_code
    address: str | None = None  # fault address for SIGSEGV/SIGBUS/SIGILL/SIGFPE
    tid: int | None = None  # the thread that received it

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "number": self.number, "code": self.code, "address": self.address, "tid": self.tid}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SignalInfo:
        return cls(
            name=data.get("name"),
            number=data.get("number"),
            code=data.get("code"),
            address=data.get("address"),
            tid=data.get("tid"),
        )

    @property
    def sent(self) -> bool:
        """Sent by kill/tgkill/raise (si_code <= 0: SI_USER, SI_TKILL, SI_QUEUE), not raised by a fault.
        faulthandler re-raises a fatal signal this way, so a core then holds the sender's pid where a
        fault's si_addr would be."""
        return self.code is not None and self.code <= 0

    @property
    def is_crash(self) -> bool:
        """A crash's signal: not the SIGTERM a process sent itself (lifeguard.run.parked reads the stacks of
        one, a library ending a forked child, and of no other SIGTERM)."""
        return self.number != TERMINATION_SIGNAL

    @property
    def fault_address(self) -> str | None:
        """The faulting address (si_addr) of a real fault; None for a signal that was sent."""
        return None if self.sent else self.address

    def __str__(self) -> str:
        text = self.name or f"signal {self.number}"
        if self.fault_address is not None:
            text += f" at address {self.fault_address}"
        elif self.sent and self.number in FAULT_SIGNALS:
            text += " (raised again by a signal handler such as faulthandler's: no fault address)"
        return text
