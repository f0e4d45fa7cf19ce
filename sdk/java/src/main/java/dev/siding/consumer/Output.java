package dev.siding.consumer;

import java.util.List;
import java.util.Objects;

/**
 * One record siding writes to Kafka before an ACKed input counts as done (over gRPC, or in a
 * webhook's JSON answer; the topic must be listed in the route's {@code outputs}).
 *
 * @param key record key; {@code null} for no key
 * @param value record value; {@code null} for a tombstone
 */
public record Output(String topic, byte[] key, byte[] value, List<Header> headers) {
  public Output {
    if (topic == null || topic.isEmpty()) {
      throw new IllegalArgumentException("an output's topic must not be empty");
    }
    headers = List.copyOf(Objects.requireNonNull(headers, "headers"));
  }

  public static Output of(String topic, byte[] key, byte[] value) {
    return new Output(topic, key, value, List.of());
  }
}
