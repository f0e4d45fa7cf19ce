package dev.siding.consumer;

import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.time.format.DateTimeParseException;
import java.util.ArrayList;
import java.util.Base64;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.regex.Pattern;

/**
 * Pure: a siding webhook request as deliveries, and replies as the HTTP answer siding reads
 * (docs/webhooks.md for one delivery per request, docs/batch.md for the batch envelope).
 */
final class Envelope {
  static final String BATCH_CONTENT_TYPE = "application/cloudevents-batch+json";
  private static final String DEFAULT_CONTENT_TYPE = "application/octet-stream";
  private static final Pattern BASE64 = Pattern.compile("[A-Za-z0-9+/]*={0,2}");
  private static final Pattern INTEGER = Pattern.compile("-?[0-9]+");
  // Request headers that carry siding's own facts or the request itself, not a Kafka header.
  private static final Set<String> NOT_FORWARDED =
      Set.of(
          "host", "content-length", "content-type", "authorization", "transfer-encoding",
          "connection", "keep-alive", "te", "trailer", "upgrade", "expect",
          "proxy-authorization", "proxy-connection", "user-agent", "accept", "accept-encoding");
  private static final Map<String, String> TEXT = Map.of("content-type", "text/plain; charset=utf-8");

  private Envelope() {}

  /** The request is not a siding delivery (answered 400, which siding dead-letters). */
  static final class EnvelopeException extends Exception {
    private static final long serialVersionUID = 1L;

    EnvelopeException(String message) {
      super(message);
    }
  }

  record HttpAnswer(int status, Map<String, String> headers, String body) {}

  static boolean isBatch(String contentType) {
    if (contentType == null) {
      return false;
    }
    return contentType.split(";", 2)[0].trim().toLowerCase(Locale.ROOT).equals(BATCH_CONTENT_TYPE);
  }

  /**
   * One delivery from a binary-mode request: the body is the value (an empty body may also be a
   * null value: HTTP cannot tell them apart). Headers are the forwarded Kafka headers, names as
   * the HTTP server presents them, plus the record's content-type when it is not the default.
   */
  static Delivery fromRequest(Map<String, List<String>> headers, byte[] body)
      throws EnvelopeException {
    Map<String, String> first = new TreeMap<>(String.CASE_INSENSITIVE_ORDER);
    List<Header> kafka = new ArrayList<>();
    for (Map.Entry<String, List<String>> entry : headers.entrySet()) {
      String name = entry.getKey();
      if (name == null || entry.getValue() == null || entry.getValue().isEmpty()) {
        continue;
      }
      first.putIfAbsent(name, entry.getValue().get(0));
      String lower = name.toLowerCase(Locale.ROOT);
      if (NOT_FORWARDED.contains(lower)
          || lower.startsWith("ce-")
          || lower.startsWith("webhook-")
          || lower.startsWith("siding-")) {
        continue;
      }
      for (String value : entry.getValue()) {
        kafka.add(new Header(name, value.getBytes(StandardCharsets.ISO_8859_1)));
      }
    }
    String contentType = first.get("content-type");
    if (contentType != null && !contentType.equals(DEFAULT_CONTENT_TYPE)) {
      kafka.add(new Header("content-type", contentType.getBytes(StandardCharsets.ISO_8859_1)));
    }
    byte[] key = null;
    if (first.containsKey("siding-key")) {
      key = base64(first.get("siding-key"), "siding-key");
    } else if (first.containsKey("ce-subject")) {
      key = first.get("ce-subject").getBytes(StandardCharsets.ISO_8859_1);
    }
    return new Delivery(
        need(first, "ce-id"),
        need(first, "siding-topic"),
        (int) integer(need(first, "siding-partition"), "siding-partition"),
        integer(need(first, "siding-offset"), "siding-offset"),
        key,
        body,
        kafka,
        time(first.get("ce-time"), "ce-time"),
        (int) integer(need(first, "siding-attempt"), "siding-attempt"),
        (int) integer(need(first, "siding-lane"), "siding-lane"));
  }

  private static String need(Map<String, String> headers, String name) throws EnvelopeException {
    String value = headers.get(name);
    if (value == null) {
      throw new EnvelopeException("not a siding delivery: missing header " + name);
    }
    return value;
  }

  private static long integer(String text, String what) throws EnvelopeException {
    String trimmed = text.trim();
    if (!INTEGER.matcher(trimmed).matches()) {
      throw new EnvelopeException(what + " must be an integer, not \"" + text + "\"");
    }
    try {
      return Long.parseLong(trimmed);
    } catch (NumberFormatException e) {
      throw new EnvelopeException(what + " is out of range: " + text);
    }
  }

