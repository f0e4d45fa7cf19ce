// One Kafka record pushed by siding, the same whether it came over gRPC or HTTP.

/** One Kafka record header; keys may repeat. */
export interface Header {
  readonly key: string;
  readonly value: Buffer;
}

export interface Delivery {
  /** Stable id of the record ("topic/partition/offset"), the same on every attempt: deduplicate on it. */
  readonly id: string;
  /** Topic, partition and offset of the original record (also in retry lanes and DLQ replays). */
  readonly topic: string;
  readonly partition: number;
  readonly offset: bigint;
  /** Record key; null when the record has none (unlike an empty key). */
  readonly key: Buffer | null;
  /** Record value; null for a tombstone (unlike an empty value). */
  readonly value: Buffer | null;
  /** Record headers in their original order. */
  readonly headers: readonly Header[];
  /** Record timestamp, milliseconds since the Unix epoch (0 when unknown). */
  readonly timestampMs: number;
  /** Which attempt this is, starting at 1. */
  readonly attempt: number;
  /** 0 for the main lane, k for retry lane k. */
  readonly lane: number;
}

/** The shape @grpc/proto-loader gives a siding.v1.Delivery (camelCase, longs as strings). */
export interface DeliveryMessage {
  id: string;
  topic: string;
  partition: number;
  offset: string;
  key?: Buffer;
  _key?: string;
  value?: Buffer;
  _value?: string;
  headers: { key: string; value: Buffer }[];
  timestampMs: string;
  attempt: number;
  lane: number;
}

export function deliveryFromMessage(message: DeliveryMessage): Delivery {
  return Object.freeze({
    id: message.id,
    topic: message.topic,
    partition: message.partition,
    offset: BigInt(message.offset || "0"),
    key: message._key === "key" && message.key !== undefined ? message.key : null,
    value: message._value === "value" && message.value !== undefined ? message.value : null,
    headers: Object.freeze(message.headers.map((h) => Object.freeze({ key: h.key, value: h.value }))),
    timestampMs: Number(message.timestampMs || "0"),
    attempt: message.attempt,
    lane: message.lane,
  });
}
