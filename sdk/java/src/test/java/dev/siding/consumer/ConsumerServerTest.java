package dev.siding.consumer;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.protobuf.ByteString;
import io.grpc.ManagedChannel;
import io.grpc.ManagedChannelBuilder;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.health.v1.HealthCheckRequest;
import io.grpc.health.v1.HealthCheckResponse;
import io.grpc.health.v1.HealthCheckResponse.ServingStatus;
import io.grpc.health.v1.HealthGrpc;
import io.grpc.stub.StreamObserver;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import siding.v1.ConsumerGrpc;
import siding.v1.ConsumerOuterClass.Delivery;
import siding.v1.ConsumerOuterClass.DeliveryBatch;
import siding.v1.ConsumerOuterClass.Header;
import siding.v1.ConsumerOuterClass.Result;
import siding.v1.ConsumerOuterClass.ResultBatch;
import siding.v1.ConsumerOuterClass.Verdict;

class ConsumerServerTest {
  private final List<AutoCloseable> open = new ArrayList<>();

  @AfterEach
  void close() throws Exception {
    Collections.reverse(open);
    for (AutoCloseable c : open) {
      c.close();
    }
  }

  /** Decides by the value's text. */
  static Reply byValue(dev.siding.consumer.Delivery d) throws Exception {
    String text = d.value() == null ? "<null>" : new String(d.value(), StandardCharsets.ISO_8859_1);
    if (text.startsWith("dead")) return Reply.dead("bad record");
    if (text.startsWith("retry")) return Reply.retry(Duration.ofMillis(2500), "busy");
    if (text.startsWith("backoff")) return Reply.backoff(Duration.ofSeconds(3), "db down");
    if (text.startsWith("throw")) throw new IllegalStateException("boom");
    if (text.startsWith("pill")) throw new DeadLetter("poison");
    if (text.startsWith("null")) return null;
    if (text.startsWith("output")) {
      return Reply.ack(List.of(new Output("out", "k".getBytes(StandardCharsets.UTF_8), new byte[] {1, 2},
          List.of(dev.siding.consumer.Header.of("h", "x")))));
    }
    if (text.startsWith("slow")) Thread.sleep(Long.parseLong(text.substring(4)));
    return Reply.ack();
  }

  private ConsumerServer start(Handler handler) throws IOException {
    ConsumerServer server = ConsumerServer.builder(handler).grace(Duration.ofSeconds(1)).build().start();
    open.add(server);
    return server;
  }

  private ManagedChannel channel(ConsumerServer server) {
    ManagedChannel channel = ManagedChannelBuilder.forTarget(server.target()).usePlaintext().build();
    open.add(() -> channel.shutdownNow().awaitTermination(5, TimeUnit.SECONDS));
    return channel;
  }

  static Delivery delivery(long n, String value) {
    Delivery.Builder d = Delivery.newBuilder().setId("orders/0/" + n).setTopic("orders").setOffset(n)
        .setTimestampMs(1_700_000_000_000L).setAttempt(1);
    if (value != null) d.setValue(ByteString.copyFrom(value, StandardCharsets.ISO_8859_1));
    return d.build();
  }

  @Test
  void deliverAnswersEachVerdict() throws Exception {
    var stub = ConsumerGrpc.newBlockingStub(channel(start(ConsumerServerTest::byValue)))
        .withDeadlineAfter(10, TimeUnit.SECONDS);
    record Case(String value, Verdict verdict, String reason, Double after) {}
    for (Case c : List.of(
        new Case("ok", Verdict.VERDICT_ACK, "", null),
        new Case("dead", Verdict.VERDICT_DEAD, "bad record", null),
        new Case("retry", Verdict.VERDICT_RETRY, "busy", 2.5),
        new Case("throw", Verdict.VERDICT_RETRY, "boom", null),
        new Case("pill", Verdict.VERDICT_DEAD, "poison", null),
        new Case("null", Verdict.VERDICT_RETRY, "handler returned null, not a Reply", null))) {
      Result r = stub.deliver(delivery(7, c.value()));
      assertEquals("orders/0/7", r.getDeliveryId(), c.value());
      assertEquals(c.verdict(), r.getVerdict(), c.value());
      assertEquals(c.reason(), r.getReason(), c.value());
      assertEquals(c.after() != null, r.hasRetryAfterSeconds(), c.value());
      if (c.after() != null) assertEquals(c.after(), r.getRetryAfterSeconds());
    }
    var backoff = assertThrows(StatusRuntimeException.class, () -> stub.deliver(delivery(1, "backoff")));
    assertEquals(Status.Code.RESOURCE_EXHAUSTED, backoff.getStatus().getCode());
    assertEquals("db down", backoff.getStatus().getDescription());
    Result output = stub.deliver(delivery(1, "output"));
    assertEquals(1, output.getOutputsCount());
    assertEquals("out", output.getOutputs(0).getTopic());
    assertEquals(ByteString.copyFrom(new byte[] {1, 2}), output.getOutputs(0).getValue());
    assertEquals("x", output.getOutputs(0).getHeaders(0).getValue().toStringUtf8());
  }

