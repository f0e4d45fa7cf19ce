package dev.siding.consumer;

import io.grpc.InsecureServerCredentials;
import io.grpc.Server;
import io.grpc.ServerCredentials;
import io.grpc.Status;
import io.grpc.TlsServerCredentials;
import io.grpc.health.v1.HealthCheckResponse.ServingStatus;
import io.grpc.netty.shaded.io.grpc.netty.NettyServerBuilder;
import io.grpc.protobuf.services.HealthStatusManager;
import io.grpc.stub.ServerCallStreamObserver;
import io.grpc.stub.StreamObserver;
import java.io.File;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.time.Duration;
import java.util.List;
import java.util.Objects;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import siding.v1.ConsumerGrpc;
import siding.v1.ConsumerOuterClass;

/**
 * A gRPC server for one handler: {@code Deliver}, {@code DeliverStream}, {@code DeliverBatches}
 * and health checking ({@code grpc.health.v1}: SERVING for "" and "siding.v1.Consumer" until
 * {@link #stop} begins).
 *
 * <pre>{@code
 * ConsumerServer server = ConsumerServer.builder(handler).port(50051).build().start();
 * ...
 * server.stop(); // take no more deliveries, let those in flight finish (grace: 10 s)
 * }</pre>
 */
public final class ConsumerServer implements AutoCloseable {
  public static final String SERVICE = "siding.v1.Consumer";

  /** Deliveries taken so far, by RPC: how siding is sending (a batched route uses batches). */
  public record Stats(long unary, long stream, long batches, long batchDeliveries) {}

  private final Handler handler;
  private final String host;
  private final int requestedPort;
  private final Duration grace;
  private final ExecutorService executor;
  private final boolean ownExecutor;
  private final File certFile;
  private final File keyFile;
  private final int maxInboundMessageBytes;
  private final HealthStatusManager health = new HealthStatusManager();
  private final Set<CallSession<?, ?>> sessions = ConcurrentHashMap.newKeySet();
  private final AtomicLong unary = new AtomicLong();
  private final AtomicLong stream = new AtomicLong();
  private final AtomicLong batches = new AtomicLong();
  private final AtomicLong batchDeliveries = new AtomicLong();
  private final Object idle = new Object();
  private int unaryInFlight; // guarded by idle
  private volatile boolean draining;
  private Server server;
  private final ServerJoin join;

  private ConsumerServer(Builder b) {
    this.handler = b.handler;
    this.host = b.host;
    this.requestedPort = b.port;
    this.grace = b.grace;
    this.ownExecutor = b.executor == null;
    this.executor = ownExecutor ? Executors.newCachedThreadPool(daemonThreads()) : b.executor;
    this.certFile = b.certFile;
    this.keyFile = b.keyFile;
    this.maxInboundMessageBytes = b.maxInboundMessageBytes;
    this.join = new ServerJoin(b.join);
  }

  public static Builder builder(Handler handler) {
    return new Builder(handler);
  }

  /**
   * Serve {@code handler} on {@code port} (all interfaces) until the JVM is asked to stop
   * (SIGTERM, Ctrl-C), then stop gracefully. Blocks.
   */
  public static void serve(Handler handler, int port) throws IOException, InterruptedException {
    ConsumerServer server = builder(handler).host("0.0.0.0").port(port).build().start();
    System.err.println("siding consumer listening on " + server.target() + " (gRPC)");
    server.stopOnShutdown();
    server.awaitTermination();
  }

  /** Stop gracefully when the JVM is asked to stop (SIGTERM, Ctrl-C). */
  public ConsumerServer stopOnShutdown() {
    Runtime.getRuntime()
        .addShutdownHook(
            new Thread(
                () -> {
                  System.err.println(
                      "stopping: finishing deliveries in flight (up to " + grace.toSeconds() + "s)");
                  stop();
                },
                "siding-consumer-stop"));
    return this;
  }

  public synchronized ConsumerServer start() throws IOException {
    if (server != null) {
      throw new IllegalStateException("the consumer server is already started");
    }
    health.setStatus("", ServingStatus.SERVING);
    health.setStatus(SERVICE, ServingStatus.SERVING);
    Server built =
        NettyServerBuilder.forAddress(new InetSocketAddress(host, requestedPort), credentials())
            .addService(new Service())
            .addService(health.getHealthService())
            .maxInboundMessageSize(maxInboundMessageBytes)
            // siding's channels ping every minute to find dead connections under quiet streams.
            .permitKeepAliveTime(10, TimeUnit.SECONDS)
            .permitKeepAliveWithoutCalls(true)
            .build();
    try {
      built.start();
    } catch (IOException e) {
      throw new IOException("cannot listen on " + host + ":" + requestedPort + ": " + e.getMessage(), e);
    }
    server = built;
    join.afterListening(host, built.getPort(), certFile != null ? "grpcs" : "grpc", () -> stop(Duration.ZERO));
    return this;
  }

