// A bigtables worker in Node.js: pop a job, GET its input_url before its
// deadline, push one result. Needs the "redis" package (npm install).
//
// Environment: REDIS_URL, BIGTABLES_INPUT_QUEUE, BIGTABLES_OUTPUT_QUEUE.
// SIGTERM or SIGINT: finish the job in hand, then exit 0.
import { createClient } from "redis";

const url = process.env.REDIS_URL ?? "redis://127.0.0.1:6379/0";
const input = process.env.BIGTABLES_INPUT_QUEUE ?? "bigtables-input";
const output = process.env.BIGTABLES_OUTPUT_QUEUE ?? "bigtables-output";

let stopping = false;
process.on("SIGTERM", () => { stopping = true; });
process.on("SIGINT", () => { stopping = true; });

const say = (job, what) => console.log(`job ${job.big_table_uid} attempt ${job.attempt_no}: ${what}`);

// An HTTP Retry-After (seconds or a date) as the result's retry_after.
function retryAfter(header) {
  if (!header) return undefined;
  if (/^\s*\d+\s*$/.test(header)) return Number(header); // seconds
  const at = Date.parse(header);
  return Number.isNaN(at) ? undefined : new Date(at).toISOString(); // RFC 3339
}

async function refresh(job) {
  const remaining = Date.parse(job.deadline_at) - Date.now();
  // Drop, without work, a job that can no longer count: a result after the
  // deadline, or for a cancelled (superseded) attempt, would be ignored.
  if (remaining <= 0) return say(job, "skipped, its deadline has passed");
  if (await pusher.exists(`${input}:cancelled:${job.refresh_attempt_uid}`)) {
    return say(job, "skipped, its attempt was cancelled");
  }
  const result = { big_table_uid: job.big_table_uid, refresh_attempt_uid: job.refresh_attempt_uid };
  try {
    const resp = await fetch(job.input_url, { signal: AbortSignal.timeout(remaining) });
    await resp.arrayBuffer();
    if (resp.ok) {
      result.type = "success";
    } else {
      result.type = "failure";
      result.message = `GET ${job.input_url}: ${resp.status} ${resp.statusText}`;
      if (resp.status === 404 || resp.status === 410) { // retrying cannot help
        Object.assign(result, { kind: "gone", retryable: false });
        result.user_friendly_reason = `Provided URL is invalid: ${job.input_url}`;
      } else if (resp.status === 429 || resp.status >= 500) { // a kind the policy may route (on_kind)
        result.kind = resp.status === 429 ? "rate_limited" : "upstream_5xx";
        const after = retryAfter(resp.headers.get("retry-after"));
        if (after !== undefined) result.retry_after = after; // sets this failure's delay
      }
    }
  } catch (err) { // network errors, the deadline: retried by the policy
    result.type = "failure";
    result.message = `GET ${job.input_url}: ${err.message}`;
  }
  say(job, `${result.type} ${result.message ?? ""}`.trim());
  return result;
}

const popper = createClient({ url }); // BLPOP blocks its connection
const pusher = createClient({ url });
await popper.connect();
await pusher.connect();
const redacted = url.replace(/\/\/([^:/@]*):[^@/]*@/, "//$1:xxxxx@"); // hide the password
console.log(`worker: input ${input}, output ${output}, redis ${redacted}`);
while (!stopping) {
  const popped = await popper.blPop(input, 1); // short: notice SIGTERM between pops
  if (popped === null) continue;
  const result = await refresh(JSON.parse(popped.element));
  if (result !== undefined) await pusher.rPush(output, JSON.stringify(result));
}
await popper.quit();
await pusher.quit();