  @Test
  void theHandlerSeesEveryFieldBytesExactNullApartFromEmpty() throws Exception {
    List<dev.siding.consumer.Delivery> seen = Collections.synchronizedList(new ArrayList<>());
    var stub = ConsumerGrpc.newBlockingStub(channel(start(d -> {
      seen.add(d);
      return Reply.ack();
    })));
    byte[] all = new byte[256];
    for (int i = 0; i < 256; i++) all[i] = (byte) i;
    stub.deliver(Delivery.newBuilder().setId("t/3/9007199254740993").setTopic("t").setPartition(3)
        .setOffset(9007199254740993L).setKey(ByteString.EMPTY).setValue(ByteString.copyFrom(all))
        .addHeaders(Header.newBuilder().setKey("a").setValue(ByteString.copyFrom(new byte[] {0, (byte) 255})))
        .addHeaders(Header.newBuilder().setKey("a").setValue(ByteString.copyFromUtf8("second")))
        .setTimestampMs(1_700_000_000_000L).setAttempt(4).setLane(2).build());
    stub.deliver(Delivery.newBuilder().setId("t/0/1").setTopic("t").setOffset(1).build());
    var full = seen.get(0);
    assertEquals(9007199254740993L, full.offset());
    assertEquals(0, full.key().length);
    assertTrue(java.util.Arrays.equals(all, full.value()));
    assertEquals(List.of("a", "a"), full.headers().stream().map(dev.siding.consumer.Header::key).toList());
    assertTrue(java.util.Arrays.equals(new byte[] {0, (byte) 255}, full.headers().get(0).value()));
    assertEquals(List.of(3, 1_700_000_000_000L, 4, 2), List.of(full.partition(), full.timestampMs(), full.attempt(), full.lane()));
    assertEquals(null, seen.get(1).key());
    assertEquals(null, seen.get(1).value());
  }

  @Test
  void takesA6MibRecordPastGrpcsOwnDefaultLimitOf4Mib() throws Exception {
    List<Integer> sizes = Collections.synchronizedList(new ArrayList<>());
    var stub = ConsumerGrpc.newBlockingStub(channel(start(d -> {
      sizes.add(d.value().length);
      return Reply.ack();
    })));
    byte[] big = new byte[6 * 1024 * 1024];
    var r = stub.deliver(Delivery.newBuilder().setId("t/0/1").setTopic("t").setValue(ByteString.copyFrom(big)).build());
    assertEquals(Verdict.VERDICT_ACK, r.getVerdict());
    assertEquals(List.of(big.length), sizes);
  }

  /** Collects what the server sends until it ends the call. */
  static final class Collector<T> implements StreamObserver<T> {
    final List<T> received = Collections.synchronizedList(new ArrayList<>());
    final CompletableFuture<List<T>> ended = new CompletableFuture<>();
    final CountDownLatch first;

    Collector(int firstCount) {
      first = new CountDownLatch(firstCount);
    }

    @Override public void onNext(T value) {
      received.add(value);
      first.countDown();
    }

    @Override public void onError(Throwable t) {
      ended.completeExceptionally(t);
    }

    @Override public void onCompleted() {
      ended.complete(received);
    }
  }

  @Test
  void deliverStreamAnswersAsEachFinishesOutOfOrder() throws Exception {
    ConsumerServer server = start(ConsumerServerTest::byValue);
    var results = new Collector<Result>(2);
    var call = ConsumerGrpc.newStub(channel(server)).withDeadlineAfter(20, TimeUnit.SECONDS).deliverStream(results);
    call.onNext(delivery(1, "slow400"));
    call.onNext(delivery(2, "dead"));
    call.onNext(delivery(3, "backoff"));
    assertTrue(results.first.await(10, TimeUnit.SECONDS));
    assertEquals(
        List.of("orders/0/2", "orders/0/3"),
        results.received.stream().map(Result::getDeliveryId).sorted().toList());
    call.onCompleted();
    List<Result> all = results.ended.get(10, TimeUnit.SECONDS);
    assertEquals(3, all.size());
    assertEquals("orders/0/1", all.get(2).getDeliveryId());
    Map<String, String> byId = new TreeMap<>();
    for (Result r : all) byId.put(r.getDeliveryId(), r.getVerdict() + " " + r.getReason() + " " + r.getRetryAfterSeconds());
    // A stream cannot back off for one delivery: RETRY with the delay.
    assertEquals(Map.of(
        "orders/0/1", "VERDICT_ACK  0.0",
        "orders/0/2", "VERDICT_DEAD bad record 0.0",
        "orders/0/3", "VERDICT_RETRY db down 3.0"), byId);
    assertEquals(new ConsumerServer.Stats(0, 3, 0, 0), server.stats());
  }

