package dev.siding.consumer;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.time.Instant;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

class EnvelopeTest {
  static Map<String, List<String>> single() {
    Map<String, List<String>> h = new LinkedHashMap<>();
    h.put("Host", List.of("127.0.0.1:8080"));
    h.put("Content-type", List.of("application/json"));
    h.put("Ce-specversion", List.of("1.0"));
    h.put("Ce-id", List.of("orders/2/42"));
    h.put("Ce-time", List.of("2026-11-23T10:00:00.000Z"));
    h.put("Ce-subject", List.of("customer-7"));
    h.put("Webhook-id", List.of("orders/2/42"));
    h.put("Siding-attempt", List.of("3"));
    h.put("Siding-lane", List.of("2"));
    h.put("Siding-topic", List.of("orders"));
    h.put("Siding-partition", List.of("2"));
    h.put("Siding-offset", List.of("42"));
    h.put("Trace", List.of("abc", "def"));
    h.put("User-agent", List.of("siding"));
    return h;
  }

  private static String text(byte[] bytes) {
    return new String(bytes, StandardCharsets.ISO_8859_1);
  }

  @Test
  void readsOneDeliveryFromSidingsHeadersAndTheBody() throws Exception {
    Delivery d = Envelope.fromRequest(single(), new byte[] {0, (byte) 255});
    assertEquals("orders/2/42", d.id());
    assertEquals(List.of("orders", 2, 42L, 3, 2), List.of(d.topic(), d.partition(), d.offset(), d.attempt(), d.lane()));
    assertEquals(Instant.parse("2026-11-23T10:00:00Z").toEpochMilli(), d.timestampMs());
    assertEquals("customer-7", text(d.key()));
    assertArrayEquals(new byte[] {0, (byte) 255}, d.value());
    assertEquals(
        List.of("Trace=abc", "Trace=def", "content-type=application/json"),
        d.headers().stream().map(h -> h.key() + "=" + text(h.value())).toList());
  }

  @Test
  void takesABinaryKeyFromSidingKeyAndNoKeyAsNull() throws Exception {
    var h = single();
    h.put("Siding-key", List.of("AP8="));
    assertArrayEquals(new byte[] {0, (byte) 255}, Envelope.fromRequest(h, new byte[0]).key());
    h.remove("Siding-key");
    h.remove("Ce-subject");
    assertNull(Envelope.fromRequest(h, new byte[0]).key());
  }

  @Test
  void namesWhatIsMissingOrBad() {
    var h = single();
    h.remove("Siding-topic");
    var missing = assertThrows(Envelope.EnvelopeException.class, () -> Envelope.fromRequest(h, new byte[0]));
    assertEquals("not a siding delivery: missing header siding-topic", missing.getMessage());
    var bad = single();
    bad.put("Siding-offset", List.of("4x"));
    var error = assertThrows(Envelope.EnvelopeException.class, () -> Envelope.fromRequest(bad, new byte[0]));
    assertTrue(error.getMessage().startsWith("siding-offset must be an integer"), error.getMessage());
  }

  @Test
  void answersEachVerdictWithTheStatusSidingReads() {
    assertEquals(new Envelope.HttpAnswer(204, Map.of(), ""), Envelope.single(Reply.ack()));
    assertEquals(422, Envelope.single(Reply.dead("bad")).status());
    assertEquals("bad", Envelope.single(Reply.dead("bad")).body());
    assertEquals(500, Envelope.single(Reply.retry(Duration.ofSeconds(5), "busy")).status());
    assertNull(Envelope.single(Reply.retry(Duration.ofSeconds(5), "busy")).headers().get("retry-after"));
    var backoff = Envelope.single(Reply.backoff(Duration.ofMillis(2200), "db down"));
    assertEquals(List.of(429, "3", "db down"), List.of(backoff.status(), backoff.headers().get("retry-after"), backoff.body()));
    var outputs =
        Envelope.single(
            Reply.ack(
                List.of(
                    new Output("out", new byte[0], new byte[] {0, -1}, List.of(new Header("h", new byte[] {1}))),
                    Output.of("out", null, null))));
    assertEquals(200, outputs.status());
    assertEquals("application/json", outputs.headers().get("content-type"));
    assertEquals(
        "{\"outputs\":[{\"topic\":\"out\",\"key_base64\":\"\",\"value_base64\":\"AP8=\","
            + "\"headers\":[{\"key\":\"h\",\"value_base64\":\"AQ==\"}]},{\"topic\":\"out\"}]}",
        outputs.body());
  }

  static final String EVENT =
      "{\"specversion\":\"1.0\",\"id\":\"orders/0/42\",\"source\":\"kafka://orders\","
          + "\"type\":\"dev.siding.delivery\",\"time\":\"2026-11-23T10:00:00.000Z\","
          + "\"subject\":\"customer-7\",\"datacontenttype\":\"application/octet-stream\","
          + "\"data_base64\":\"AAEC/w==\",\"sidingkey\":\"Y3VzdG9tZXItNw==\",\"sidingattempt\":1,"
          + "\"sidinglane\":0,\"sidingtopic\":\"orders\",\"sidingpartition\":0,\"sidingoffset\":42,"
          + "\"sidingheaders\":[{\"key\":\"trace\",\"value_base64\":\"YWJj\"},{\"key\":\"trace\",\"value_base64\":\"AP8=\"}]}";
  static final String TOMBSTONE =
      "{\"id\":\"orders/0/43\",\"sidingattempt\":2,\"sidinglane\":1,\"sidingtopic\":\"orders\","
          + "\"sidingpartition\":0,\"sidingoffset\":43}";

