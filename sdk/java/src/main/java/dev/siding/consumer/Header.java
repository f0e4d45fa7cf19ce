package dev.siding.consumer;

import java.nio.charset.StandardCharsets;
import java.util.Objects;

/** One Kafka record header; keys may repeat. The value is not copied: do not change it. */
public record Header(String key, byte[] value) {
  public Header {
    Objects.requireNonNull(key, "key");
    Objects.requireNonNull(value, "value");
  }

  /** A header whose value is this text in UTF-8. */
  public static Header of(String key, String value) {
    return new Header(key, value.getBytes(StandardCharsets.UTF_8));
  }
}
