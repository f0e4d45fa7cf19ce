package dev.siding.consumer;

import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.InterruptedIOException;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.logging.Level;
import java.util.logging.Logger;

/**
 * An HTTP server (the JDK's com.sun.net.httpserver) answering siding's webhooks with one handler:
 * it verifies the Standard Webhooks signature (401 without calling the handler when it does not
 * verify), reads one delivery or a batch (docs/batch.md), and answers with the handler's replies:
 * a batch whose request accepts {@code application/x-ndjson} gets one result line per delivery,
 * written as its handler returns. Every answer of the handler says {@code siding-batch: v1}, so a
 * route without a batch key sends batches. A body over {@code maxBodyBytes} is answered 413, a
 * request that is not siding's 400, OPTIONS (siding's liveness probe) 204.
 *
 * <pre>{@code
 * WebhookServer server = WebhookServer.builder(handler).secret(secret).port(8080).build().start();
 * }</pre>
 */
public final class WebhookServer implements AutoCloseable {
  private static final Logger LOG = Logger.getLogger(WebhookServer.class.getName());
  private static final Set<String> DELIVERY_METHODS = Set.of("POST", "PUT", "PATCH");

  /** Requests answered so far: one-delivery requests, batches and the deliveries in them. */
  public record Stats(long single, long batches, long batchDeliveries) {}

  private final Handler handler;
  private final WebhookVerifier verifier;
  private final String host;
  private final int requestedPort;
  private final long maxBodyBytes;
  private final Duration grace;
  private final ExecutorService executor = Executors.newCachedThreadPool(daemonThreads());
  private final AtomicLong single = new AtomicLong();
  private final AtomicLong batches = new AtomicLong();
  private final AtomicLong batchDeliveries = new AtomicLong();
  private final Object idle = new Object();
  private int inFlight; // guarded by idle
  private boolean draining; // guarded by idle
  private HttpServer server;
  private final ServerJoin join;

  private WebhookServer(Builder b) {
    this.handler = b.handler;
    this.verifier = b.unsigned ? null : new WebhookVerifier(b.secret, b.tolerance);
    this.host = b.host;
    this.requestedPort = b.port;
    this.maxBodyBytes = b.maxBodyBytes;
    this.grace = b.grace;
    this.join = new ServerJoin(b.join);
  }

  public static Builder builder(Handler handler) {
    return new Builder(handler);
  }

  /**
   * Serve {@code handler} on {@code port} (all interfaces), verifying with {@code secret}, until
   * the JVM is asked to stop (SIGTERM, Ctrl-C), then stop gracefully. Blocks.
   */
  public static void serve(Handler handler, int port, String secret)
      throws IOException, InterruptedException {
    WebhookServer server = builder(handler).host("0.0.0.0").port(port).secret(secret).build().start();
    System.err.println("siding consumer listening on " + server.url() + " (HTTP webhooks)");
    server.stopOnShutdown();
    Thread.currentThread().join();
  }

  /** Stop gracefully when the JVM is asked to stop (SIGTERM, Ctrl-C). */
  public WebhookServer stopOnShutdown() {
    Runtime.getRuntime().addShutdownHook(new Thread(this::stop, "siding-webhook-stop"));
    return this;
  }

  public synchronized WebhookServer start() throws IOException {
    if (server != null) {
      throw new IllegalStateException("the webhook server is already started");
    }
    HttpServer http;
    try {
      http = HttpServer.create(new InetSocketAddress(host, requestedPort), 0);
    } catch (IOException e) {
      throw new IOException("cannot listen on " + host + ":" + requestedPort + ": " + e.getMessage(), e);
    }
    http.createContext("/", this::exchange);
    http.setExecutor(executor);
    http.start();
    server = http;
    join.afterListening(host, http.getAddress().getPort(), "http", () -> stop(Duration.ZERO));
    return this;
  }

  /** The route joined with {@link Builder#join}, once started; null without one. */
  public Registration registration() {
    return join.registration();
  }

  public synchronized int port() {
    if (server == null) {
      throw new IllegalStateException("the webhook server is not started");
    }
    return server.getAddress().getPort();
  }

  /** The URL a client on this machine posts to. */
  public String url() {
    boolean any = host.equals("0.0.0.0") || host.equals("::") || host.isEmpty();
    return "http://" + (any ? "127.0.0.1" : host) + ":" + port() + "/";
  }

  public Stats stats() {
    return new Stats(single.get(), batches.get(), batchDeliveries.get());
  }

  public void stop() {
    stop(grace);
  }

