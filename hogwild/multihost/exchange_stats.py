"""What a rank's exchanges with the other ranks cost: how many, the bytes its MPI calls sent and received (parameter
payload, heartbeats excluded), how long each took, and how long its training waited on them; the one line each rank
prints at its end, and the parser that reads that line back (hogwild.multihost.simulate checks it against the bytes
its links carried).

Usage: `stats = ExchangeStats(); stats.sent(buf.nbytes); stats.exchanged(seconds); say(report_line(who, stats))`;
`phrase(stats.as_dict())`
"""
from __future__ import annotations

import dataclasses
import re
from typing import Sequence

_LINE = re.compile(r"hogwild\.distributed: rank (\d+) \((\w+), pid (\d+) on (\S+)\) exchanged: (\d+) exchanges?, "
                   r"sent ([\d,]+) bytes, received ([\d,]+) bytes")


@dataclasses.dataclass
class ExchangeStats:
    """One rank's exchange figures (a training host's exchanges; a server's requests answered)."""

    exchanges: int = 0
    bytes_sent: int = 0  # payload handed to MPI sends and collectives (a collective's own traffic may be more)
    bytes_received: int = 0
    seconds_total: float = 0.0  # from an exchange's first request to its completion, summed
    seconds_max: float = 0.0
    # per exchange the larger of its bytes out and in (what one direction of a link must carry), summed: per exchange
    # (bytes_per_exchange), and over seconds_total the rate at which an exchange's bytes moved while in flight
    moved: int = 0
    # a training host: seconds from its local workers' stop to the job's final model in place (the closing exchanges,
    # goodbyes and the final broadcast); its workers never wait on an exchange while they train
    wait_seconds: float = 0.0

    def sent(self, nbytes: int) -> None:
        self.bytes_sent += int(nbytes)

    def received(self, nbytes: int) -> None:
        self.bytes_received += int(nbytes)

    def exchanged(self, seconds: float, requests: Sequence = ()) -> None:
        """One exchange done in `seconds`, made of `requests` (Pieces: their sent and received bytes)."""
        self.exchanges += 1
        self.seconds_total += seconds
        self.seconds_max = max(self.seconds_max, seconds)
        self.moved += max(sum(r.sent for r in requests), sum(r.received for r in requests))

    def as_dict(self) -> dict:
        """The figures as summary.json and metrics.jsonl give them."""
        return {"exchanges": self.exchanges, "bytes_sent": self.bytes_sent, "bytes_received": self.bytes_received,
                "exchange_seconds_mean": round(self.seconds_total / self.exchanges, 4) if self.exchanges else None,
                "exchange_seconds_max": round(self.seconds_max, 4), "wait_seconds": round(self.wait_seconds, 3),
                "bytes_per_exchange": round(self.moved / self.exchanges) if self.exchanges else None,
                "in_flight_bytes_per_second": round(self.moved / self.seconds_total) if self.seconds_total else None}



def phrase(figures: dict) -> str:
    """ExchangeStats.as_dict() in words: '57 exchanges (48.2 MB sent, 48.1 MB received; 0.41 s mean, 1.20 s max),
    0.8 s waiting at the end'."""
    if not figures["exchanges"]:
        return "no exchange"
    return (f"{figures['exchanges']} exchanges ({figures['bytes_sent'] / 1e6:.1f} MB sent, "
            f"{figures['bytes_received'] / 1e6:.1f} MB received; {figures['exchange_seconds_mean']:.2f} s mean, "
            f"{figures['exchange_seconds_max']:.2f} s max), {figures['wait_seconds']:.1f} s waiting at the end")


def report_line(who: str, stats: ExchangeStats) -> str:
    """The line a rank prints at its end; `who` as MPITransport.describe gives it ('rank 1 (worker, pid 9 on h)')."""
    return (f"hogwild.distributed: {who} exchanged: {stats.exchanges} exchanges, sent {stats.bytes_sent:,} bytes, "
            f"received {stats.bytes_received:,} bytes")


@dataclasses.dataclass(frozen=True)
class RankReport:
    """A rank's end-of-run line, read back."""

    rank: int
    role: str
    pid: int
    host: str
    exchanges: int
    bytes_sent: int
    bytes_received: int


def read_reports(output: str) -> list[RankReport]:
    """Every rank's end-of-run line found in a job's output."""
    return [RankReport(int(m.group(1)), m.group(2), int(m.group(3)), m.group(4), int(m.group(5)),
                       int(m.group(6).replace(",", "")), int(m.group(7).replace(",", "")))
            for m in _LINE.finditer(output)]
