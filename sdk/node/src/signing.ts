// Standard Webhooks signatures: check that a request really comes from siding (docs/webhooks.md).

import { createHmac, timingSafeEqual } from "node:crypto";

export const DEFAULT_TOLERANCE_SECONDS = 300;
const SECRET_PREFIX = "whsec_";
const MAX_DIGITS = 15;

export type VerificationProblem = "missing-header" | "bad-timestamp" | "stale-timestamp" | "future-timestamp" | "bad-signature";

/** A webhook request is not authentic or not fresh; `problem` is stable and machine-readable. */
export class WebhookVerificationError extends Error {
  override name = "WebhookVerificationError";
  constructor(
    readonly problem: VerificationProblem,
    message: string,
  ) {
    super(message);
  }
}

/** Header values as node:http gives them, or any plain name -> value map (names in any case). */
export type HeaderMap = Readonly<Record<string, string | readonly string[] | undefined>>;

export interface VerifyOptions {
  /** How far the webhook-timestamp may be from this machine's clock. Default 300. */
  readonly toleranceSeconds?: number;
  /** "Now" in Unix seconds (for tests). Default: the clock. */
  readonly nowSeconds?: number;
}

/** The HMAC key behind a secret: `whsec_<base64>` is decoded, anything else is its UTF-8 bytes. */
export function secretKey(secret: string): Buffer {
  if (typeof secret !== "string") throw new TypeError("the webhook secret must be a string");
  let key: Buffer;
  if (secret.startsWith(SECRET_PREFIX)) {
    const encoded = secret.slice(SECRET_PREFIX.length);
    // Never echo the secret itself into an error message.
    if (!/^[A-Za-z0-9+/]*={0,2}$/.test(encoded)) throw new Error("a whsec_ secret must be base64 after the prefix");
    key = Buffer.from(encoded, "base64");
  } else {
    key = Buffer.from(secret, "utf8");
  }
  if (key.length === 0) throw new Error("the webhook secret must not be empty");
  return key;
}

function digest(key: Buffer, id: string, timestamp: string, body: Uint8Array): Buffer {
  return createHmac("sha256", key).update(`${id}.${timestamp}.`, "utf8").update(body).digest();
}

/** The webhook-signature value siding sends for one request: `v1,<base64 HMAC-SHA256>`. */
export function signWebhook(secret: string, id: string, timestampSeconds: number, body: Uint8Array): string {
  return `v1,${digest(secretKey(secret), id, String(timestampSeconds), body).toString("base64")}`;
}

function header(headers: HeaderMap, name: string): string {
  for (const [key, value] of Object.entries(headers)) {
    if (key.toLowerCase() !== name || value === undefined) continue;
    return (typeof value === "string" ? value : value.join(" ")).trim();
  }
  return "";
}

/**
 * Verify a siding webhook (Standard Webhooks) against its raw body, byte for byte; returns its
 * webhook-id. Throws WebhookVerificationError naming what is wrong.
 */
export function verifyWebhook(secret: string, headers: HeaderMap, body: Uint8Array, options: VerifyOptions = {}): string {
  const tolerance = options.toleranceSeconds ?? DEFAULT_TOLERANCE_SECONDS;
  const id = header(headers, "webhook-id");
  const timestamp = header(headers, "webhook-timestamp");
  const signatures = header(headers, "webhook-signature");
  const missing = [
    ["webhook-id", id],
    ["webhook-timestamp", timestamp],
    ["webhook-signature", signatures],
  ].filter(([, value]) => value === "");
  if (missing.length > 0) {
    throw new WebhookVerificationError("missing-header", `missing header: ${missing.map(([name]) => name).join(", ")}`);
  }
  // Digits only: a signed timestamp must not be able to absorb a '.' from the id or body.
  if (!/^[0-9]+$/.test(timestamp) || timestamp.length > MAX_DIGITS) {
    throw new WebhookVerificationError("bad-timestamp", "webhook-timestamp is not an integer");
  }
  const now = options.nowSeconds ?? Date.now() / 1000;
  const age = now - Number(timestamp);
  if (age > tolerance) {
    throw new WebhookVerificationError("stale-timestamp", `webhook-timestamp is ${age.toFixed(0)}s old (tolerance ${tolerance}s)`);
  }
  if (-age > tolerance) {
    throw new WebhookVerificationError(
      "future-timestamp",
      `webhook-timestamp is ${(-age).toFixed(0)}s in the future (tolerance ${tolerance}s)`,
    );
  }
  const expected = digest(secretKey(secret), id, timestamp, body);
  let matched = false;
  for (const candidate of signatures.split(/\s+/)) {
    const comma = candidate.indexOf(",");
    if (comma < 0 || candidate.slice(0, comma) !== "v1") continue; // other schemes are not ours
    const encoded = candidate.slice(comma + 1);
    if (!/^[A-Za-z0-9+/]*={0,2}$/.test(encoded)) continue;
    const given = Buffer.from(encoded, "base64");
    // No early exit: every candidate costs the same, whichever one matches.
    if (given.length === expected.length && timingSafeEqual(given, expected)) matched = true;
  }
  if (!matched) throw new WebhookVerificationError("bad-signature", "no webhook-signature matches the body");
  return id;
}
