// Pure: a siding webhook request as deliveries, and replies as the HTTP answer siding reads
// (docs/webhooks.md for one delivery per request, docs/batch.md for the batch envelope).

import type { Delivery, Header } from "./delivery.js";
import type { Output, Reply } from "./reply.js";

export const BATCH_CONTENT_TYPE = "application/cloudevents-batch+json";

/** The request is not a siding delivery (answered 400, which siding dead-letters). */
export class EnvelopeError extends Error {
  override name = "EnvelopeError";
}

export interface HttpAnswer {
  readonly status: number;
  readonly headers: Readonly<Record<string, string>>;
  readonly body: string;
}

// Request headers that carry siding's own facts or the request itself, not a Kafka header.
const NOT_FORWARDED = new Set([
  "host",
  "content-length",
  "content-type",
  "authorization",
  "transfer-encoding",
  "connection",
  "keep-alive",
  "te",
  "trailer",
  "upgrade",
  "expect",
  "proxy-authorization",
  "proxy-connection",
  "user-agent",
  "accept",
  "accept-encoding",
]);
const OURS = ["ce-", "webhook-", "siding-"];
const DEFAULT_CONTENT_TYPE = "application/octet-stream";

export function isBatch(contentType: string | undefined): boolean {
  return (contentType ?? "").split(";")[0]?.trim().toLowerCase() === BATCH_CONTENT_TYPE;
}

function integer(text: string | undefined, what: string): number {
  if (text === undefined || !/^-?[0-9]+$/.test(text.trim())) {
    throw new EnvelopeError(`${what} must be an integer, not ${JSON.stringify(text ?? null)}`);
  }
  return Number(text.trim());
}

function timestamp(text: string | undefined, what: string): number {
  if (text === undefined || text === "") return 0;
  const ms = Date.parse(text);
  if (Number.isNaN(ms)) throw new EnvelopeError(`${what} is not an RFC 3339 time: ${JSON.stringify(text)}`);
  return ms;
}

/**
 * One delivery from a binary-mode request: `rawHeaders` as node:http gives them (name, value,
 * name, value ...), the body is the value. An empty body may also be a null value (HTTP cannot
 * tell them apart): `value` is then an empty Buffer. Headers are the forwarded Kafka headers in
 * order, names as the request spelled them, plus the record's content-type when it is not the
 * default; headers siding could not forward (docs/webhooks.md) are not there.
 */
export function deliveryFromRequest(rawHeaders: readonly string[], body: Buffer): Delivery {
  const first = new Map<string, string>();
  const headers: Header[] = [];
  for (let i = 0; i + 1 < rawHeaders.length; i += 2) {
    const name = rawHeaders[i] as string;
    const value = rawHeaders[i + 1] as string;
    const lower = name.toLowerCase();
    if (!first.has(lower)) first.set(lower, value);
    if (NOT_FORWARDED.has(lower) || OURS.some((prefix) => lower.startsWith(prefix))) continue;
    headers.push({ key: name, value: Buffer.from(value, "latin1") }); // node:http reads bytes as latin1
  }
  const need = (name: string): string => {
    const value = first.get(name);
    if (value === undefined) throw new EnvelopeError(`not a siding delivery: missing header ${name}`);
    return value;
  };
  const contentType = first.get("content-type");
  if (contentType !== undefined && contentType !== DEFAULT_CONTENT_TYPE) {
    headers.push({ key: "content-type", value: Buffer.from(contentType, "latin1") });
  }
  const sidingKey = first.get("siding-key");
  const subject = first.get("ce-subject");
  const key = sidingKey !== undefined ? Buffer.from(sidingKey, "base64") : subject !== undefined ? Buffer.from(subject, "latin1") : null;
  return Object.freeze({
    id: need("ce-id"),
    topic: need("siding-topic"),
    partition: integer(need("siding-partition"), "siding-partition"),
    offset: BigInt(integer(need("siding-offset"), "siding-offset")),
    key,
    value: body,
    headers: Object.freeze(headers),
    timestampMs: timestamp(first.get("ce-time"), "ce-time"),
    attempt: integer(need("siding-attempt"), "siding-attempt"),
    lane: integer(need("siding-lane"), "siding-lane"),
  });
}