  /** The route joined with {@link Builder#join}, once started; null without one. */
  public Registration registration() {
    return join.registration();
  }

  /** The port bound (useful with port 0). */
  public synchronized int port() {
    if (server == null) {
      throw new IllegalStateException("the consumer server is not started");
    }
    return server.getPort();
  }

  /** Where a client on this machine reaches the server: host:port. */
  public String target() {
    boolean any = host.equals("0.0.0.0") || host.equals("::") || host.isEmpty();
    return (any ? "127.0.0.1" : host) + ":" + port();
  }

  public Stats stats() {
    return new Stats(unary.get(), stream.get(), batches.get(), batchDeliveries.get());
  }

  /** {@link #stop(Duration)} with the builder's grace period. */
  public void stop() {
    stop(grace);
  }

  /** Take no more deliveries; give those in flight {@code grace} to finish, then cancel them. */
  public void stop(Duration grace) {
    join.leave(); // first: siding sends nothing new once the leave is answered
    Server running;
    synchronized (this) {
      running = server;
      if (running == null || running.isShutdown()) {
        return;
      }
      health.enterTerminalState();
      draining = true;
      running.shutdown();
    }
    sessions.forEach(CallSession::drain);
    try {
      // Our deliveries first: once they are answered, nothing else (a health Watch) may hold
      // the stop for the whole grace period.
      long deadline = System.nanoTime() + grace.toNanos();
      awaitIdle(deadline);
      // A moment for the last answers to leave before anything still open is cut.
      long left = Math.max(0, Math.min(deadline - System.nanoTime(), TimeUnit.SECONDS.toNanos(1)));
      running.awaitTermination(left, TimeUnit.NANOSECONDS);
      running.shutdownNow();
      if (ownExecutor) {
        executor.shutdownNow(); // interrupts the handlers still running
      }
      running.awaitTermination(5, TimeUnit.SECONDS);
    } catch (InterruptedException e) {
      running.shutdownNow();
      Thread.currentThread().interrupt();
    } finally {
      if (ownExecutor) {
        executor.shutdownNow();
      }
    }
  }

  private void awaitIdle(long deadlineNanos) throws InterruptedException {
    synchronized (idle) {
      while (!sessions.isEmpty() || unaryInFlight > 0) {
        long left = deadlineNanos - System.nanoTime();
        if (left <= 0) {
          return;
        }
        TimeUnit.NANOSECONDS.timedWait(idle, left);
      }
    }
  }

  private void settled(Runnable change) {
    synchronized (idle) {
      change.run();
      idle.notifyAll();
    }
  }

  @Override
  public void close() {
    stop();
  }

  /** Until the server has stopped. */
  public void awaitTermination() throws InterruptedException {
    Server running;
    synchronized (this) {
      running = server;
    }
    if (running != null) {
      running.awaitTermination();
    }
  }

  private ServerCredentials credentials() throws IOException {
    if (certFile == null) {
      return InsecureServerCredentials.create();
    }
    return TlsServerCredentials.create(certFile, keyFile);
  }

  private ConsumerOuterClass.Result answer(ConsumerOuterClass.Delivery message, String call) {
    Delivery delivery = Proto.delivery(message);
    return Proto.result(delivery.id(), Run.handler(handler, delivery, call));
  }

  private <I, O> StreamObserver<I> session(
      StreamObserver<O> out,
      java.util.function.Function<I, List<ConsumerOuterClass.Delivery>> split,
      java.util.function.Function<List<ConsumerOuterClass.Result>, List<O>> frames,
      String call) {
    CallSession<I, O> session =
        new CallSession<>(
            out,
            split,
            frames,
            d -> answer(d, call),
            executor,
            s -> settled(() -> sessions.remove(s)));
    sessions.add(session);
    if (draining) {
      session.drain();
    }
    return session;
  }