  private static long time(String text, String what) throws EnvelopeException {
    if (text == null || text.isEmpty()) {
      return 0;
    }
    try {
      return Instant.parse(text).toEpochMilli();
    } catch (DateTimeParseException e) {
      throw new EnvelopeException(what + " is not an RFC 3339 time: \"" + text + "\"");
    }
  }

  private static byte[] base64(String text, String what) throws EnvelopeException {
    if (!BASE64.matcher(text).matches()) {
      throw new EnvelopeException(what + " must be base64");
    }
    try {
      return Base64.getDecoder().decode(text);
    } catch (IllegalArgumentException e) {
      throw new EnvelopeException(what + " must be base64");
    }
  }

  /** The deliveries of a batch request (a JSON array of structured CloudEvents). */
  static List<Delivery> fromBatch(byte[] body) throws EnvelopeException {
    Object parsed;
    try {
      parsed = Json.parse(new String(body, StandardCharsets.UTF_8));
    } catch (Json.ParseException e) {
      throw new EnvelopeException("the batch is not JSON: " + e.getMessage());
    }
    if (!(parsed instanceof List<?> items)) {
      throw new EnvelopeException("the batch is not a JSON array");
    }
    List<Delivery> deliveries = new ArrayList<>(items.size());
    for (int i = 0; i < items.size(); i++) {
      deliveries.add(item(items.get(i), "batch item " + i));
    }
    return deliveries;
  }

  private static Delivery item(Object item, String where) throws EnvelopeException {
    if (!(item instanceof Map<?, ?> event)) {
      throw new EnvelopeException(where + " is not a JSON object");
    }
    Object rawHeaders = event.containsKey("sidingheaders") ? event.get("sidingheaders") : List.of();
    if (!(rawHeaders instanceof List<?> list)) {
      throw new EnvelopeException(where + ": \"sidingheaders\" must be an array");
    }
    List<Header> headers = new ArrayList<>(list.size());
    for (int n = 0; n < list.size(); n++) {
      String at = where + ": sidingheaders[" + n + "]";
      if (!(list.get(n) instanceof Map<?, ?> header)) {
        throw new EnvelopeException(at + " is not a JSON object");
      }
      byte[] value = bytes(header, "value_base64", at);
      headers.add(new Header(text(header, "key", at), value == null ? new byte[0] : value));
    }
    Object time = event.get("time");
    return new Delivery(
        text(event, "id", where),
        text(event, "sidingtopic", where),
        (int) whole(event, "sidingpartition", where),
        whole(event, "sidingoffset", where),
        bytes(event, "sidingkey", where),
        bytes(event, "data_base64", where),
        headers,
        time(time instanceof String s ? s : null, where + ": \"time\""),
        (int) whole(event, "sidingattempt", where),
        (int) whole(event, "sidinglane", where));
  }

  private static String text(Map<?, ?> item, String field, String where) throws EnvelopeException {
    if (!(item.get(field) instanceof String value)) {
      throw new EnvelopeException(where + ": \"" + field + "\" must be a string");
    }
    return value;
  }

  private static long whole(Map<?, ?> item, String field, String where) throws EnvelopeException {
    if (!(item.get(field) instanceof Long value)) {
      throw new EnvelopeException(
          where + ": \"" + field + "\" must be an integer, not " + Json.write(item.get(field)));
    }
    return value;
  }

  private static byte[] bytes(Map<?, ?> item, String field, String where) throws EnvelopeException {
    Object value = item.get(field);
    if (value == null) {
      return null;
    }
    if (!(value instanceof String text)) {
      throw new EnvelopeException(where + ": \"" + field + "\" must be base64");
    }
    return base64(text, where + ": \"" + field + "\"");
  }

  /** Outputs as a webhook answer carries them (docs/outputs.md): bytes in base64, null left out. */
  static List<Object> outputsJson(List<Output> outputs) {
    Base64.Encoder b64 = Base64.getEncoder();
    List<Object> list = new ArrayList<>(outputs.size());
    for (Output output : outputs) {
      Map<String, Object> item = new LinkedHashMap<>();
      item.put("topic", output.topic());
      if (output.key() != null) {
        item.put("key_base64", b64.encodeToString(output.key()));
      }
      if (output.value() != null) {
        item.put("value_base64", b64.encodeToString(output.value()));
      }
      if (!output.headers().isEmpty()) {
        List<Object> headers = new ArrayList<>();
        for (Header h : output.headers()) {
          Map<String, Object> header = new LinkedHashMap<>();
          header.put("key", h.key());
          header.put("value_base64", b64.encodeToString(h.value()));
          headers.add(header);
        }
        item.put("headers", headers);
      }
      list.add(item);
    }
    return list;
  }

