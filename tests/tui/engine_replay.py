"""A stand-in for `ptxbench eval --json-progress` in the explorer's tests.

A real process that prints a JSON-lines event stream (docs/eval-progress.md)
from a file and, like the engine, appends an evaluation row to the store for
every `result` event (through the store's write functions) before printing
it with the new row's id. The stream's one sample is replayed for every
id it is asked to judge. Options make it misbehave the ways the
explorer must survive: die after N events, print garbage, wait for SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from pathlib import Path

from ptxbench.db.records import Evaluation
from ptxbench.db.store import open_store
from ptxbench.db.writes import add_evaluation

cancelled = False


def _on_term(_signum, _frame) -> None:
    global cancelled
    cancelled = True


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--stream", required=True)
    parser.add_argument("--die-after", type=int, default=-1, help="exit 3 after printing this many events")
    parser.add_argument("--garbage", action="store_true", help="print a line that is not JSON first")
    parser.add_argument("--wait-for-term", action="store_true", help="after the first sample event, wait for SIGTERM")
    parser.add_argument("--db", required=True)
    parser.add_argument("--sample", type=int, action="append", default=[])
    parser.add_argument("--json-progress", action="store_true")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, _on_term)
    events = [json.loads(line) for line in Path(args.stream).read_text().splitlines() if line.strip()]
    # head (start, logs) · one sample's events, replayed for every requested id · done
    first = next(i for i, e in enumerate(events) if e["event"] == "sample")
    last = next(i for i, e in enumerate(events) if e["event"] == "done")
    head, body, tail = events[:first], events[first:last], events[last:]
    script = list(head)
    for index, sample_id in enumerate(args.sample):
        for event in body:
            event = dict(event, sample_id=sample_id) if "sample_id" in event else dict(event)
            if event["event"] == "sample":
                event["index"] = index
            script.append(event)
    script += tail

    def emit(event: dict) -> None:
        print(json.dumps(event), flush=True)

    if args.garbage:
        print("this is not an event", flush=True)
    printed = 0
    judged = 0
    for event in script:
        if event["event"] == "start":
            event["total"] = len(args.sample)
        if event["event"] == "result":
            db = open_store(args.db, migrate=False)
            try:
                row = add_evaluation(db, Evaluation(
                    sample_id=event["sample_id"], engine_version="replay", status=event["status"],
                    category=event["category"], source="tests/tui/engine_replay.py", device=None,
                    speedup=event.get("speedup"), time_ms=event.get("time_ms"),
                ))
            finally:
                db.conn.close()
            event["evaluation_id"] = row.id
            judged += 1
        if event["event"] == "done":
            event["judged"] = judged
            event["cancelled"] = cancelled
        emit(event)
        printed += 1
        if printed == args.die_after:
            print("engine_replay: dying on purpose", file=sys.stderr, flush=True)
            return 3
        if args.wait_for_term and event["event"] == "sample":
            while not cancelled:
                time.sleep(0.01)
            emit({"event": "log", "t": 0.0, "level": "info", "message": "SIGTERM: stopping after this sample"})
            emit({"event": "done", "t": 0.0, "judged": judged, "failed_tool": 0, "cancelled": True})
            return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
