"""A learner process of the exactly-once test (tests/test_rollout_reader.py): reads the live
rollouts, "trains" by counting each rollout id in its state, and commits state and acks
together. Usage: ROOT LEDGER EVENTS STOP_FILE."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from inframind_ray.learning.rollout_reader import Ledger, RolloutReader


def main() -> None:
    root, ledger_path, events, stop = map(Path, sys.argv[1:5])
    ledger = Ledger(ledger_path)
    reader = RolloutReader(root, acked=ledger.acked)
    counts: dict[str, int] = dict(ledger.payload.get("counts", {}))
    log = events.open("a")
    while True:
        done = stop.exists()  # read before the poll: no file lands after a final empty poll
        reader.poll()
        batch = reader.next_batch(4)
        if batch is None:
            if done and not reader.pending():
                return
            time.sleep(0.02)
            continue
        log.write(f"took {' '.join(batch.rollout_ids)}\n")
        log.flush()
        for rid in batch.rollout_ids:  # the update, held in memory until the commit
            counts[rid] = counts.get(rid, 0) + 1
        time.sleep(0.15)  # the gradient step: the test kills the process here
        ledger.commit(batch, {"counts": counts})
        log.write(f"committed {ledger.commits}\n")
        log.flush()


if __name__ == "__main__":
    main()
