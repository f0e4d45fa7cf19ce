package dev.siding.bench;

import io.confluent.parallelconsumer.ParallelConsumerOptions;
import io.confluent.parallelconsumer.ParallelConsumerOptions.ProcessingOrder;
import io.confluent.parallelconsumer.vertx.VertxParallelStreamProcessor;
import io.vertx.core.Future;
import io.vertx.core.buffer.Buffer;
import io.vertx.ext.web.client.HttpRequest;
import io.vertx.ext.web.client.HttpResponse;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Properties;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * Parallel Consumer over the network: its Vert.x module POSTs each record of TOPIC to URL (the
 * benchmark's simulated consumer in HTTP mode), at most CONCURRENCY at once. The request carries
 * {@code webhook-id: topic/partition/offset} and every Kafka header, so the receiver records it
 * exactly as it records siding's webhooks. Exits once COUNT distinct records were answered with a
 * 2xx, printing one JSON line: seconds from the first request sent to the last answer, and the
 * total including the group join.
 *
 * <p>Usage: VertxMain BOOTSTRAP TOPIC UNORDERED|KEY|PARTITION CONCURRENCY COUNT URL [TIMEOUT_S]
 */
public final class VertxMain {
  public static void main(String[] args) throws InterruptedException {
    String bootstrap = args[0];
    String topic = args[1];
    ProcessingOrder order = ProcessingOrder.valueOf(args[2]);
    int concurrency = Integer.parseInt(args[3]);
    int count = Integer.parseInt(args[4]);
    URI url = URI.create(args[5]);
    long timeoutS = Long.parseLong(args.length > 6 ? args[6] : "300");
    String host = url.getHost();
    int port = url.getPort();
    String path = url.getRawPath().isEmpty() ? "/" : url.getRawPath();

    Properties props = new Properties();
    props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    props.put(ConsumerConfig.GROUP_ID_CONFIG, "pc-vertx-bench-" + UUID.randomUUID());
    props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
    props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
    props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
    props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());

    ParallelConsumerOptions<byte[], byte[]> options =
        ParallelConsumerOptions.<byte[], byte[]>builder()
            .ordering(order)
            .maxConcurrency(concurrency)
            .consumer(new KafkaConsumer<>(props))
            .build();

    Set<String> answered = ConcurrentHashMap.newKeySet();
    AtomicLong first = new AtomicLong(Long.MAX_VALUE);
    AtomicLong last = new AtomicLong(Long.MIN_VALUE);
    AtomicLong failed = new AtomicLong();
    CountDownLatch done = new CountDownLatch(count);
    long start = System.nanoTime();
    // The processor sizes its Vert.x web client's connection pool to maxConcurrency.
    VertxParallelStreamProcessor<byte[], byte[]> pc =
        VertxParallelStreamProcessor.createEosStreamProcessor(options);
    pc.subscribe(List.of(topic));
    pc.vertxHttpWebClient(
        (client, context) -> {
          ConsumerRecord<byte[], byte[]> rec = context.getSingleConsumerRecord();
          String id = rec.topic() + "/" + rec.partition() + "/" + rec.offset();
          HttpRequest<Buffer> request = client.post(port, host, path).putHeader("webhook-id", id);
          for (Header header : rec.headers()) {
            request.putHeader(header.key(), new String(header.value(), StandardCharsets.UTF_8));
          }
          first.accumulateAndGet(System.nanoTime(), Math::min);
          byte[] body = rec.value() == null ? new byte[0] : rec.value();
          Future<HttpResponse<Buffer>> answer = request.sendBuffer(Buffer.buffer(body));
          answer.onComplete(
              result -> {
                last.accumulateAndGet(System.nanoTime(), Math::max);
                boolean ok = result.succeeded() && result.result().statusCode() / 100 == 2;
                if (!ok) {
                  failed.incrementAndGet();
                } else if (answered.add(id)) {
                  done.countDown();
                }
              });
          return answer;
        },
        sent -> {});
    boolean finished = done.await(timeoutS, TimeUnit.SECONDS);
    long end = System.nanoTime();
    if (!finished) {
      System.out.printf(
          "{\"error\": \"only %d of %d records answered in %ds (%d failed requests)\"}%n",
          answered.size(), count, timeoutS, failed.get());
      System.out.flush();
      Runtime.getRuntime().halt(2);
    }
    System.out.printf(
        "{\"seconds\": %.4f, \"total_seconds\": %.4f, \"processed\": %d, \"failed_requests\": %d}%n",
        (last.get() - first.get()) / 1e9, (end - start) / 1e9, answered.size(), failed.get());
    System.out.flush();
    // Closing Vert.x and the consumer can take seconds; the answer is printed, so stop here.
    Runtime.getRuntime().halt(0);
  }
}
