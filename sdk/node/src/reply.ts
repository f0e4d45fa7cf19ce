// What a handler answers for one delivery: ack(), retry(...), dead(...), backoff(...) or a throw.

import type { Header } from "./delivery.js";

export type Verdict = "ack" | "retry" | "dead" | "backoff";

/** One record siding writes to Kafka before an ACKed input counts as done (docs/outputs.md). */
export interface Output {
  readonly topic: string;
  /** Record key; null or absent for no key. */
  readonly key?: Uint8Array | string | null;
  /** Record value; null or absent for a tombstone. */
  readonly value?: Uint8Array | string | null;
  readonly headers?: readonly Header[];
}

export interface RetryOptions {
  /** The earliest time to try again, in seconds from now; absent: the lane's own delay. */
  readonly afterSeconds?: number;
  /** Why: kept with the record in the retry lane (and in the DLQ if it dies later). */
  readonly reason?: string;
}

/** A handler's answer; build it with `ack`, `retry`, `dead` or `backoff`. */
export class Reply {
  private constructor(
    readonly verdict: Verdict,
    readonly reason: string,
    readonly afterSeconds: number | undefined,
    readonly outputs: readonly Output[],
  ) {
    Object.freeze(this);
  }

  /** @internal */
  static make(verdict: Verdict, reason: string, afterSeconds?: number, outputs: readonly Output[] = []): Reply {
    return new Reply(verdict, reason, afterSeconds, outputs);
  }
}

/** Done with this delivery; `outputs` are produced to Kafka before it counts as done. */
export function ack(outputs: readonly Output[] = []): Reply {
  for (const [index, output] of outputs.entries()) {
    if (typeof output?.topic !== "string" || output.topic === "") {
      throw new TypeError(`ack(): outputs[${index}].topic must be a non-empty string`);
    }
  }
  return Reply.make("ack", "", undefined, Object.freeze([...outputs]));
}

/** Not now: siding delivers it again later, from the next retry lane (an attempt is spent). */
export function retry(options: RetryOptions = {}): Reply {
  return Reply.make("retry", checkReason(options.reason ?? "", "retry"), checkAfter(options.afterSeconds, "retry"));
}

/** Never: the delivery goes to the dead-letter topic with `reason`. */
export function dead(reason: string): Reply {
  return Reply.make("dead", checkReason(reason, "dead"));
}

/**
 * The consumer cannot take work now (overloaded, a dependency is down): siding slows down and
 * delivers it again in place, without spending an attempt. Unary gRPC and single webhooks say so
 * for one delivery; a stream, a batch frame or a batch request cannot, so there it is a RETRY with
 * `afterSeconds` (a whole HTTP batch that backs off is answered 429).
 */
export function backoff(options: RetryOptions = {}): Reply {
  return Reply.make("backoff", checkReason(options.reason ?? "", "backoff"), checkAfter(options.afterSeconds, "backoff"));
}

/** Throw from a handler to dead-letter the delivery with this reason. */
export class DeadLetter extends Error {
  override name = "DeadLetter";
}

function checkAfter(after: number | undefined, verb: string): number | undefined {
  if (after === undefined) return undefined;
  if (typeof after !== "number" || !Number.isFinite(after) || after < 0) {
    throw new RangeError(`${verb}(): afterSeconds must be a finite number of seconds >= 0, not ${String(after)}`);
  }
  return after;
}

function checkReason(reason: unknown, verb: string): string {
  if (typeof reason !== "string") {
    throw new TypeError(`${verb}(): reason must be a string, not ${typeof reason}`);
  }
  return reason;
}

/** What a handler returned: anything but a Reply is a handler bug, so RETRY (never an ack by accident). */
export function replyForReturn(value: unknown): Reply {
  if (value instanceof Reply) return value;
  const what = value === null ? "null" : typeof value === "object" ? value.constructor?.name ?? "object" : typeof value;
  return retry({ reason: `handler returned ${what}, not a Reply` });
}

/** What a handler threw: DeadLetter means DEAD; anything else is taken as transient: RETRY. */
export function replyForThrow(error: unknown): Reply {
  const text = error instanceof Error ? error.message || error.name : String(error);
  if (error instanceof DeadLetter) return dead(text);
  return retry({ reason: text });
}
