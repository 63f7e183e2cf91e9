#!/usr/bin/env python3
"""A bigtables worker in Python: pop a job, GET its input_url before its
deadline, push one result. Needs the redis client (Debian: python3-redis).

Environment: REDIS_URL, BIGTABLES_INPUT_QUEUE, BIGTABLES_OUTPUT_QUEUE.
SIGTERM or SIGINT: finish the job in hand, then exit 0.
"""
import json
import os
import re
import signal
import urllib.error
import urllib.request
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime

import redis

URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
INPUT = os.environ.get("BIGTABLES_INPUT_QUEUE", "bigtables-input")
OUTPUT = os.environ.get("BIGTABLES_OUTPUT_QUEUE", "bigtables-output")
r = redis.Redis.from_url(URL)

stopping = False


def stop(signum, frame):
    global stopping
    stopping = True


signal.signal(signal.SIGTERM, stop)
signal.signal(signal.SIGINT, stop)


def say(job, what):
    print(f"job {job['big_table_uid']} attempt {job['attempt_no']}: {what}", flush=True)


def retry_after(header):
    """An HTTP Retry-After (seconds or a date) as the result's retry_after."""
    if header and header.strip().isdigit():
        return int(header)  # seconds
    try:
        return parsedate_to_datetime(header).astimezone(timezone.utc).isoformat()  # RFC 3339
    except (TypeError, ValueError):  # absent or unreadable
        return None


def refresh(job):
    """Returns the result for one job, or None if it was skipped."""
    deadline = datetime.fromisoformat(job["deadline_at"].replace("Z", "+00:00"))
    remaining = (deadline - datetime.now(timezone.utc)).total_seconds()
    # Drop, without work, a job that can no longer count: a result after the
    # deadline, or for a cancelled (superseded) attempt, would be ignored.
    if remaining <= 0:
        return say(job, "skipped, its deadline has passed")
    if r.exists(f"{INPUT}:cancelled:{job['refresh_attempt_uid']}"):
        return say(job, "skipped, its attempt was cancelled")
    result = {"big_table_uid": job["big_table_uid"], "refresh_attempt_uid": job["refresh_attempt_uid"]}
    url = job["input_url"]
    try:
        with urllib.request.urlopen(url, timeout=remaining) as resp:
            resp.read()
        result["type"] = "success"
    except urllib.error.HTTPError as e:
        result["type"] = "failure"
        result["message"] = f"GET {url}: {e.code} {e.reason}"
        if e.code in (404, 410):  # retrying cannot help: disable the record now
            result["kind"], result["retryable"] = "gone", False
            result["user_friendly_reason"] = f"Provided URL is invalid: {url}"
        elif e.code == 429 or e.code >= 500:  # a kind the policy may route (on_kind)
            result["kind"] = "rate_limited" if e.code == 429 else "upstream_5xx"
            after = retry_after(e.headers.get("Retry-After"))
            if after is not None:
                result["retry_after"] = after  # sets this failure's delay
    except Exception as e:  # network errors, timeouts: retried by the policy
        result["type"] = "failure"
        result["message"] = f"GET {url}: {e}"
    say(job, f"{result['type']} {result.get('message', '')}".strip())
    return result


def main():
    redacted = re.sub(r"//([^:/@]*):[^@/]*@", r"//\1:xxxxx@", URL)  # hide the password
    print(f"worker: input {INPUT}, output {OUTPUT}, redis {redacted}", flush=True)
    while not stopping:
        popped = r.blpop([INPUT], timeout=1)  # short: notice SIGTERM between pops
        if popped is None:
            continue
        job = json.loads(popped[1])
        result = refresh(job)
        if result is not None:
            r.rpush(OUTPUT, json.dumps(result))


if __name__ == "__main__":
    main()
