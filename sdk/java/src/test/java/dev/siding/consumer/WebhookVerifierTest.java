package dev.siding.consumer;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Base64;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;
import org.junit.jupiter.api.Test;

class WebhookVerifierTest {
  record Vector(String secret, String id, long timestamp, byte[] body, String signature) {}

  /** siding's own signer's vectors (sdk/testdata), read with this SDK's own JSON reader. */
  static List<Vector> vectors() throws Exception {
    String text =
        Files.readString(Path.of("../testdata/webhook-signatures.json"), StandardCharsets.UTF_8);
    List<Vector> vectors = new ArrayList<>();
    for (Object item : (List<?>) ((Map<?, ?>) Json.parse(text)).get("cases")) {
      Map<?, ?> c = (Map<?, ?>) item;
      vectors.add(
          new Vector(
              (String) c.get("secret"),
              (String) c.get("id"),
              (Long) c.get("timestamp"),
              Base64.getDecoder().decode((String) c.get("body_base64")),
              (String) c.get("signature")));
    }
    return vectors;
  }

  static Map<String, List<String>> headers(String id, String timestamp, String signature) {
    return Map.of(
        "Webhook-id", List.of(id),
        "Webhook-timestamp", List.of(timestamp),
        "Webhook-signature", List.of(signature));
  }

  @ParameterizedTest
  @MethodSource("vectors")
  void acceptsSidingsSignatureAndSignsTheSame(Vector v) throws Exception {
    var verifier = new WebhookVerifier(v.secret());
    var h = headers(v.id(), Long.toString(v.timestamp()), v.signature());
    assertEquals(v.id(), verifier.verify(h, v.body(), Instant.ofEpochSecond(v.timestamp() + 10)));
    assertEquals(v.signature(), WebhookVerifier.sign(v.secret(), v.id(), v.timestamp(), v.body()));
  }

  private static String problem(WebhookVerifier verifier, Map<String, List<String>> h, byte[] body, long now) {
    return assertThrows(
            WebhookVerificationException.class,
            () -> verifier.verify(h, body, Instant.ofEpochSecond(now)))
        .problem();
  }

  @Test
  void namesEachProblem() throws Exception {
    Vector v = vectors().get(0);
    var verifier = new WebhookVerifier(v.secret());
    String ts = Long.toString(v.timestamp());
    long now = v.timestamp();
    assertEquals("missing-header", problem(verifier, Map.of("webhook-id", List.of(v.id())), v.body(), now));
    assertEquals("bad-timestamp", problem(verifier, headers(v.id(), "12.5", v.signature()), v.body(), now));
    assertEquals("stale-timestamp", problem(verifier, headers(v.id(), ts, v.signature()), v.body(), now + 301));
    assertEquals("future-timestamp", problem(verifier, headers(v.id(), ts, v.signature()), v.body(), now - 301));
    byte[] other = "another body".getBytes(StandardCharsets.UTF_8);
    assertEquals("bad-signature", problem(verifier, headers(v.id(), ts, v.signature()), other, now));
    assertEquals("bad-signature", problem(new WebhookVerifier("other"), headers(v.id(), ts, v.signature()), v.body(), now));
    // one good signature among others of any scheme is enough
    var several = headers(v.id(), ts, "v1a,xyz v1,AAAA " + v.signature());
    assertEquals(v.id(), verifier.verify(several, v.body(), Instant.ofEpochSecond(now)));
    // a tolerance of its own
    var wide = new WebhookVerifier(v.secret(), Duration.ofSeconds(1000));
    assertEquals(v.id(), wide.verify(headers(v.id(), ts, v.signature()), v.body(), Instant.ofEpochSecond(now + 999)));
  }

  @Test
  void refusesAnUnusableSecretWithoutEchoingIt() {
    var error = assertThrows(IllegalArgumentException.class, () -> new WebhookVerifier("whsec_!!secret-text"));
    assertFalse(error.getMessage().contains("secret-text"));
    assertThrows(IllegalArgumentException.class, () -> new WebhookVerifier(""));
  }
}