  /**
   * Take no more requests (a request arriving now is answered 503, so siding backs off and sends
   * it again later); give those in flight {@code grace} to be answered, then close.
   */
  public void stop(Duration grace) {
    join.leave(); // first: siding sends nothing new once the leave is answered
    HttpServer running;
    synchronized (this) {
      running = server;
      server = null;
    }
    if (running == null) {
      return;
    }
    long deadline = System.nanoTime() + grace.toNanos();
    synchronized (idle) {
      draining = true;
      try {
        while (inFlight > 0 && deadline - System.nanoTime() > 0) {
          TimeUnit.NANOSECONDS.timedWait(idle, deadline - System.nanoTime());
        }
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
    }
    // Nothing left to wait for: the JDK's own stop(delay) would wait out the whole delay.
    running.stop(0);
    executor.shutdownNow();
  }

  @Override
  public void close() {
    stop();
  }

  private void exchange(HttpExchange exchange) throws IOException {
    boolean stopping;
    synchronized (idle) {
      stopping = draining;
      inFlight += stopping ? 0 : 1;
    }
    try (exchange) {
      Answer answer;
      try {
        answer = stopping ? new Whole(plain(503, "the consumer is stopping")) : answer(exchange);
      } catch (RuntimeException | IOException e) {
        LOG.log(Level.WARNING, "webhook request failed", e);
        answer = new Whole(plain(500, "the consumer failed to read the request"));
      }
      if (stopping) {
        exchange.getResponseHeaders().set("connection", "close");
      }
      if (answer instanceof Streamed batch) {
        stream(exchange, batch); // on this thread: stop() waits for it like any other answer
      } else if (answer instanceof Whole whole) {
        send(exchange, whole.answer());
      }
    } finally {
      if (!stopping) {
        synchronized (idle) {
          inFlight -= 1;
          idle.notifyAll();
        }
      }
    }
  }

  /** How a request is answered: whole, or a batch's results line by line as they finish. */
  private sealed interface Answer permits Whole, Streamed {}

  private record Whole(Envelope.HttpAnswer answer) implements Answer {}

  private record Streamed(List<String> ids, List<CompletableFuture<Reply>> replies) implements Answer {}

  private static void send(HttpExchange exchange, Envelope.HttpAnswer answer) throws IOException {
    byte[] body = answer.body().getBytes(StandardCharsets.UTF_8);
    answer.headers().forEach((name, value) -> exchange.getResponseHeaders().set(name, value));
    exchange.sendResponseHeaders(answer.status(), body.length == 0 ? -1 : body.length);
    if (body.length > 0) {
      try (OutputStream out = exchange.getResponseBody()) {
        out.write(body);
      }
    }
  }

  /**
   * A batch answered as it finishes: one line per delivery, written and flushed when its handler
   * returns, so a slow delivery holds back no other's answer (siding settles each as its line
   * comes); the chunked answer ends once every delivery has its line.
   */
  private static void stream(HttpExchange exchange, Streamed batch) throws IOException {
    int count = batch.ids().size();
    BlockingQueue<Integer> finished = new ArrayBlockingQueue<>(Math.max(count, 1));
    for (int n = 0; n < count; n++) {
      int index = n;
      batch.replies().get(n).whenComplete((reply, error) -> finished.add(index));
    }
    exchange.getResponseHeaders().set("content-type", Envelope.RESULT_STREAM_TYPE);
    exchange.getResponseHeaders().set(Envelope.READS_BATCHES, Envelope.READS_BATCHES_VERSION);
    exchange.sendResponseHeaders(200, 0); // 0: chunked, its length is not known yet
    try (OutputStream out = exchange.getResponseBody()) {
      out.flush(); // the headers, before any handler is done
      for (int left = count; left > 0; left--) {
        int n = finished.take();
        Reply reply;
        try {
          reply = batch.replies().get(n).join();
        } catch (CompletionException e) { // what Run.handler does not catch: as a throw
          reply = Reply.forThrow(e.getCause());
        }
        out.write(Envelope.resultLine(batch.ids().get(n), reply).getBytes(StandardCharsets.UTF_8));
        out.flush();
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new InterruptedIOException("stopped while streaming a batch's results");
    }
  }

  private static Envelope.HttpAnswer plain(int status, String text) {
    return new Envelope.HttpAnswer(status, Map.of("content-type", "text/plain; charset=utf-8"), text);
  }

  private Answer answer(HttpExchange exchange) throws IOException {
    String method = exchange.getRequestMethod();
    if (method.equals("OPTIONS")) {
      return new Whole(new Envelope.HttpAnswer(204, Map.of(), ""));
    }
    // A route may send with POST, PUT or PATCH ([route.http] method), to any path.
    if (!DELIVERY_METHODS.contains(method)) {
      return new Whole(plain(405, "siding deliveries are POSTed, PUT or PATCHed"));
    }
    byte[] body = read(exchange.getRequestBody(), maxBodyBytes);
    if (body == null) {
      return new Whole(plain(413, "request body over " + maxBodyBytes + " bytes"));
    }
    com.sun.net.httpserver.Headers headers = exchange.getRequestHeaders();
    String encoding = headers.getFirst("content-encoding");
    try {
      body = BodyEncoding.decode(encoding, body, maxBodyBytes);
    } catch (BodyEncoding.BodyEncodingException e) {
      return new Whole(plain(e.status(), e.getMessage()));
    }
    if (encoding != null) { // the handler sees the decoded body (the request's headers are read-only)
      com.sun.net.httpserver.Headers decoded = new com.sun.net.httpserver.Headers();
      decoded.putAll(headers);
      decoded.remove("content-encoding");
      headers = decoded;
    }
    if (verifier != null) {
      try {
        verifier.verify(headers, body);
      } catch (WebhookVerificationException e) {
        return new Whole(plain(401, "webhook verification failed: " + e.getMessage()));
      }
    }
    try {
      if (Envelope.isBatch(exchange.getRequestHeaders().getFirst("content-type"))) {
        List<Delivery> deliveries = Envelope.fromBatch(body);
        batches.incrementAndGet();
        batchDeliveries.addAndGet(deliveries.size());
        List<CompletableFuture<Reply>> replies = new ArrayList<>(deliveries.size());
        for (Delivery delivery : deliveries) {
          replies.add(CompletableFuture.supplyAsync(() -> Run.handler(handler, delivery, Call.WEBHOOK_BATCH), executor));
        }
        List<String> ids = deliveries.stream().map(Delivery::id).toList();
        if (Envelope.acceptsResultStream(headers.get("accept"))) {
          return new Streamed(ids, replies);
        }
        return new Whole(Envelope.said(Envelope.batch(ids, replies.stream().map(CompletableFuture::join).toList())));
      }
      Delivery delivery = Envelope.fromRequest(headers, body);
      single.incrementAndGet();
      return new Whole(Envelope.said(Envelope.single(Run.handler(handler, delivery, Call.WEBHOOK))));
    } catch (Envelope.EnvelopeException e) {
      return new Whole(plain(400, e.getMessage()));
    }
  }

  /** The whole body, or null when it is longer than {@code limit}. */
  private static byte[] read(InputStream in, long limit) throws IOException {
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    byte[] chunk = new byte[64 * 1024];
    long size = 0;
    for (int n; (n = in.read(chunk)) > 0; ) {
      size += n;
      if (size > limit) {
        in.transferTo(OutputStream.nullOutputStream()); // drain it, so the answer can be read
        return null;
      }
      out.write(chunk, 0, n);
    }
    return out.toByteArray();
  }

  private static java.util.concurrent.ThreadFactory daemonThreads() {
    AtomicInteger count = new AtomicInteger();
    return task -> {
      Thread thread = new Thread(task, "siding-webhook-" + count.incrementAndGet());
      thread.setDaemon(true);
      return thread;
    };
  }

  /** How to build a {@link WebhookServer}. */
  public static final class Builder {
    private final Handler handler;
    private String secret;
    private boolean unsigned;
    private Duration tolerance = WebhookVerifier.DEFAULT_TOLERANCE;
    private String host = "127.0.0.1";
    private int port;
    private long maxBodyBytes = 16L * 1024 * 1024;
    private Duration grace = Duration.ofSeconds(10);
    private Registration.Builder join;

    private Builder(Handler handler) {
      this.handler = Objects.requireNonNull(handler, "handler");
    }

    /** The route's webhook_secret ({@code whsec_<base64>} or any other text). */
    public Builder secret(String secret) {
      WebhookVerifier.secretKey(secret); // fail now, not on the first request
      this.secret = secret;
      this.unsigned = false;
      return this;
    }

    /** Accept requests without verifying them: only for a route that has no webhook_secret. */
    public Builder unsigned() {
      this.secret = null;
      this.unsigned = true;
      return this;
    }

    /** How far webhook-timestamp may be from this machine's clock. Default 5 minutes. */
    public Builder tolerance(Duration tolerance) {
      this.tolerance = Objects.requireNonNull(tolerance, "tolerance");
      return this;
    }

    /** The address to listen on. Default 127.0.0.1; "0.0.0.0" for every interface. */
    public Builder host(String host) {
      this.host = Objects.requireNonNull(host, "host");
      return this;
    }

    /** The port; 0 (the default) picks a free one. */
    public Builder port(int port) {
      if (port < 0 || port > 65535) {
        throw new IllegalArgumentException("port must be 0-65535, not " + port);
      }
      this.port = port;
      return this;
    }

    /** Larger request bodies are answered 413 (which siding dead-letters). Default 16 MiB. */
    public Builder maxBodyBytes(long bytes) {
      if (bytes < 1) {
        throw new IllegalArgumentException("maxBodyBytes must be >= 1, not " + bytes);
      }
      this.maxBodyBytes = bytes;
      return this;
    }

    /** How long stop() waits for requests in flight (whole seconds). Default 10 s. */
    public Builder grace(Duration grace) {
      if (grace == null || grace.isNegative()) {
        throw new IllegalArgumentException("grace must be a duration >= 0, not " + grace);
      }
      this.grace = grace;
      return this;
    }

    /**
     * Join this siding route once the server listens (transport http) and leave it first thing
     * in stop(). The address defaults to the listen host (this machine's name when it listens on
     * every interface) and port.
     */
    public Builder join(Registration.Builder join) {
      this.join = Objects.requireNonNull(join, "join");
      return this;
    }

    public WebhookServer build() {
      if (secret == null && !unsigned) {
        throw new IllegalStateException(
            "a webhook server needs secret(...) (the route's webhook_secret), or unsigned() for a route without one");
      }
      return new WebhookServer(this);
    }
  }
}
