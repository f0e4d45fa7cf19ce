package dev.siding.consumer;

import java.io.IOException;
import java.net.InetAddress;
import java.net.URI;
import java.net.URLEncoder;
import java.net.UnknownHostException;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;
import java.util.logging.Level;
import java.util.logging.Logger;

/**
 * One instance's place on one siding route (docs/registration.md): {@link #start()} joins with the
 * address this service listens on and renews the lease in the background every lease/3; a renewal
 * answered 404 joins again; a connection error or a 5xx is retried after a back-off (0.5 s,
 * doubling, at most the renewal interval) and never stops the service. {@link #stop()} leaves.
 * The token is never logged or shown.
 *
 * <pre>{@code
 * Registration join = Registration.builder("http://siding:9464", "orders", token)
 *     .address("10.0.0.5:50051").build().start();
 * ...
 * join.stop();
 * }</pre>
 *
 * Or let a server join for itself: {@code ConsumerServer.builder(h).join(Registration.builder(...))}.
 */
public final class Registration implements AutoCloseable {
  private static final Logger LOG = Logger.getLogger(Registration.class.getName());
  private static final Duration FIRST_RETRY = Duration.ofMillis(500);
  private static final Duration NO_LEASE_EVERY = Duration.ofSeconds(5);

  private final String route;
  private final String url;
  private final String token;
  private final String body;
  private final Duration timeout;
  private final Consumer<RegistrationEvent> onEvent;
  private final HttpClient http;
  private final ScheduledExecutorService timer;
  private final Object lock = new Object();
  private String consumer; // guarded by lock
  private Duration lease; // guarded by lock
  private int failures; // only on the timer's thread (after start)
  private boolean started;
  private volatile boolean stopped;

  private Registration(Builder b) {
    this.route = b.route;
    this.url = consumersUrl(b.controlUrl, b.route);
    this.token = b.token;
    this.body = Json.write(joinBody(b.address, b.transport, b.capacity));
    this.timeout = b.timeout;
    this.onEvent = b.onEvent;
    this.http = HttpClient.newBuilder().connectTimeout(b.timeout).build();
    ScheduledThreadPoolExecutor executor =
        new ScheduledThreadPoolExecutor(
            1,
            r -> {
              Thread thread = new Thread(r, "siding-join-" + b.route);
              thread.setDaemon(true);
              return thread;
            });
    executor.setExecuteExistingDelayedTasksAfterShutdownPolicy(false); // stop() means stop
    this.timer = executor;
  }

  /**
   * Join {@code route} of the siding whose control API is at {@code controlUrl} (e.g.
   * "http://siding:9464") with its registration token (or the admin token).
   */
  public static Builder builder(String controlUrl, String route, String token) {
    return new Builder(controlUrl, route, token);
  }

  static String consumersUrl(String controlUrl, String route) {
    return controlUrl.replaceAll("/+$", "")
        + "/routes/"
        + URLEncoder.encode(route, StandardCharsets.UTF_8).replace("+", "%20")
        + "/consumers";
  }

  static Map<String, Object> joinBody(String address, String transport, Integer capacity) {
    Map<String, Object> body = new LinkedHashMap<>();
    body.put("address", address);
    if (transport != null) {
      body.put("transport", transport);
    }
    if (capacity != null) {
      body.put("capacity", capacity.longValue());
    }
    return body;
  }

  /** A lease is renewed three times per lease. */
  static Duration renewEvery(Duration lease) {
    return lease.dividedBy(3);
  }

  /** The wait after {@code failures} failed calls in a row: 0.5 s, doubling, at most {@code every}. */
  static Duration retryAfter(int failures, Duration every) {
    Duration wait = FIRST_RETRY;
    for (int i = 1; i < failures && wait.compareTo(every) < 0; i++) {
      wait = wait.multipliedBy(2);
    }
    return wait.compareTo(every) < 0 ? wait : every;
  }

  /** host:port that siding should dial for a server listening on {@code host}:{@code port}. */
  static String advertised(String host, int port) {
    if (host.isEmpty() || host.equals("0.0.0.0") || host.equals("::") || host.equals("[::]")) {
      try {
        host = InetAddress.getLocalHost().getHostName();
      } catch (UnknownHostException e) {
        host = "localhost";
      }
    }
    return host + ":" + port;
  }

  public String route() {
    return route;
  }

  /** The id siding gave this instance; null while not joined. */
  public String consumer() {
    synchronized (lock) {
      return consumer;
    }
  }

  private Duration every() {
    synchronized (lock) {
      return lease == null ? NO_LEASE_EVERY : renewEvery(lease);
    }
  }

