package dev.siding.consumer;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import java.io.IOException;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.function.BooleanSupplier;
import java.util.function.Supplier;
import java.util.logging.Handler;
import java.util.logging.Level;
import java.util.logging.LogRecord;
import java.util.logging.Logger;
import java.util.stream.Collectors;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * Joining a route, against a real HTTP server on loopback that answers as siding's control API
 * does (docs/registration.md, "The calls"): join, renew every lease/3, join again on 404, back off
 * while siding is away, leave on stop, the token in every call and in no log.
 */
class RegistrationTest {
  static final String TOKEN = "s3cret-join-token";
  static final String ROUTE = "orders";
  static final double LEASE_S = 0.3;

  record Call(String method, String path, String authorization, Map<?, ?> body) {}

  /** The registration calls of siding's control API, kept in memory. */
  static final class FakeSiding {
    final List<Call> calls = Collections.synchronizedList(new ArrayList<>());
    final Map<String, String> consumers = Collections.synchronizedMap(new LinkedHashMap<>());
    volatile int failing;
    private int n;
    private final HttpServer http;

    FakeSiding() throws IOException {
      http = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 0);
      http.createContext("/", this::exchange);
      http.start();
    }

    String url() {
      return "http://127.0.0.1:" + http.getAddress().getPort();
    }

    void stop() {
      http.stop(0);
    }

    List<Call> of(String method) {
      synchronized (calls) {
        return calls.stream().filter(c -> c.method.equals(method)).toList();
      }
    }

    private void exchange(HttpExchange exchange) throws IOException {
      String raw = new String(exchange.getRequestBody().readAllBytes(), StandardCharsets.UTF_8);
      Call call = new Call(
          exchange.getRequestMethod(),
          exchange.getRequestURI().getPath(),
          exchange.getRequestHeaders().getFirst("Authorization"),
          raw.isEmpty() ? null : (Map<?, ?>) Json.parse(raw));
      Object[] answer = answer(call);
      byte[] body = Json.write(answer[1]).getBytes(StandardCharsets.UTF_8);
      exchange.getResponseHeaders().set("Content-Type", "application/json");
      exchange.sendResponseHeaders((Integer) answer[0], body.length);
      try (OutputStream out = exchange.getResponseBody()) {
        out.write(body);
      }
    }

    private synchronized Object[] answer(Call call) {
      calls.add(call);
      if (failing != 0) {
        return new Object[] {failing, Map.of("error", "siding is busy")};
      }
      if (call.authorization == null) {
        return new Object[] {401, Map.of("error", "a bearer token is needed")};
      }
      String[] parts = call.path.replaceAll("^/+", "").split("/");
      if (parts.length < 3 || !parts[0].equals("routes") || !parts[1].equals(ROUTE) || !parts[2].equals("consumers")) {
        return new Object[] {404, Map.of("error", "no such route: " + parts[1])};
      }
      if (!call.authorization.equals("Bearer " + TOKEN)) {
        return new Object[] {403, Map.of("error", "wrong token")};
      }
      if (parts.length == 3 && call.method.equals("POST")) {
        String address = (String) call.body.get("address");
        if (!address.contains(":")) {
          return new Object[] {400, Map.of("error", "address: '" + address + "' has no port")};
        }
        for (Map.Entry<String, String> e : consumers.entrySet()) {
          if (e.getValue().equals(address)) {
            return new Object[] {200, lease(e.getKey())};
          }
        }
        String id = "c" + (++n);
        consumers.put(id, address);
        return new Object[] {201, lease(id)};
      }
      if (parts.length == 4 && !consumers.containsKey(parts[3])) {
        return new Object[] {404, Map.of("error", "no consumer " + parts[3] + ": join again")};
      }
      if (parts.length == 4 && call.method.equals("PUT")) {
        return new Object[] {200, lease(parts[3])};
      }
      if (parts.length == 4 && call.method.equals("DELETE")) {
        consumers.remove(parts[3]);
        return new Object[] {200, Map.of("left", parts[3], "route", ROUTE)};
      }
      return new Object[] {404, Map.of("error", "no such call")};
    }

