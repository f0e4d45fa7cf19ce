package dev.siding.consumer;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTimeoutPreemptively;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Comparator;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

class WebhookServerTest {
  static final String SECRET = "whsec_c2lkaW5nLXRlc3Qtc2VjcmV0LWJ5dGVz";
  private final HttpClient http = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(5)).build();
  private final List<Delivery> seen = Collections.synchronizedList(new ArrayList<>());
  private WebhookServer server;

  @BeforeEach
  void start() throws IOException {
    server = WebhookServer.builder(d -> {
      seen.add(d);
      String text = d.value() == null ? "" : new String(d.value(), StandardCharsets.ISO_8859_1);
      return switch (text) {
        case "call" -> Reply.dead(Call.current());
        case "dead" -> Reply.dead("bad record");
        case "retry" -> Reply.retry(Duration.ofSeconds(9), "busy");
        default -> Reply.ack();
      };
    }).secret(SECRET).maxBodyBytes(1024).grace(Duration.ofSeconds(1)).build().start();
  }

  @AfterEach
  void stop() {
    server.stop();
  }

  static Map<String, String> sidingHeaders(String id, byte[] body) {
    long now = System.currentTimeMillis() / 1000;
    Map<String, String> h = new LinkedHashMap<>();
    h.put("content-type", "application/octet-stream");
    h.put("ce-specversion", "1.0");
    h.put("ce-id", id);
    h.put("webhook-id", id);
    h.put("webhook-timestamp", Long.toString(now));
    h.put("webhook-signature", WebhookVerifier.sign(SECRET, id, now, body));
    h.put("siding-attempt", "1");
    h.put("siding-lane", "0");
    h.put("siding-topic", "orders");
    h.put("siding-partition", "0");
    h.put("siding-offset", id.substring(id.lastIndexOf('/') + 1));
    return h;
  }

  HttpResponse<String> send(String method, Map<String, String> headers, byte[] body) throws Exception {
    HttpRequest.Builder request = HttpRequest.newBuilder(URI.create(server.url()))
        .timeout(Duration.ofSeconds(10))
        .method(method, HttpRequest.BodyPublishers.ofByteArray(body));
    headers.forEach(request::header);
    return http.send(request.build(), HttpResponse.BodyHandlers.ofString());
  }

  static byte[] gzip(byte[] data) throws IOException {
    var out = new java.io.ByteArrayOutputStream();
    try (var zip = new java.util.zip.GZIPOutputStream(out)) {
      zip.write(data);
    }
    return out.toByteArray();
  }

  @Test
  void decodesAGzipBodyVerifiesWhatItDecodedAndHandsItOver() throws Exception {
    byte[] value = "{\"sku\": \"SKU-1\", \"qty\": 1} ".repeat(30).getBytes(StandardCharsets.UTF_8);
    var headers = sidingHeaders("orders/0/30", value); // signed before compressing, as siding does
    headers.put("content-encoding", "gzip");
    var r = send("POST", headers, gzip(value));
    assertEquals(204, r.statusCode(), r.body());
    Delivery d = seen.get(seen.size() - 1);
    assertArrayEquals(value, d.value());
    assertTrue(d.headers().stream().noneMatch(h -> h.key().equalsIgnoreCase("content-encoding")));
  }

  @Test
  void refusesABodyItCannotDecodeWithoutCallingTheHandler() throws Exception {
    record Case(String encoding, byte[] body, int status) {}
    var cases = List.of(
        new Case("br", new byte[] {1}, 415),
        new Case("gzip", "not gzip".getBytes(StandardCharsets.UTF_8), 400),
        new Case("gzip", java.util.Arrays.copyOf(gzip(new byte[512]), 12), 400),
        new Case("gzip", gzip(new byte[4096]), 413));
    for (Case c : cases) {
      var headers = sidingHeaders("orders/0/31", new byte[0]);
      headers.put("content-encoding", c.encoding());
      assertEquals(c.status(), send("POST", headers, c.body()).statusCode(), c.encoding());
    }
    assertTrue(seen.isEmpty());
  }

  @Test
  void verifiesAndAcksADeliveryItsBytesExact() throws Exception {
    byte[] body = {0, 1, 2, (byte) 253, (byte) 254, (byte) 255};
    var r = send("POST", sidingHeaders("orders/0/5", body), body);
    assertEquals(204, r.statusCode());
    Delivery d = seen.get(seen.size() - 1);
    assertEquals("orders/0/5", d.id());
    assertArrayEquals(body, d.value());
  }

  @Test
  void answersARouteThatPutsOrPatchesToAPathWithTheKeyAnd405ToGet() throws Exception {
    byte[] body = "dead".getBytes(StandardCharsets.UTF_8);
    for (String method : List.of("PUT", "PATCH")) {
      var request = HttpRequest.newBuilder(URI.create(server.url() + "orders/dead"))
          .timeout(Duration.ofSeconds(10))
          .method(method, HttpRequest.BodyPublishers.ofByteArray(body));
      sidingHeaders("orders/0/30", body).forEach(request::header);
      assertEquals(422, http.send(request.build(), HttpResponse.BodyHandlers.ofString()).statusCode());
    }
    var get = HttpRequest.newBuilder(URI.create(server.url() + "orders/dead")).GET();
    assertEquals(405, http.send(get.build(), HttpResponse.BodyHandlers.ofString()).statusCode());
  }

  @Test
  void answersDeadWith422AndRetryWith500TheReasonInTheBody() throws Exception {
    for (var c : Map.of("dead", List.of(422, "bad record"), "retry", List.of(500, "busy")).entrySet()) {
      byte[] body = c.getKey().getBytes(StandardCharsets.UTF_8);
      var r = send("POST", sidingHeaders("orders/0/6", body), body);
      assertEquals(c.getValue(), List.of(r.statusCode(), r.body()));
    }
  }

  @Test
  void tellsTheHandlerTheCallWebhookOrWebhookBatch() throws Exception {
    byte[] body = "call".getBytes(StandardCharsets.UTF_8);
    assertEquals("webhook", send("POST", sidingHeaders("orders/0/20", body), body).body());
    byte[] batch = ("[" + event(21, "call") + "]").getBytes(StandardCharsets.UTF_8);
    var headers = sidingHeaders("batch:orders/0/21:1", batch);
    headers.put("content-type", "application/cloudevents-batch+json");
    var results = (List<?>) ((Map<?, ?>) Json.parse(send("POST", headers, batch).body())).get("results");
    assertEquals("webhook-batch", ((Map<?, ?>) results.get(0)).get("reason"));
  }

  @Test
  void refusesARequestThatDoesNotVerifyWithoutCallingTheHandler() throws Exception {
    byte[] body = "x".getBytes(StandardCharsets.UTF_8);
    var tampered = send("POST", sidingHeaders("orders/0/7", body), "y".getBytes(StandardCharsets.UTF_8));
    assertEquals(401, tampered.statusCode());
    assertTrue(tampered.body().contains("no webhook-signature matches"), tampered.body());
    var unsigned = sidingHeaders("orders/0/7", body);
    unsigned.remove("webhook-signature");
    assertEquals(401, send("POST", unsigned, body).statusCode());
    assertTrue(seen.isEmpty());
  }

  static String event(int n, String value) {
    return "{\"specversion\":\"1.0\",\"id\":\"orders/0/" + n + "\",\"source\":\"kafka://orders\","
        + "\"type\":\"dev.siding.delivery\",\"datacontenttype\":\"application/octet-stream\","
        + "\"data_base64\":\"" + java.util.Base64.getEncoder().encodeToString(value.getBytes(StandardCharsets.UTF_8))
        + "\",\"sidingattempt\":1,\"sidinglane\":0,\"sidingtopic\":\"orders\",\"sidingpartition\":0,"
        + "\"sidingoffset\":" + n + "}";
  }

  @Test
  void answersABatchWithOneResultPerDelivery() throws Exception {
    byte[] body = ("[" + event(10, "ok") + "," + event(11, "dead") + "," + event(12, "retry") + "]")
        .getBytes(StandardCharsets.UTF_8);
    var headers = sidingHeaders("batch:orders/0/10:3", body);
    headers.put("content-type", "application/cloudevents-batch+json");
    var r = send("POST", headers, body);
    assertEquals(200, r.statusCode());
    assertEquals(Json.parse("{\"results\":[{\"id\":\"orders/0/10\",\"verdict\":\"ack\"},"
        + "{\"id\":\"orders/0/11\",\"verdict\":\"dead\",\"reason\":\"bad record\"},"
        + "{\"id\":\"orders/0/12\",\"verdict\":\"retry\",\"after\":9,\"reason\":\"busy\"}]}"), Json.parse(r.body()));
    assertEquals(new WebhookServer.Stats(0, 1, 3), server.stats());
  }

  @Test
  void answers413OverTheLimit400ToAStrangerAnd204ToOptions() throws Exception {
    byte[] big = new byte[2048];
    assertEquals(413, send("POST", sidingHeaders("orders/0/8", big), big).statusCode());
    byte[] body = "x".getBytes(StandardCharsets.UTF_8);
    var noTopic = sidingHeaders("orders/0/9", body);
    noTopic.remove("siding-topic");
    var r = send("POST", noTopic, body);
    assertEquals(400, r.statusCode());
    assertEquals("not a siding delivery: missing header siding-topic", r.body());
    assertEquals(204, send("OPTIONS", Map.of(), new byte[0]).statusCode());
  }

  @Test
  void aServerNeedsASecretOrSaysItIsUnsigned() {
    var error = assertThrows(IllegalStateException.class, () -> WebhookServer.builder(d -> Reply.ack()).build());
    assertTrue(error.getMessage().contains("secret(...)"));
    assertThrows(IllegalArgumentException.class, () -> WebhookServer.builder(d -> Reply.ack()).secret("whsec_%%"));
  }

  @Test
  void anUnsignedServerLetsARequestInFlightFinishWhenStopped() throws Exception {
    CountDownLatch started = new CountDownLatch(1);
    CountDownLatch release = new CountDownLatch(1);
    WebhookServer unsigned = WebhookServer.builder(d -> {
      started.countDown();
      release.await();
      return Reply.ack();
    }).unsigned().grace(Duration.ofSeconds(10)).build().start();
    byte[] body = "v".getBytes(StandardCharsets.UTF_8);
    HttpRequest.Builder request = HttpRequest.newBuilder(URI.create(unsigned.url()))
        .POST(HttpRequest.BodyPublishers.ofByteArray(body));
    var headers = sidingHeaders("orders/0/1", body);
    headers.remove("webhook-signature");
    headers.forEach(request::header);
    var answer = http.sendAsync(request.build(), HttpResponse.BodyHandlers.ofString());
    assertTrue(started.await(10, TimeUnit.SECONDS));
    URI url = URI.create(unsigned.url());
    var stopping = CompletableFuture.runAsync(unsigned::stop);
    Thread.sleep(200);
    assertFalse(stopping.isDone());
    // a request arriving while it stops is turned away with 503: siding backs off, no attempt spent
    var late = HttpRequest.newBuilder(url).POST(HttpRequest.BodyPublishers.ofByteArray(body));
    headers.forEach(late::header);
    assertEquals(503, http.send(late.build(), HttpResponse.BodyHandlers.ofString()).statusCode());
    release.countDown();
    assertEquals(204, answer.get(10, TimeUnit.SECONDS).statusCode());
    stopping.get(15, TimeUnit.SECONDS);
  }

  static Map<String, String> batchHeaders(String id, byte[] body, String accept) {
    var headers = sidingHeaders(id, body);
    headers.put("content-type", "application/cloudevents-batch+json");
    if (accept != null) {
      headers.put("accept", accept);
    }
    return headers;
  }

  @Test
  void everyAnswerOfTheHandlerSaysItReadsBatches() throws Exception {
    // siding sends a route without a batch key its deliveries in batches once the consumer says so.
    byte[] body = "dead".getBytes(StandardCharsets.UTF_8);
    var single = send("POST", sidingHeaders("orders/0/1", body), body);
    assertEquals(422, single.statusCode());
    assertEquals(Optional.of("v1"), single.headers().firstValue("siding-batch"));
    byte[] batch = ("[" + event(2, "ok") + "]").getBytes(StandardCharsets.UTF_8);
    var answered = send("POST", batchHeaders("batch:orders/0/2:1", batch, null), batch);
    assertEquals(200, answered.statusCode());
    assertEquals(Optional.of("v1"), answered.headers().firstValue("siding-batch"));
  }

  @Test
  void aBatchNotAskedAsAStreamGetsOneJsonAnswer() throws Exception {
    // An older siding does not ask for the stream: it gets the one answer it reads.
    byte[] batch = ("[" + event(3, "ok") + "]").getBytes(StandardCharsets.UTF_8);
    for (String accept : java.util.Arrays.asList(null, "application/json", "application/x-ndjsonx")) {
      var r = send("POST", batchHeaders("batch:orders/0/3:1", batch, accept), batch);
      assertEquals(Optional.of("application/json"), r.headers().firstValue("content-type"), accept);
      assertEquals(Json.parse("{\"results\":[{\"id\":\"orders/0/3\",\"verdict\":\"ack\"}]}"), Json.parse(r.body()));
    }
  }

  @Test
  void aBatchAskedAsAStreamIsAnsweredLineByLineAsEachFinishes() throws Exception {
    // The slow delivery waits until the test has read every other line: a server that held the
    // lines back would never answer (siding settles each delivery as its line comes).
    CountDownLatch release = new CountDownLatch(1);
    WebhookServer streaming = WebhookServer.builder(d -> {
      String text = new String(d.value(), StandardCharsets.UTF_8);
      if (text.equals("slow")) {
        release.await();
      } else if (text.equals("throw")) {
        throw new IllegalStateException("database is down");
      }
      return text.equals("dead") ? Reply.dead("bad record") : Reply.ack();
    }).secret(SECRET).grace(Duration.ofSeconds(1)).build().start();
    try {
      byte[] body = ("[" + event(0, "slow") + "," + event(1, "ok") + "," + event(2, "dead") + ","
          + event(3, "throw") + "]").getBytes(StandardCharsets.UTF_8);
      HttpRequest.Builder request = HttpRequest.newBuilder(URI.create(streaming.url()))
          .POST(HttpRequest.BodyPublishers.ofByteArray(body));
      batchHeaders("batch:orders/0/0:4", body, "application/x-ndjson, application/json").forEach(request::header);
      List<String> lines = new ArrayList<>();
      var response = assertTimeoutPreemptively(Duration.ofSeconds(20), () -> {
        var r = http.send(request.build(), HttpResponse.BodyHandlers.ofInputStream());
        try (var reader = new BufferedReader(new InputStreamReader(r.body(), StandardCharsets.UTF_8))) {
          for (String line; (line = reader.readLine()) != null; ) {
            lines.add(line);
            if (lines.size() == 3) {
              release.countDown(); // only once the fast ones' lines were read
            }
          }
        }
        return r;
      }, "a server that holds the lines back never answers");
      assertEquals(200, response.statusCode());
      assertEquals(Optional.of("application/x-ndjson"), response.headers().firstValue("content-type"));
      assertEquals(Optional.of("v1"), response.headers().firstValue("siding-batch"));
      List<Map<?, ?>> results = new ArrayList<>();
      for (String line : lines) {
        results.add((Map<?, ?>) Json.parse(line));
      }
      assertEquals("orders/0/0", results.get(3).get("id"), "the slow one last: " + lines);
      results.sort(Comparator.comparing(r -> (String) r.get("id")));
      assertEquals(Json.parse("[{\"id\":\"orders/0/0\",\"verdict\":\"ack\"},"
          + "{\"id\":\"orders/0/1\",\"verdict\":\"ack\"},"
          + "{\"id\":\"orders/0/2\",\"verdict\":\"dead\",\"reason\":\"bad record\"},"
          + "{\"id\":\"orders/0/3\",\"verdict\":\"retry\",\"reason\":\"database is down\"}]"), results);
      assertEquals(new WebhookServer.Stats(0, 1, 4), streaming.stats());
    } finally {
      release.countDown();
      streaming.stop();
    }
  }
}