  private static Map<String, String> withRetryAfter(Map<String, String> headers, Reply reply) {
    Map<String, String> all = new LinkedHashMap<>(headers);
    reply.after().ifPresent(after -> all.put("retry-after", Long.toString((long) Math.ceil(Reply.seconds(after)))));
    return all;
  }

  private static String or(String reason, String otherwise) {
    return reason.isEmpty() ? otherwise : reason;
  }

  /** The answer to a one-delivery request: the status (and Retry-After); an ack's outputs in JSON. */
  static HttpAnswer single(Reply reply) {
    if (reply.verdict() == Verdict.ACK && !reply.outputs().isEmpty()) {
      return new HttpAnswer(
          200,
          Map.of("content-type", "application/json"),
          Json.write(Map.of("outputs", outputsJson(reply.outputs()))));
    }
    return switch (reply.verdict()) {
      case ACK -> new HttpAnswer(204, Map.of(), "");
      case DEAD -> new HttpAnswer(422, TEXT, or(reply.reason(), "dead"));
      case BACKOFF -> new HttpAnswer(429, withRetryAfter(TEXT, reply), or(reply.reason(), "back off"));
      // 5xx: the next retry lane; a one-delivery answer cannot carry its own delay.
      case RETRY -> new HttpAnswer(500, TEXT, or(reply.reason(), "retry"));
    };
  }

  /** The answer to a batch: one result per delivery; a batch that all backs off is a 429. */
  static HttpAnswer batch(List<String> ids, List<Reply> replies) {
    List<Reply> given = replies;
    if (!given.isEmpty() && given.stream().allMatch(r -> r.verdict() == Verdict.BACKOFF)) {
      Reply longest =
          given.stream()
              .filter(r -> r.after().isPresent())
              .max((a, b) -> a.after().get().compareTo(b.after().get()))
              .orElse(given.get(0));
      return new HttpAnswer(429, withRetryAfter(TEXT, longest), or(given.get(0).reason(), "back off"));
    }
    List<Object> results = new ArrayList<>(given.size());
    for (int i = 0; i < given.size(); i++) {
      results.add(result(ids.get(i), given.get(i)));
    }
    return new HttpAnswer(
        200, Map.of("content-type", "application/json"), Json.write(Map.of("results", results)));
  }

  /** One delivery's result as a batch answer (or a line of the stream) carries it. */
  private static Map<String, Object> result(String id, Reply reply) {
    Map<String, Object> result = new LinkedHashMap<>();
    result.put("id", id);
    switch (reply.verdict()) {
      case ACK -> {
        result.put("verdict", "ack");
        if (!reply.outputs().isEmpty()) {
          result.put("outputs", outputsJson(reply.outputs()));
        }
      }
      case DEAD -> {
        result.put("verdict", "dead");
        result.put("reason", reply.reason());
      }
      case RETRY, BACKOFF -> {
        result.put("verdict", "retry");
        reply.after().ifPresent(after -> result.put("after", Reply.seconds(after)));
        result.put("reason", reply.reason());
      }
    }
    return result;
  }

  // A batch's results streamed as they finish, one JSON object per line (siding asks for it with
  // accept): a slow delivery no longer holds back its batch-mates' answers.
  static final String RESULT_STREAM_TYPE = "application/x-ndjson";
  // Said on every answer of the handler: this server reads the batch envelope and streams its
  // results when asked, so a route without a batch key sends it batches (docs/batch.md).
  static final String READS_BATCHES = "siding-batch";
  static final String READS_BATCHES_VERSION = "v1";

  /** An answer of the handler: it says this server reads batches. */
  static HttpAnswer said(HttpAnswer answer) {
    Map<String, String> headers = new LinkedHashMap<>(answer.headers());
    headers.put(READS_BATCHES, READS_BATCHES_VERSION);
    return new HttpAnswer(answer.status(), headers, answer.body());
  }

  /** Whether the request's sender reads a batch's results as a stream (its accept headers). */
  static boolean acceptsResultStream(List<String> accept) {
    if (accept == null) {
      return false;
    }
    for (String value : accept) {
      for (String part : value.split(",")) {
        if (part.split(";", 2)[0].trim().toLowerCase(Locale.ROOT).equals(RESULT_STREAM_TYPE)) {
          return true;
        }
      }
    }
    return false;
  }

  /** One delivery's result as a line of the stream. */
  static String resultLine(String id, Reply reply) {
    return Json.write(result(id, reply)) + "\n";
  }
}