    private Map<String, Object> lease(String id) {
      Map<String, Object> lease = new LinkedHashMap<>();
      lease.put("consumer", id);
      lease.put("address", consumers.get(id));
      lease.put("capacity", 100L);
      lease.put("route", ROUTE);
      lease.put("lease_s", LEASE_S);
      return lease;
    }
  }

  private FakeSiding siding;
  private final List<RegistrationEvent> events = Collections.synchronizedList(new ArrayList<>());

  @BeforeEach
  void start() throws IOException {
    siding = new FakeSiding();
  }

  @AfterEach
  void stop() {
    siding.stop();
  }

  static void eventually(String what, BooleanSupplier check) throws InterruptedException {
    long deadline = System.nanoTime() + Duration.ofSeconds(10).toNanos();
    while (!check.getAsBoolean()) {
      assertTrue(System.nanoTime() < deadline, "not reached in time: " + what);
      Thread.sleep(20);
    }
  }

  List<RegistrationEvent.Kind> kinds() {
    synchronized (events) {
      return events.stream().map(RegistrationEvent::kind).toList();
    }
  }

  long count(RegistrationEvent.Kind kind) {
    return kinds().stream().filter(k -> k == kind).count();
  }

  Registration.Builder join(String address) {
    return Registration.builder(siding.url(), ROUTE, TOKEN).address(address).onEvent(events::add);
  }

  @Test
  void pureRules() {
    assertEquals(Duration.ofSeconds(5), Registration.renewEvery(Duration.ofSeconds(15)));
    List<Duration> waits = List.of(1, 2, 3, 4, 5, 40).stream()
        .map(f -> Registration.retryAfter(f, Duration.ofSeconds(5))).toList();
    assertEquals(List.of(Duration.ofMillis(500), Duration.ofSeconds(1), Duration.ofSeconds(2),
        Duration.ofSeconds(4), Duration.ofSeconds(5), Duration.ofSeconds(5)), waits);
    assertEquals("10.0.0.5:50051", Registration.advertised("10.0.0.5", 50051));
    assertFalse(Registration.advertised("0.0.0.0", 50051).startsWith("0.0.0.0"));
    assertEquals("{\"address\":\"h:1\"}", Json.write(Registration.joinBody("h:1", null, null)));
    assertEquals("{\"address\":\"h:1/p\",\"transport\":\"http\",\"capacity\":200}",
        Json.write(Registration.joinBody("h:1/p", "http", 200)));
    assertEquals("http://s:9464/routes/a%20b/consumers", Registration.consumersUrl("http://s:9464/", "a b"));
  }

  @Test
  void theJoinBodiesAreTheSharedVectors() throws IOException {
    String text = java.nio.file.Files.readString(java.nio.file.Path.of("../testdata/join-requests.json"));
    List<?> cases = (List<?>) ((Map<?, ?>) Json.parse(text)).get("cases");
    assertFalse(cases.isEmpty());
    for (Object item : cases) {
      Map<?, ?> c = (Map<?, ?>) item;
      Long capacity = (Long) c.get("capacity");
      Map<String, Object> body = Registration.joinBody(
          (String) c.get("address"), (String) c.get("transport"), capacity == null ? null : capacity.intValue());
      assertEquals(Json.write(c.get("body")), Json.write(body));
    }
  }

  @Test
  void joinsWithTheTokenRenewsEveryThirdOfTheLeaseAndLeavesOnStop() throws Exception {
    Registration reg = join("127.0.0.1:8080/hook").transport("http").capacity(50).build().start();
    String id = reg.consumer();
    assertEquals(Map.of(id, "127.0.0.1:8080/hook"), Map.copyOf(siding.consumers));
    long started = System.nanoTime();
    eventually("three renewals", () -> siding.of("PUT").size() >= 3);
    assertTrue(System.nanoTime() - started >= (long) (2 * LEASE_S / 3 * 1e9) - 20_000_000L);
    reg.stop();
    assertEquals(Map.of("address", "127.0.0.1:8080/hook", "transport", "http", "capacity", 50L),
        siding.of("POST").get(0).body());
    synchronized (siding.calls) {
      assertEquals(Set.of("Bearer " + TOKEN), siding.calls.stream().map(Call::authorization).collect(Collectors.toSet()));
    }
    assertEquals(Set.of("/routes/orders/consumers/" + id),
        siding.of("PUT").stream().map(Call::path).collect(Collectors.toSet()));
    assertEquals(List.of("/routes/orders/consumers/" + id), siding.of("DELETE").stream().map(Call::path).toList());
    assertTrue(siding.consumers.isEmpty());
    assertEquals(List.of(RegistrationEvent.Kind.JOINED, RegistrationEvent.Kind.LEFT), kinds());
    int renewals = siding.of("PUT").size();
    Thread.sleep((long) (LEASE_S * 1000));
    assertEquals(renewals, siding.of("PUT").size(), "stopped means stopped");
  }

  @Test
  void aRenewalAnswered404JoinsAgain() throws Exception {
    Registration reg = join("127.0.0.1:50051").build().start();
    String first = reg.consumer();
    siding.consumers.clear(); // the lease lapsed, or an operator removed it
    eventually("joined again", () -> reg.consumer() != null && !reg.consumer().equals(first));
    assertEquals(List.of(reg.consumer()), List.copyOf(siding.consumers.keySet()));
    reg.stop();
    assertEquals(List.of(RegistrationEvent.Kind.JOINED, RegistrationEvent.Kind.LAPSED,
        RegistrationEvent.Kind.JOINED, RegistrationEvent.Kind.LEFT), kinds());
    assertEquals(404, events.get(1).status());
    assertEquals(first, events.get(1).consumer());
  }

  @Test
  void whileSidingIsAwayItBacksOffAndKeepsItsLease() throws Exception {
    Registration reg = join("127.0.0.1:50051").build().start();
    String id = reg.consumer();
    siding.failing = 503;
    eventually("three failures", () -> count(RegistrationEvent.Kind.UNREACHABLE) >= 3);
    siding.failing = 0;
    int before = siding.of("PUT").size();
    eventually("renewing again", () -> siding.of("PUT").size() > before + 1);
    assertEquals(id, reg.consumer());
    reg.stop(false); // no leave: the lease lapses
    assertTrue(siding.of("DELETE").isEmpty());
    synchronized (events) {
      for (RegistrationEvent e : events) {
        if (e.kind() == RegistrationEvent.Kind.UNREACHABLE) {
          assertEquals(503, e.status());
          assertTrue(e.detail().contains("siding is busy"), e.detail());
        }
      }
    }
  }

  @Test
  void sidingNotThereAtStartDoesNotStopTheService() throws Exception {
    siding.failing = 502;
    Registration reg = join("127.0.0.1:50051").build().start();
    assertNull(reg.consumer());
    assertEquals(RegistrationEvent.Kind.UNREACHABLE, kinds().get(0));
    siding.failing = 0;
    eventually("joined", () -> reg.consumer() != null);
    reg.stop();
    assertTrue(siding.consumers.isEmpty());

    List<RegistrationEvent> nobody = Collections.synchronizedList(new ArrayList<>());
    Registration gone = Registration.builder("http://127.0.0.1:9", ROUTE, TOKEN).address("h:1")
        .onEvent(nobody::add).build().start();
    gone.stop();
    assertEquals(1, nobody.size());
    assertEquals(0, nobody.get(0).status());
    assertTrue(nobody.get(0).detail().contains("cannot be reached"), nobody.get(0).detail());
  }

  @ParameterizedTest
  @CsvSource(delimiter = '|', value = {
    "orders | wrong             | h:1    | 403 | wrong token",
    "nope   | s3cret-join-token | h:1    | 404 | no such route: nope",
    "orders | s3cret-join-token | nohost | 400 | address: 'nohost' has no port",
  })
  void aRefusedFirstJoinThrowsWithSidingsReason(String route, String token, String address, int status, String reason) {
    Registration reg = Registration.builder(siding.url(), route, token).address(address).build();
    RegistrationException e = assertThrows(RegistrationException.class, reg::start);
    assertEquals(status, e.status());
    assertEquals("joining route " + route + " was refused (" + status + "): " + reason, e.getMessage());
  }

  @Test
  void theTokenIsNeverLoggedOrShown() throws Exception {
    List<String> logged = Collections.synchronizedList(new ArrayList<>());
    Logger jul = Logger.getLogger(Registration.class.getName());
    Handler capture = new Handler() {
      @Override
      public void publish(LogRecord record) {
        logged.add(record.getMessage());
      }

      @Override
      public void flush() {}

      @Override
      public void close() {}
    };
    Level before = jul.getLevel();
    jul.setLevel(Level.ALL); // the tests' logging.properties keeps only SEVERE
    jul.setUseParentHandlers(false);
    jul.addHandler(capture);
    try {
      Registration.Builder builder = join("127.0.0.1:50051");
      Registration reg = builder.build().start();
      siding.failing = 500;
      eventually("a failure", () -> count(RegistrationEvent.Kind.UNREACHABLE) > 0);
      siding.failing = 0;
      reg.stop();
      RegistrationException refused = assertThrows(RegistrationException.class,
          () -> Registration.builder(siding.url(), ROUTE, TOKEN + "x").address("h:1").build().start());
      String shown = String.join("\n", logged) + reg + builder + refused.getMessage() + events;
      assertTrue(shown.contains("joined") && shown.contains("left") && shown.contains("unreachable"), shown);
      assertFalse(shown.contains(TOKEN), shown);
    } finally {
      jul.removeHandler(capture);
      jul.setUseParentHandlers(true);
      jul.setLevel(before);
    }
  }

  @Test
  void theServersJoinOnceTheyListenAndLeaveWhenTheyStop() throws Exception {
    Registration.Builder join = Registration.builder(siding.url(), ROUTE, TOKEN).capacity(7);
    ConsumerServer grpc = ConsumerServer.builder(d -> Reply.ack()).join(join).build().start();
    WebhookServer web = WebhookServer.builder(d -> Reply.ack()).unsigned().join(join).build().start();
    assertEquals(List.of(
        Map.of("address", grpc.target(), "transport", "grpc", "capacity", 7L),
        Map.of("address", "127.0.0.1:" + web.port(), "transport", "http", "capacity", 7L)),
        siding.of("POST").stream().map(Call::body).toList());
    assertEquals(2, siding.consumers.size());
    assertNotEquals(grpc.registration().consumer(), web.registration().consumer());
    grpc.stop(Duration.ZERO);
    web.stop(Duration.ZERO);
    assertTrue(siding.consumers.isEmpty());
    assertEquals(2, siding.of("DELETE").size());
  }

  @Test
  void aServerWhoseJoinIsRefusedStopsAndThrows() throws Exception {
    Registration.Builder join = Registration.builder(siding.url(), ROUTE, "wrong");
    int port;
    try (ServerSocket free = new ServerSocket(0)) {
      port = free.getLocalPort();
    }
    List<Supplier<AutoCloseable>> servers = List.of(
        () -> ConsumerServer.builder(d -> Reply.ack()).port(port).join(join).build(),
        () -> WebhookServer.builder(d -> Reply.ack()).unsigned().port(port).join(join).build());
    for (Supplier<AutoCloseable> make : servers) {
      for (int attempt = 0; attempt < 2; attempt++) { // the second binds the port the first freed
        AutoCloseable server = make.get();
        RegistrationException e = assertThrows(RegistrationException.class, () -> start(server));
        assertEquals(403, e.status());
      }
    }
    assertTrue(siding.consumers.isEmpty());
  }

  private static void start(AutoCloseable server) throws IOException {
    if (server instanceof ConsumerServer grpc) {
      grpc.start();
    } else {
      ((WebhookServer) server).start();
    }
  }
}