  private final class Service extends ConsumerGrpc.ConsumerImplBase {
    @Override
    public void deliver(
        ConsumerOuterClass.Delivery request, StreamObserver<ConsumerOuterClass.Result> out) {
      unary.incrementAndGet();
      ServerCallStreamObserver<ConsumerOuterClass.Result> call =
          (ServerCallStreamObserver<ConsumerOuterClass.Result>) out;
      call.setOnCancelHandler(() -> {});
      settled(() -> unaryInFlight++);
      executor.execute(
          () -> {
            try {
              answer(request, call);
            } finally {
              settled(() -> unaryInFlight--);
            }
          });
    }

    private void answer(
        ConsumerOuterClass.Delivery request,
        ServerCallStreamObserver<ConsumerOuterClass.Result> call) {
      Delivery delivery = Proto.delivery(request);
      Reply reply = Run.handler(handler, delivery, Call.DELIVER);
      if (call.isCancelled()) {
        return;
      }
      if (reply.verdict() == Verdict.BACKOFF) {
        // siding backs off and redelivers in place, without spending an attempt.
        String why = reply.reason().isEmpty() ? "consumer backs off" : reply.reason();
        call.onError(Status.RESOURCE_EXHAUSTED.withDescription(why).asRuntimeException());
      } else {
        call.onNext(Proto.result(delivery.id(), reply));
        call.onCompleted();
      }
    }

    @Override
    public StreamObserver<ConsumerOuterClass.Delivery> deliverStream(
        StreamObserver<ConsumerOuterClass.Result> out) {
      return session(
          out,
          (ConsumerOuterClass.Delivery d) -> {
            stream.incrementAndGet();
            return List.of(d);
          },
          results -> results,
          Call.DELIVER_STREAM);
    }

    @Override
    public StreamObserver<ConsumerOuterClass.DeliveryBatch> deliverBatches(
        StreamObserver<ConsumerOuterClass.ResultBatch> out) {
      return session(
          out,
          (ConsumerOuterClass.DeliveryBatch b) -> {
            batches.incrementAndGet();
            batchDeliveries.addAndGet(b.getDeliveriesCount());
            return b.getDeliveriesList();
          },
          results -> List.of(ConsumerOuterClass.ResultBatch.newBuilder().addAllResults(results).build()),
          Call.DELIVER_BATCHES);
    }
  }

  private static java.util.concurrent.ThreadFactory daemonThreads() {
    AtomicInteger count = new AtomicInteger();
    return task -> {
      Thread thread = new Thread(task, "siding-handler-" + count.incrementAndGet());
      thread.setDaemon(true);
      return thread;
    };
  }

  /** How to build a {@link ConsumerServer}. */
  public static final class Builder {
    private final Handler handler;
    private String host = "127.0.0.1";
    private int port;
    private Duration grace = Duration.ofSeconds(10);
    private ExecutorService executor;
    private File certFile;
    private File keyFile;
    private int maxInboundMessageBytes = 64 * 1024 * 1024;
    private Registration.Builder join;

    private Builder(Handler handler) {
      this.handler = Objects.requireNonNull(handler, "handler");
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

    /** How long stop() lets deliveries in flight finish before cancelling them. Default 10 s. */
    public Builder grace(Duration grace) {
      if (grace == null || grace.isNegative()) {
        throw new IllegalArgumentException("grace must be a duration >= 0, not " + grace);
      }
      this.grace = grace;
      return this;
    }

    /**
     * Where handlers run. Default: a cached pool (a thread per delivery in flight; siding's
     * max_in_flight bounds them). The caller owns an executor given here.
     */
    public Builder executor(ExecutorService executor) {
      this.executor = Objects.requireNonNull(executor, "executor");
      return this;
    }

    /** TLS with these PEM files. */
    public Builder tls(File certFile, File keyFile) {
      this.certFile = Objects.requireNonNull(certFile, "certFile");
      this.keyFile = Objects.requireNonNull(keyFile, "keyFile");
      return this;
    }

    /** The largest message accepted. Default 64 MiB, as large as siding's channels send. */
    public Builder maxInboundMessageBytes(int bytes) {
      if (bytes < 1) {
        throw new IllegalArgumentException("maxInboundMessageBytes must be >= 1, not " + bytes);
      }
      this.maxInboundMessageBytes = bytes;
      return this;
    }

    /**
     * Join this siding route once the server listens and leave it first thing in stop(). The
     * address defaults to the listen host (this machine's name when it listens on every
     * interface) and port; the transport to grpc (grpcs with TLS).
     */
    public Builder join(Registration.Builder join) {
      this.join = Objects.requireNonNull(join, "join");
      return this;
    }

    public ConsumerServer build() {
      return new ConsumerServer(this);
    }
  }
}
