package dev.siding.consumer;

import java.nio.charset.StandardCharsets;
import java.security.InvalidKeyException;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Base64;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.regex.Pattern;
import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;

/**
 * Standard Webhooks signatures: check that a request really comes from siding
 * (docs/webhooks.md). The signed content is {@code {webhook-id}.{webhook-timestamp}.{raw body}};
 * the signature is HMAC-SHA256, sent as {@code v1,<base64>}.
 */
public final class WebhookVerifier {
  public static final Duration DEFAULT_TOLERANCE = Duration.ofMinutes(5);
  private static final String SECRET_PREFIX = "whsec_";
  private static final Pattern BASE64 = Pattern.compile("[A-Za-z0-9+/]*={0,2}");
  private static final Pattern DIGITS = Pattern.compile("[0-9]{1,15}");

  private final byte[] key;
  private final Duration tolerance;

  /**
   * A verifier for one secret: {@code whsec_<base64>} is decoded, anything else is its UTF-8
   * bytes. Throws IllegalArgumentException (never echoing the secret) when it is unusable.
   */
  public WebhookVerifier(String secret, Duration tolerance) {
    this.key = secretKey(secret);
    if (tolerance == null || tolerance.isNegative()) {
      throw new IllegalArgumentException("tolerance must be a duration >= 0, not " + tolerance);
    }
    this.tolerance = tolerance;
  }

  public WebhookVerifier(String secret) {
    this(secret, DEFAULT_TOLERANCE);
  }

  static byte[] secretKey(String secret) {
    if (secret == null) {
      throw new IllegalArgumentException("the webhook secret must not be null");
    }
    byte[] key;
    if (secret.startsWith(SECRET_PREFIX)) {
      String encoded = secret.substring(SECRET_PREFIX.length());
      if (!BASE64.matcher(encoded).matches()) {
        throw new IllegalArgumentException("a whsec_ secret must be base64 after the prefix");
      }
      key = Base64.getDecoder().decode(pad(encoded));
    } else {
      key = secret.getBytes(StandardCharsets.UTF_8);
    }
    if (key.length == 0) {
      throw new IllegalArgumentException("the webhook secret must not be empty");
    }
    return key;
  }

  private static String pad(String encoded) {
    String bare = encoded.replace("=", "");
    return bare + "=".repeat((4 - bare.length() % 4) % 4);
  }

  /** The webhook-signature value siding sends: {@code v1,<base64 HMAC-SHA256>}. */
  public static String sign(String secret, String id, long timestampSeconds, byte[] body) {
    return "v1," + Base64.getEncoder().encodeToString(digest(secretKey(secret), id, Long.toString(timestampSeconds), body));
  }

  private static byte[] digest(byte[] key, String id, String timestamp, byte[] body) {
    try {
      Mac mac = Mac.getInstance("HmacSHA256");
      mac.init(new SecretKeySpec(key, "HmacSHA256"));
      mac.update((id + "." + timestamp + ".").getBytes(StandardCharsets.UTF_8));
      return mac.doFinal(body);
    } catch (NoSuchAlgorithmException | InvalidKeyException e) {
      throw new IllegalStateException("HmacSHA256 is not available", e);
    }
  }

  /**
   * Verify a request against its raw body, byte for byte; returns its webhook-id. Header names
   * are matched case-insensitively; a name's values are joined with spaces.
   *
   * @throws WebhookVerificationException naming what is wrong
   */
  public String verify(Map<String, List<String>> headers, byte[] body, Instant now)
      throws WebhookVerificationException {
    String id = header(headers, "webhook-id");
    String timestamp = header(headers, "webhook-timestamp");
    String signatures = header(headers, "webhook-signature");
    List<String> missing = new ArrayList<>();
    if (id.isEmpty()) {
      missing.add("webhook-id");
    }
    if (timestamp.isEmpty()) {
      missing.add("webhook-timestamp");
    }
    if (signatures.isEmpty()) {
      missing.add("webhook-signature");
    }
    if (!missing.isEmpty()) {
      throw new WebhookVerificationException(
          "missing-header", "missing header: " + String.join(", ", missing));
    }
    // Digits only: a signed timestamp must not be able to absorb a '.' from the id or body.
    if (!DIGITS.matcher(timestamp).matches()) {
      throw new WebhookVerificationException("bad-timestamp", "webhook-timestamp is not an integer");
    }
    long age = now.getEpochSecond() - Long.parseLong(timestamp);
    long limit = tolerance.getSeconds();
    if (age > limit) {
      throw new WebhookVerificationException(
          "stale-timestamp", "webhook-timestamp is " + age + "s old (tolerance " + limit + "s)");
    }
    if (-age > limit) {
      throw new WebhookVerificationException(
          "future-timestamp",
          "webhook-timestamp is " + -age + "s in the future (tolerance " + limit + "s)");
    }
    byte[] expected = digest(key, id, timestamp, body);
    boolean matched = false;
    for (String candidate : signatures.trim().split("\\s+")) {
      int comma = candidate.indexOf(',');
      if (comma < 0 || !candidate.substring(0, comma).equals("v1")) {
        continue; // other schemes are not ours to check
      }
      String encoded = candidate.substring(comma + 1);
      if (!BASE64.matcher(encoded).matches()) {
        continue;
      }
      byte[] given;
      try {
        given = Base64.getDecoder().decode(pad(encoded));
      } catch (IllegalArgumentException e) {
        continue;
      }
      // No early exit: every candidate costs the same, whichever one matches.
      matched |= MessageDigest.isEqual(expected, given);
    }
    if (!matched) {
      throw new WebhookVerificationException("bad-signature", "no webhook-signature matches the body");
    }
    return id;
  }

  /** {@link #verify(Map, byte[], Instant)} against this machine's clock. */
  public String verify(Map<String, List<String>> headers, byte[] body)
      throws WebhookVerificationException {
    return verify(headers, body, Instant.now());
  }

  private static String header(Map<String, List<String>> headers, String name) {
    for (Map.Entry<String, List<String>> entry : headers.entrySet()) {
      if (entry.getKey() != null
          && entry.getKey().toLowerCase(Locale.ROOT).equals(name)
          && entry.getValue() != null) {
        return String.join(" ", entry.getValue()).trim();
      }
    }
    return "";
  }
}