  /**
   * Join now. Throws {@link RegistrationException} when siding refuses (a wrong token, no such
   * route, a bad address); when siding cannot be reached the join is retried in the background
   * and this returns.
   */
  public synchronized Registration start() throws RegistrationException {
    if (started) {
      throw new IllegalStateException("the registration is already started");
    }
    started = true;
    try {
      join();
    } catch (Unreachable e) {
      failures = 1;
      event(RegistrationEvent.Kind.UNREACHABLE, e.status, e.getMessage(), null);
    } catch (RegistrationException e) {
      timer.shutdownNow();
      throw e;
    }
    schedule();
    return this;
  }

  /** Stop renewing and leave the route; siding sends nothing new once the leave is answered. */
  public void stop() {
    stop(true);
  }

  /** Stop renewing; leave the route, or with {@code leave} false let the lease lapse. */
  public void stop(boolean leave) {
    stopped = true;
    timer.shutdown();
    try {
      timer.awaitTermination(timeout.toMillis() + 1000, TimeUnit.MILLISECONDS);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
    String id;
    synchronized (lock) {
      id = consumer;
      consumer = null;
    }
    if (!leave || id == null) {
      return;
    }
    try {
      Answer answer = call("DELETE", url + "/" + id, null);
      if (answer.status == 200 || answer.status == 404) {
        event(RegistrationEvent.Kind.LEFT, answer.status, "", id);
      } else {
        event(RegistrationEvent.Kind.REFUSED, answer.status, answer.reason(), id);
      }
    } catch (Unreachable e) {
      LOG.log(Level.WARNING, "leaving route " + route + ": " + e.getMessage() + " (the lease will lapse)");
    }
  }

  @Override
  public void close() {
    stop();
  }

  @Override
  public String toString() {
    return "Registration[route=" + route + ", consumer=" + consumer() + "]";
  }

  private void schedule() {
    if (stopped) {
      return;
    }
    Duration every = every();
    Duration wait = failures == 0 ? every : retryAfter(failures, every);
    try {
      timer.schedule(this::tick, wait.toNanos(), TimeUnit.NANOSECONDS);
    } catch (java.util.concurrent.RejectedExecutionException e) {
      // stopping
    }
  }

  private void tick() {
    try {
      if (consumer() == null || !renew()) {
        join();
      }
      failures = 0;
    } catch (Unreachable e) {
      failures++;
      event(RegistrationEvent.Kind.UNREACHABLE, e.status, e.getMessage(), null);
    } catch (RegistrationException e) {
      failures++;
      event(RegistrationEvent.Kind.REFUSED, e.status(), e.getMessage(), null);
    } catch (RuntimeException e) {
      failures++;
      event(RegistrationEvent.Kind.REFUSED, 0, String.valueOf(e.getMessage()), null);
    }
    schedule();
  }

  private void join() throws Unreachable, RegistrationException {
    Answer answer = call("POST", url, body);
    if (answer.status != 200 && answer.status != 201) {
      throw new RegistrationException(route, answer.status, answer.reason());
    }
    Object id = answer.body.get("consumer");
    Object seconds = answer.body.get("lease_s");
    synchronized (lock) {
      consumer = String.valueOf(id);
      lease = seconds instanceof Number n ? Duration.ofNanos((long) (n.doubleValue() * 1e9)) : null;
    }
    Object address = answer.body.get("address");
    event(RegistrationEvent.Kind.JOINED, answer.status, address == null ? "" : address.toString(), null);
  }

  /** False when the lease is gone (404): join again. */
  private boolean renew() throws Unreachable, RegistrationException {
    Answer answer = call("PUT", url + "/" + consumer(), null);
    if (answer.status == 404) {
      event(RegistrationEvent.Kind.LAPSED, 404, answer.reason(), null);
      synchronized (lock) {
        consumer = null;
      }
      return false;
    }
    if (answer.status != 200) {
      throw new RegistrationException(route, answer.status, answer.reason());
    }
    if (answer.body.get("lease_s") instanceof Number n && n.doubleValue() > 0) {
      synchronized (lock) {
        lease = Duration.ofNanos((long) (n.doubleValue() * 1e9));
      }
    }
    return true;
  }

  private Answer call(String method, String target, String json) throws Unreachable {
    HttpRequest.Builder request =
        HttpRequest.newBuilder(URI.create(target))
            .timeout(timeout)
            .header("Authorization", "Bearer " + token);
    if (json != null) {
      request.header("Content-Type", "application/json");
    }
    request.method(
        method,
        json == null ? HttpRequest.BodyPublishers.noBody() : HttpRequest.BodyPublishers.ofString(json));
    HttpResponse<String> response;
    try {
      response = http.send(request.build(), HttpResponse.BodyHandlers.ofString());
    } catch (IOException e) {
      throw new Unreachable("siding's control API cannot be reached: " + describe(e), 0);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new Unreachable("interrupted", 0);
    }
    Answer answer = new Answer(response.statusCode(), parse(response.body()));
    if (answer.status >= 500) {
      throw new Unreachable("siding answered " + answer.status + ": " + answer.reason(), answer.status);
    }
    return answer;
  }

  private void event(RegistrationEvent.Kind kind, int status, String detail, String id) {
    RegistrationEvent event = new RegistrationEvent(kind, route, id != null ? id : consumer(), status, detail);
    Level level =
        kind == RegistrationEvent.Kind.JOINED || kind == RegistrationEvent.Kind.LEFT
            ? Level.INFO
            : Level.WARNING;
    LOG.log(level, "route " + route + ", consumer " + event.consumer() + ": "
        + kind.name().toLowerCase(java.util.Locale.ROOT) + (detail.isEmpty() ? "" : " (" + detail + ")"));
    if (onEvent != null) {
      onEvent.accept(event);
    }
  }

  private static Map<?, ?> parse(String text) {
    if (text == null || text.isBlank()) {
      return Map.of();
    }
    try {
      Object value = Json.parse(text);
      return value instanceof Map<?, ?> map ? map : Map.of("error", String.valueOf(value));
    } catch (IllegalArgumentException e) {
      return Map.of("error", text.substring(0, Math.min(200, text.length())));
    }
  }

  private static String describe(IOException e) {
    String message = e.getMessage();
    if ((message == null || message.isEmpty()) && e.getCause() != null) {
      message = e.getCause().toString();
    }
    return message == null || message.isEmpty() ? e.getClass().getSimpleName() : message;
  }

  private record Answer(int status, Map<?, ?> body) {
    String reason() {
      Object error = body.get("error");
      return error instanceof String s ? s : Json.write(body);
    }
  }

  private static final class Unreachable extends Exception {
    private static final long serialVersionUID = 1L;
    final int status;

    Unreachable(String message, int status) {
      super(message);
      this.status = status;
    }
  }

  /** How to build a {@link Registration}. */
  public static final class Builder {
    private final String controlUrl;
    private final String route;
    private final String token;
    private String address;
    private String transport;
    private Integer capacity;
    private Duration timeout = Duration.ofSeconds(10);
    private Consumer<RegistrationEvent> onEvent;

    private Builder(String controlUrl, String route, String token) {
      this.controlUrl = Objects.requireNonNull(controlUrl, "controlUrl");
      this.route = Objects.requireNonNull(route, "route");
      if (token == null || token.isEmpty()) {
        throw new IllegalArgumentException("joining route " + route + " needs its registration token");
      }
      this.token = token;
    }

    /**
     * How siding dials this service: "host:port" ("host:port/path" over HTTP) or a whole endpoint
     * URL. A server given this builder fills it from where it listens when it is not set.
     */
    public Builder address(String address) {
      this.address = Objects.requireNonNull(address, "address");
      return this;
    }

    /** "grpc" (siding's default), "grpcs", "http" or "https". A server sets its own when unset. */
    public Builder transport(String transport) {
      this.transport = Objects.requireNonNull(transport, "transport");
      return this;
    }

    /** Weighs how deliveries are spread, 1 to 100,000; siding's default is 100. */
    public Builder capacity(int capacity) {
      if (capacity < 1 || capacity > 100_000) {
        throw new IllegalArgumentException("capacity must be 1 to 100000, not " + capacity);
      }
      this.capacity = capacity;
      return this;
    }

    /** Per call to siding. Default 10 s. */
    public Builder timeout(Duration timeout) {
      if (timeout == null || timeout.isNegative() || timeout.isZero()) {
        throw new IllegalArgumentException("timeout must be a duration > 0, not " + timeout);
      }
      this.timeout = timeout;
      return this;
    }

    /** Told of every join, lapse, failure and leave (on the renewing thread). */
    public Builder onEvent(Consumer<RegistrationEvent> onEvent) {
      this.onEvent = Objects.requireNonNull(onEvent, "onEvent");
      return this;
    }

    /** This builder with the address and transport a server listens on, where they are unset. */
    Registration buildFor(String listenHost, int port, String serverTransport) {
      Builder b = new Builder(controlUrl, route, token);
      b.address = address != null ? address : advertised(listenHost, port);
      b.transport = transport != null ? transport : serverTransport;
      b.capacity = capacity;
      b.timeout = timeout;
      b.onEvent = onEvent;
      return new Registration(b);
    }

    @Override
    public String toString() {
      return "Registration.Builder[route=" + route + ", controlUrl=" + controlUrl + "]";
    }

    public Registration build() {
      if (address == null) {
        throw new IllegalStateException("a registration needs address(...): how siding reaches this service");
      }
      return new Registration(this);
    }
  }
}
