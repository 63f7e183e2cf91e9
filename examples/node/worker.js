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

async function refresh(job) {
  const result = { big_table_uid: job.big_table_uid, refresh_attempt_uid: job.refresh_attempt_uid };
  const remaining = Date.parse(job.deadline_at) - Date.now();
  if (remaining <= 0) return null; // too late: the attempt times out, a result would be ignored
  try {
    const resp = await fetch(job.input_url, { signal: AbortSignal.timeout(remaining) });
    await resp.arrayBuffer();
    if (resp.ok) {
      result.type = "success";
    } else {
      result.type = "failure";
      result.message = `GET ${job.input_url}: ${resp.status} ${resp.statusText}`;
      if (resp.status === 404 || resp.status === 410) { // retrying cannot help
        result.retryable = false;
        result.user_friendly_reason = `Provided URL is invalid: ${job.input_url}`;
      }
    }
  } catch (err) { // network errors, the deadline: retried by the policy
    result.type = "failure";
    result.message = `GET ${job.input_url}: ${err.message}`;
  }
  return result;
}

const popper = createClient({ url }); // BLPOP blocks its connection
const pusher = createClient({ url });
await popper.connect();
await pusher.connect();
while (!stopping) {
  const popped = await popper.blPop(input, 1); // short: notice SIGTERM between pops
  if (popped === null) continue;
  const result = await refresh(JSON.parse(popped.element));
  if (result !== null) await pusher.rPush(output, JSON.stringify(result));
}
await popper.quit();
await pusher.quit();