  @Test
  void readsDocsBatchExampleExactly() throws Exception {
    List<Delivery> ds = Envelope.fromBatch(("[" + EVENT + "," + TOMBSTONE + "]").getBytes(StandardCharsets.UTF_8));
    Delivery d = ds.get(0);
    assertEquals(List.of("orders/0/42", "orders", 0, 42L, 1, 0), List.of(d.id(), d.topic(), d.partition(), d.offset(), d.attempt(), d.lane()));
    assertArrayEquals(new byte[] {0, 1, 2, (byte) 255}, d.value());
    assertEquals("customer-7", text(d.key()));
    assertEquals(2, d.headers().size());
    assertArrayEquals(new byte[] {0, (byte) 255}, d.headers().get(1).value());
    assertEquals(Instant.parse("2026-11-23T10:00:00Z").toEpochMilli(), d.timestampMs());
    Delivery t = ds.get(1);
    assertNull(t.value());
    assertNull(t.key());
    assertEquals(List.of(2, 1), List.of(t.attempt(), t.lane()));
  }

  private static byte[] b64(Object text) {
    return text == null ? null : java.util.Base64.getDecoder().decode((String) text);
  }

  @Test
  void readsBackExactlyTheDeliveriesOfSidingsOwnEnvelope() throws Exception {
    String text = java.nio.file.Files.readString(java.nio.file.Path.of("../testdata/batch-envelope.json"));
    Map<?, ?> vector = (Map<?, ?>) Json.parse(text);
    List<?> wanted = (List<?>) vector.get("deliveries");
    List<Delivery> got = Envelope.fromBatch(((String) vector.get("body")).getBytes(StandardCharsets.UTF_8));
    assertEquals(wanted.size(), got.size());
    for (int n = 0; n < got.size(); n++) {
      Map<?, ?> want = (Map<?, ?>) wanted.get(n);
      Delivery d = got.get(n);
      assertEquals(
          List.of(want.get("id"), want.get("topic"), want.get("partition"), want.get("offset"),
              want.get("timestamp_ms"), want.get("attempt"), want.get("lane")),
          List.of(d.id(), d.topic(), (long) d.partition(), d.offset(), d.timestampMs(), (long) d.attempt(), (long) d.lane()));
      assertArrayEquals(b64(want.get("key_base64")), d.key());
      assertArrayEquals(b64(want.get("value_base64")), d.value());
      List<?> headers = (List<?>) want.get("headers");
      assertEquals(headers.size(), d.headers().size());
      for (int h = 0; h < headers.size(); h++) {
        Map<?, ?> header = (Map<?, ?>) headers.get(h);
        assertEquals(header.get("key"), d.headers().get(h).key());
        assertArrayEquals(b64(header.get("value_base64")), d.headers().get(h).value());
      }
    }
  }

  @Test
  void namesWhatIsWrongWithABadBatch() {
    Map<String, String> cases = new HashMap<>();
    cases.put("[{", "the batch is not JSON");
    cases.put("{}", "the batch is not a JSON array");
    cases.put("[" + EVENT + "," + EVENT.replace("\"sidingoffset\":42", "\"sidingoffset\":\"42\"") + "]",
        "batch item 1: \"sidingoffset\" must be an integer, not \"42\"");
    cases.put("[" + EVENT.replace("AAEC/w==", "***") + "]", "batch item 0: \"data_base64\" must be base64");
    for (var c : cases.entrySet()) {
      var error = assertThrows(Envelope.EnvelopeException.class,
          () -> Envelope.fromBatch(c.getKey().getBytes(StandardCharsets.UTF_8)));
      assertTrue(error.getMessage().startsWith(c.getValue()), error.getMessage());
    }
  }

  @Test
  void answersABatchPerItem() {
    var answer = Envelope.batch(
        List.of("a", "b", "c", "d"),
        List.of(Reply.ack(), Reply.retry(Duration.ofSeconds(30), "rate limited"), Reply.dead("XBT"),
            Reply.backoff(Duration.ofSeconds(4), "db")));
    assertEquals(200, answer.status());
    assertEquals("application/json", answer.headers().get("content-type"));
    assertEquals(
        Json.parse("{\"results\":[{\"id\":\"a\",\"verdict\":\"ack\"},"
            + "{\"id\":\"b\",\"verdict\":\"retry\",\"after\":30,\"reason\":\"rate limited\"},"
            + "{\"id\":\"c\",\"verdict\":\"dead\",\"reason\":\"XBT\"},"
            + "{\"id\":\"d\",\"verdict\":\"retry\",\"after\":4,\"reason\":\"db\"}]}"),
        Json.parse(answer.body()));
    var all = Envelope.batch(List.of("a", "b"),
        List.of(Reply.backoff(Duration.ofSeconds(1), "db"), Reply.backoff(Duration.ofMillis(7500), "")));
    assertEquals(List.of(429, "8", "db"), List.of(all.status(), all.headers().get("retry-after"), all.body()));
  }
}