function base64(item: Record<string, unknown>, field: string, where: string): Buffer | null {
  const value = item[field];
  if (value === undefined || value === null) return null;
  if (typeof value !== "string" || !/^[A-Za-z0-9+/]*={0,2}$/.test(value)) {
    throw new EnvelopeError(`${where}: "${field}" must be base64`);
  }
  return Buffer.from(value, "base64");
}

function whole(item: Record<string, unknown>, field: string, where: string): number {
  const value = item[field];
  if (typeof value !== "number" || !Number.isInteger(value)) {
    throw new EnvelopeError(`${where}: "${field}" must be an integer, not ${JSON.stringify(value ?? null)}`);
  }
  return value;
}

function text(item: Record<string, unknown>, field: string, where: string): string {
  const value = item[field];
  if (typeof value !== "string") throw new EnvelopeError(`${where}: "${field}" must be a string`);
  return value;
}

/**
 * JSON.parse keeps integers exact only up to 2^53; past that the offset is read from the id
 * ("topic/partition/offset"), which carries it as text.
 */
function offset(parsed: number, id: string): bigint {
  if (Number.isSafeInteger(parsed)) return BigInt(parsed);
  const tail = id.slice(id.lastIndexOf("/") + 1);
  return /^[0-9]+$/.test(tail) ? BigInt(tail) : BigInt(parsed);
}

function batchItem(item: unknown, index: number): Delivery {
  const where = `batch item ${index}`;
  if (typeof item !== "object" || item === null || Array.isArray(item)) throw new EnvelopeError(`${where} is not a JSON object`);
  const event = item as Record<string, unknown>;
  const rawHeaders = event.sidingheaders ?? [];
  if (!Array.isArray(rawHeaders)) throw new EnvelopeError(`${where}: "sidingheaders" must be an array`);
  const headers = rawHeaders.map((h: unknown, n: number) => {
    const at = `${where}: sidingheaders[${n}]`;
    if (typeof h !== "object" || h === null) throw new EnvelopeError(`${at} is not a JSON object`);
    const header = h as Record<string, unknown>;
    return Object.freeze({ key: text(header, "key", at), value: base64(header, "value_base64", at) ?? Buffer.alloc(0) });
  });
  const time = event.time;
  const id = text(event, "id", where);
  return Object.freeze({
    id,
    topic: text(event, "sidingtopic", where),
    partition: whole(event, "sidingpartition", where),
    offset: offset(whole(event, "sidingoffset", where), id),
    key: base64(event, "sidingkey", where),
    value: base64(event, "data_base64", where),
    headers: Object.freeze(headers),
    timestampMs: timestamp(typeof time === "string" ? time : undefined, `${where}: "time"`),
    attempt: whole(event, "sidingattempt", where),
    lane: whole(event, "sidinglane", where),
  });
}

/** The deliveries of a batch request (a JSON array of structured CloudEvents). */
export function deliveriesFromBatch(body: Buffer): Delivery[] {
  let parsed: unknown;
  try {
    parsed = JSON.parse(body.toString("utf8"));
  } catch (error) {
    throw new EnvelopeError(`the batch is not JSON: ${(error as Error).message}`);
  }
  if (!Array.isArray(parsed)) throw new EnvelopeError("the batch is not a JSON array");
  return parsed.map(batchItem);
}

function base64Of(value: Uint8Array | string | null | undefined): string | undefined {
  if (value === null || value === undefined) return undefined;
  return (typeof value === "string" ? Buffer.from(value, "utf8") : Buffer.from(value)).toString("base64");
}

