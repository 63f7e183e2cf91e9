#!/usr/bin/python3
"""Reference answers for schedule's differential test (differential_test.go).

Reads one JSON request per line on stdin and writes one JSON answer per line
on stdout, in order. A request:

  {"id": 7, "tz": "Europe/Paris", "dtstart": "20240331T023000",
   "rule": "FREQ=DAILY;BYHOUR=2",        # without COUNT and UNTIL
   "count": 5,                           # 0: none
   "until": "20240401T000000Z",          # "" none; trailing Z: an instant,
                                         # otherwise a wall clock in tz
   "weekly_setpos": false,               # see difference 2 below
   "queries": [1711846800, ...],         # Unix seconds
   "budget": 50000}                      # occurrences to iterate at most

An answer: {"id": 7, "answers": [1711935000, null, "skip", ...]}: for each
query the first occurrence strictly after it (Unix seconds), null when there
is none, "skip" when the budget ran out first. {"id": 7, "error": "..."} when
dateutil refuses the rule.

The recurrence expansion is python-dateutil's rrule. The deliberate
differences of package schedule are applied here, on top of it:

1. A local time that does not exist (clocks going forward) is not an
   occurrence and is not counted by COUNT (RFC 5545 section 3.3.10);
   dateutil yields it. Ambiguous local times are their first instant in
   both (fold=0).
2. WEEKLY with BYSETPOS: RFC 5545 selects positions within the week that
   starts on WKST; dateutil starts the first week at DTSTART's day. The
   first week is emulated by expanding from the week's start and dropping
   instances before DTSTART.

Zones come from the standard library's zoneinfo: dateutil.tz ignores the
rule a zone file gives for dates after its last listed transition, so it has
no daylight saving time after 2037.
"""
import json
import sys
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

from dateutil import tz as dtz
from dateutil.rrule import rrulestr

WEEKDAYS = ["MO", "TU", "WE", "TH", "FR", "SA", "SU"]


def wall(s):
    return datetime.strptime(s, "%Y%m%dT%H%M%S")


def answer(req):
    zone = ZoneInfo(req["tz"])
    start = wall(req["dtstart"])
    rule = req["rule"]
    expand_from = start
    if req.get("weekly_setpos"):
        parts = dict(p.split("=", 1) for p in rule.split(";"))
        wkst = WEEKDAYS.index(parts.get("WKST", "MO"))
        expand_from = start - timedelta(days=(start.weekday() - wkst) % 7)
        if "BYDAY" not in parts:
            rule += ";BYDAY=" + WEEKDAYS[start.weekday()]
    r = rrulestr("RRULE:" + rule, dtstart=expand_from.replace(tzinfo=zone))
    until = req.get("until") or ""
    if until.endswith("Z"):
        r = r.replace(until=wall(until[:-1]).replace(tzinfo=timezone.utc))
    elif until:
        # Same tzinfo object: Python compares the wall clocks.
        r = r.replace(until=wall(until).replace(tzinfo=zone))
    queries = sorted((q, i) for i, q in enumerate(req["queries"]))
    answers = [None] * len(queries)
    left = req.get("count") or None
    qi, seen = 0, 0
    budget = req.get("budget", 50000)
    for occ in r:
        seen += 1
        if seen > budget:
            for _, i in queries[qi:]:
                answers[i] = "skip"
            break
        if occ.replace(tzinfo=None) < start:
            continue
        if not dtz.datetime_exists(occ):
            continue
        if left is not None:
            if left == 0:
                break
            left -= 1
        ts = int(occ.timestamp())
        while qi < len(queries) and queries[qi][0] < ts:
            answers[queries[qi][1]] = ts
            qi += 1
        if qi == len(queries):
            break
    return answers


def main():
    out = []
    for line in sys.stdin:
        req = json.loads(line)
        try:
            out.append({"id": req["id"], "answers": answer(req)})
        except Exception as e:  # reported per rule, the batch goes on
            out.append({"id": req["id"], "error": repr(e)})
    sys.stdout.write("".join(json.dumps(o) + "\n" for o in out))


if __name__ == "__main__":
    main()