  @Test
  void deliverBatchesAnswersEveryDeliveryOncePerItem() throws Exception {
    ConsumerServer server = start(ConsumerServerTest::byValue);
    var frames = new Collector<ResultBatch>(1);
    var call = ConsumerGrpc.newStub(channel(server)).withDeadlineAfter(20, TimeUnit.SECONDS).deliverBatches(frames);
    List<String> values = List.of("ok", "dead", "retry", "slow300", "throw", "ok", "pill");
    DeliveryBatch.Builder first = DeliveryBatch.newBuilder();
    for (int n = 0; n < values.size(); n++) first.addDeliveries(delivery(n, values.get(n)));
    call.onNext(first.build());
    call.onNext(DeliveryBatch.newBuilder().addDeliveries(delivery(100, "ok")).addDeliveries(delivery(101, "dead")).build());
    call.onCompleted();
    List<ResultBatch> got = frames.ended.get(10, TimeUnit.SECONDS);
    Map<String, String> byId = new TreeMap<>();
    int count = 0;
    for (ResultBatch frame : got) {
      for (Result r : frame.getResultsList()) {
        byId.put(r.getDeliveryId(), r.getVerdict() + " " + r.getReason());
        count++;
      }
    }
    assertEquals(9, count, "exactly one result per delivery");
    assertEquals(Map.of(
        "orders/0/0", "VERDICT_ACK ", "orders/0/1", "VERDICT_DEAD bad record", "orders/0/2", "VERDICT_RETRY busy",
        "orders/0/3", "VERDICT_ACK ", "orders/0/4", "VERDICT_RETRY boom", "orders/0/5", "VERDICT_ACK ",
        "orders/0/6", "VERDICT_DEAD poison", "orders/0/100", "VERDICT_ACK ", "orders/0/101", "VERDICT_DEAD bad record"), byId);
    ResultBatch last = got.get(got.size() - 1);
    assertEquals("orders/0/3", last.getResults(last.getResultsCount() - 1).getDeliveryId());
    assertEquals(new ConsumerServer.Stats(0, 0, 2, 9), server.stats());
  }