/** Outputs as a webhook answer carries them (docs/outputs.md): bytes in base64, absent = null. */
export function outputsJson(outputs: readonly Output[]): Record<string, unknown>[] {
  return outputs.map((output) => {
    const json: Record<string, unknown> = { topic: output.topic };
    const key = base64Of(output.key);
    const value = base64Of(output.value);
    if (key !== undefined) json.key_base64 = key;
    if (value !== undefined) json.value_base64 = value;
    if (output.headers && output.headers.length > 0) {
      json.headers = output.headers.map((h) => ({ key: h.key, value_base64: base64Of(h.value) ?? "" }));
    }
    return json;
  });
}

function retryAfter(seconds: number | undefined): Record<string, string> {
  return seconds === undefined ? {} : { "retry-after": String(Math.ceil(seconds)) };
}

const TEXT = { "content-type": "text/plain; charset=utf-8" };

/** The answer to a one-delivery request: the status (and Retry-After); an ack's outputs in JSON. */
export function singleAnswer(reply: Reply): HttpAnswer {
  switch (reply.verdict) {
    case "ack":
      if (reply.outputs.length > 0) {
        const body = JSON.stringify({ outputs: outputsJson(reply.outputs) });
        return { status: 200, headers: { "content-type": "application/json" }, body };
      }
      return { status: 204, headers: {}, body: "" };
    case "dead":
      return { status: 422, headers: TEXT, body: reply.reason || "dead" };
    case "backoff":
      return { status: 429, headers: { ...TEXT, ...retryAfter(reply.afterSeconds) }, body: reply.reason || "back off" };
    case "retry":
      // 5xx: the next retry lane; a one-delivery answer cannot carry its own delay.
      return { status: 500, headers: TEXT, body: reply.reason || "retry" };
  }
}

/** The answer to a batch request: one result per delivery; a batch that all backs off is a 429. */
export function batchAnswer(ids: readonly string[], replies: readonly Reply[]): HttpAnswer {
  const given = replies;
  if (given.length > 0 && given.every((r) => r.verdict === "backoff")) {
    const afters = given.map((r) => r.afterSeconds).filter((a): a is number => a !== undefined);
    const after = afters.length > 0 ? Math.max(...afters) : undefined;
    return { status: 429, headers: { ...TEXT, ...retryAfter(after) }, body: given[0]?.reason || "back off" };
  }
  const results = given.map((reply, n) => batchResult(ids[n] as string, reply));
  return { status: 200, headers: { "content-type": "application/json" }, body: JSON.stringify({ results }) };
}

/** One delivery's result as a batch answer (or a line of the stream) carries it. */
function batchResult(id: string, reply: Reply): Record<string, unknown> {
  if (reply.verdict === "ack" && reply.outputs.length > 0) {
    return { id, verdict: "ack", outputs: outputsJson(reply.outputs) };
  }
  if (reply.verdict === "ack") return { id, verdict: "ack" };
  if (reply.verdict === "dead") return { id, verdict: "dead", reason: reply.reason };
  const result: Record<string, unknown> = { id, verdict: "retry", reason: reply.reason };
  if (reply.afterSeconds !== undefined) result.after = reply.afterSeconds;
  return result;
}

// A batch's results streamed as they finish, one JSON object per line (siding asks for it with
// accept): a slow delivery no longer holds back its batch-mates' answers.
export const RESULT_STREAM_TYPE = "application/x-ndjson";

/** Said on every answer of the handler: this server reads the batch envelope and streams its
 * results when asked, so a route without a `batch` key sends it batches (docs/batch.md). */
export const READS_BATCHES = { "siding-batch": "v1" } as const;

/** Whether the request's sender reads a batch's results as a stream (its `accept`). */
export function acceptsResultStream(accept: string | string[] | undefined): boolean {
  const values = Array.isArray(accept) ? accept : [accept ?? ""];
  return values.some((value) =>
    value.split(",").some((part) => (part.split(";")[0] ?? "").trim().toLowerCase() === RESULT_STREAM_TYPE),
  );
}

/** One delivery's result as a line of the stream. */
export function resultLine(id: string, reply: Reply): string {
  return `${JSON.stringify(batchResult(id, reply))}\n`;
}
