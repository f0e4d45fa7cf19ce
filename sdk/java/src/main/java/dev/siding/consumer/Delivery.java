package dev.siding.consumer;

import java.util.List;
import java.util.Objects;

/**
 * One Kafka record pushed by siding, the same whether it came over gRPC or HTTP. Arrays are not
 * copied: do not change them.
 *
 * @param id stable id of the record ("topic/partition/offset"), the same on every attempt:
 *     deduplicate on it
 * @param topic topic of the original record (also in retry lanes and DLQ replays)
 * @param partition partition of the original record
 * @param offset offset of the original record
 * @param key record key; {@code null} when the record has none (unlike an empty key)
 * @param value record value; {@code null} for a tombstone (unlike an empty value)
 * @param headers record headers in their original order
 * @param timestampMs record timestamp, milliseconds since the Unix epoch (0 when unknown)
 * @param attempt which attempt this is, starting at 1
 * @param lane 0 for the main lane, k for retry lane k
 */
public record Delivery(
    String id,
    String topic,
    int partition,
    long offset,
    byte[] key,
    byte[] value,
    List<Header> headers,
    long timestampMs,
    int attempt,
    int lane) {
  public Delivery {
    Objects.requireNonNull(id, "id");
    Objects.requireNonNull(topic, "topic");
    headers = List.copyOf(headers);
  }
}
