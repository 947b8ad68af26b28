"""What every part gets: a scratch directory, the run mode, seeded random streams and a clock."""

from __future__ import annotations

import random
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

# Words that memories and queries are made of (seeded choices from these keep runs repeatable).
WORDS = (
    "harbor lantern quarry violet meadow copper signal glacier orchard falcon ledger canyon "
    "beacon cedar dune ember fjord grove heron island jasper kelp lagoon marble nectar oasis "
    "pepper quartz raven saffron tundra umber valley willow yarrow zenith anchor bramble cobalt "
    "delta estuary fennel garnet hazel indigo juniper kestrel lotus mesa nimbus onyx prairie "
    "quill reef sierra thistle urchin vortex walnut xylem yucca zephyr almond basalt cirrus"
).split()


@dataclass
class Context:
    workdir: Path
    quick: bool
    seed: int
    started: float = field(default_factory=time.monotonic)

    def dir(self, name: str) -> Path:
        path = self.workdir / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def rng(self, name: str) -> random.Random:
        """A random stream of its own for each named user, so one part's draws never shift another's."""
        return random.Random(self.seed * 1_000_003 + zlib.crc32(name.encode()))

    def pick(self, full, quick):
        return quick if self.quick else full

    def sentence(self, rng: random.Random, n: int = 8) -> str:
        return " ".join(rng.choice(WORDS) for _ in range(n))


__all__ = ["Context", "WORDS"]