  @Test
  void resultsFinishedBeforeTheNextWriteShareAFrame() throws Exception {
    // One handler thread, held until all five deliveries are queued behind it: they then finish
    // before the first flush runs (it is queued after them), so all five go back in one frame.
    // With the default pool this happens when the machine is fast; here it is certain.
    java.util.concurrent.ThreadPoolExecutor one =
        new java.util.concurrent.ThreadPoolExecutor(
            1, 1, 0, TimeUnit.SECONDS, new java.util.concurrent.LinkedBlockingQueue<>());
    open.add(one::shutdownNow);
    ConsumerServer server =
        ConsumerServer.builder(ConsumerServerTest::byValue).executor(one).grace(Duration.ofSeconds(1)).build().start();
    open.add(server);
    CountDownLatch gate = new CountDownLatch(1);
    one.execute(() -> {
      try {
        gate.await();
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
    });
    var frames = new Collector<ResultBatch>(1);
    var call = ConsumerGrpc.newStub(channel(server)).withDeadlineAfter(20, TimeUnit.SECONDS).deliverBatches(frames);
    DeliveryBatch.Builder batch = DeliveryBatch.newBuilder();
    for (int n = 0; n < 5; n++) batch.addDeliveries(delivery(n, n == 2 ? "dead" : "ok"));
    call.onNext(batch.build());
    call.onCompleted();
    long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
    while (one.getQueue().size() < 5 && System.nanoTime() < until) Thread.sleep(5);
    assertEquals(5, one.getQueue().size(), "the five deliveries are queued behind the gate");
    gate.countDown();
    List<ResultBatch> got = frames.ended.get(10, TimeUnit.SECONDS);
    assertEquals(1, got.size(), "one frame for results that finished together");
    assertEquals(
        List.of("orders/0/0", "orders/0/1", "orders/0/2", "orders/0/3", "orders/0/4"),
        got.get(0).getResultsList().stream().map(Result::getDeliveryId).toList());
    assertEquals(Verdict.VERDICT_DEAD, got.get(0).getResults(2).getVerdict());
  }

  @Test
  void theHandlerIsToldTheCallItsDeliveryCameBy() throws Exception {
    ManagedChannel channel = channel(start(d -> Reply.dead(Call.current())));
    List<String> calls = new ArrayList<>();
    calls.add(ConsumerGrpc.newBlockingStub(channel).deliver(delivery(1, "x")).getReason());
    var streamed = new Collector<Result>(1);
    var stream = ConsumerGrpc.newStub(channel).deliverStream(streamed);
    stream.onNext(delivery(2, "x"));
    stream.onCompleted();
    streamed.ended.get(10, TimeUnit.SECONDS).forEach(r -> calls.add(r.getReason()));
    var frames = new Collector<ResultBatch>(1);
    var batches = ConsumerGrpc.newStub(channel).deliverBatches(frames);
    batches.onNext(DeliveryBatch.newBuilder().addDeliveries(delivery(3, "x")).addDeliveries(delivery(4, "x")).build());
    batches.onCompleted();
    frames.ended.get(10, TimeUnit.SECONDS).forEach(f -> f.getResultsList().forEach(r -> calls.add(r.getReason())));
    assertEquals(List.of("Deliver", "DeliverStream", "DeliverBatches", "DeliverBatches"), calls);
    assertEquals("", Call.current(), "outside a handler");
  }

  @Test
  void healthIsServingThenWatchersHearNotServingAndInFlightDeliveriesFinish() throws Exception {
    CountDownLatch bothStarted = new CountDownLatch(2);
    CountDownLatch release = new CountDownLatch(1);
    ConsumerServer server = ConsumerServer.builder(d -> {
      if (new String(d.value(), StandardCharsets.UTF_8).equals("hold")) {
        bothStarted.countDown();
        release.await();
      }
      return Reply.ack();
    }).grace(Duration.ofSeconds(10)).build().start();
    open.add(server);
    ManagedChannel channel = channel(server);
    var health = HealthGrpc.newBlockingStub(channel);
    assertEquals(ServingStatus.SERVING, health.check(HealthCheckRequest.newBuilder().build()).getStatus());
    assertEquals(ServingStatus.SERVING,
        health.check(HealthCheckRequest.newBuilder().setService("siding.v1.Consumer").build()).getStatus());
    var unknown = assertThrows(StatusRuntimeException.class,
        () -> health.check(HealthCheckRequest.newBuilder().setService("nope").build()));
    assertEquals(Status.Code.NOT_FOUND, unknown.getStatus().getCode());
    var watch = new Collector<HealthCheckResponse>(1);
    HealthGrpc.newStub(channel).watch(HealthCheckRequest.newBuilder().setService("siding.v1.Consumer").build(), watch);
    assertTrue(watch.first.await(10, TimeUnit.SECONDS));

    var results = new Collector<Result>(1);
    var stream = ConsumerGrpc.newStub(channel).deliverStream(results);
    stream.onNext(delivery(1, "hold"));
    var unary = ConsumerGrpc.newFutureStub(channel).deliver(delivery(2, "hold"));
    assertTrue(bothStarted.await(10, TimeUnit.SECONDS));
    var stopping = CompletableFuture.runAsync(server::stop);
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
    while (watch.received.size() < 2 && System.nanoTime() < deadline) Thread.sleep(20);
    assertEquals(List.of(ServingStatus.SERVING, ServingStatus.NOT_SERVING),
        watch.received.stream().map(HealthCheckResponse::getStatus).toList());
    assertFalse(stopping.isDone());
    release.countDown();
    assertEquals(Verdict.VERDICT_ACK, unary.get(10, TimeUnit.SECONDS).getVerdict());
    List<Result> streamed = results.ended.get(10, TimeUnit.SECONDS);
    assertEquals(List.of("orders/0/1"), streamed.stream().map(Result::getDeliveryId).toList());
    stopping.get(15, TimeUnit.SECONDS);
  }

  @Test
  void whatIsStillRunningAfterTheGracePeriodIsCancelled() throws Exception {
    CountDownLatch started = new CountDownLatch(1);
    ConsumerServer server = start(d -> {
      started.countDown();
      Thread.sleep(60_000);
      return Reply.ack();
    });
    var call = ConsumerGrpc.newFutureStub(channel(server)).deliver(delivery(1, "x"));
    assertTrue(started.await(10, TimeUnit.SECONDS));
    long began = System.nanoTime();
    server.stop(Duration.ofMillis(300));
    long took = System.nanoTime() - began;
    assertTrue(took < TimeUnit.SECONDS.toNanos(3), "stop took " + took / 1_000_000 + " ms");
    var error = assertThrows(java.util.concurrent.ExecutionException.class, () -> call.get(10, TimeUnit.SECONDS));
    assertTrue(error.getCause() instanceof StatusRuntimeException, error.toString());
  }

  @Test
  void aPortAlreadyTakenIsRefusedNamingIt() throws Exception {
    ConsumerServer first = start(ConsumerServerTest::byValue);
    var second = ConsumerServer.builder(ConsumerServerTest::byValue).port(first.port()).build();
    var error = assertThrows(IOException.class, second::start);
    assertTrue(error.getMessage().startsWith("cannot listen on 127.0.0.1:" + first.port()), error.getMessage());
  }
}
