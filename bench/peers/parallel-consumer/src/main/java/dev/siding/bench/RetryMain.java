package dev.siding.bench;

import io.confluent.parallelconsumer.ParallelConsumerOptions;
import io.confluent.parallelconsumer.ParallelConsumerOptions.ProcessingOrder;
import io.confluent.parallelconsumer.ParallelStreamProcessor;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
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
 * Parallel Consumer with its own retries: each record of TOPIC is POSTed (blocking, from PC's
 * worker threads) to URL, the benchmark's simulated consumer in HTTP mode, with {@code webhook-id:
 * topic/partition/offset}, {@code siding-attempt} (PC's failed attempts + 1) and every Kafka
 * header, so the receiver records and answers it exactly as it does siding's webhooks. A non-2xx
 * answer throws, so PC retries the record after RETRY_DELAY_MS (and, in KEY order, holds the later
 * records of its key meanwhile). Exits once COUNT distinct records were answered with a 2xx.
 *
 * <p>Usage: RetryMain BOOTSTRAP TOPIC UNORDERED|KEY|PARTITION CONCURRENCY COUNT URL RETRY_DELAY_MS
 * [TIMEOUT_S]
 */
public final class RetryMain {
  public static void main(String[] args) throws InterruptedException {
    String bootstrap = args[0];
    String topic = args[1];
    ProcessingOrder order = ProcessingOrder.valueOf(args[2]);
    int concurrency = Integer.parseInt(args[3]);
    int count = Integer.parseInt(args[4]);
    URI url = URI.create(args[5]);
    long retryDelayMs = Long.parseLong(args[6]);
    long timeoutS = Long.parseLong(args.length > 7 ? args[7] : "300");

    Properties props = new Properties();
    props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    props.put(ConsumerConfig.GROUP_ID_CONFIG, "pc-retry-bench-" + UUID.randomUUID());
    props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
    props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
    props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
    props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());

    ParallelConsumerOptions<byte[], byte[]> options =
        ParallelConsumerOptions.<byte[], byte[]>builder()
            .ordering(order)
            .maxConcurrency(concurrency)
            .defaultMessageRetryDelay(Duration.ofMillis(retryDelayMs))
            .consumer(new KafkaConsumer<>(props))
            .build();

    HttpClient http =
        HttpClient.newBuilder()
            .version(HttpClient.Version.HTTP_1_1)
            .connectTimeout(Duration.ofSeconds(5))
            .build();
    Set<String> answered = ConcurrentHashMap.newKeySet();
    AtomicLong failed = new AtomicLong();
    CountDownLatch done = new CountDownLatch(count);
    long start = System.nanoTime();
    ParallelStreamProcessor<byte[], byte[]> pc =
        ParallelStreamProcessor.createEosStreamProcessor(options);
    pc.subscribe(List.of(topic));
    pc.poll(
        context -> {
          ConsumerRecord<byte[], byte[]> rec = context.getSingleConsumerRecord();
          int attempt = context.getSingleRecord().getNumberOfFailedAttempts() + 1;
          String id = rec.topic() + "/" + rec.partition() + "/" + rec.offset();
          byte[] body = rec.value() == null ? new byte[0] : rec.value();
          HttpRequest.Builder request =
              HttpRequest.newBuilder(url)
                  .timeout(Duration.ofSeconds(10))
                  .header("webhook-id", id)
                  .header("siding-attempt", Integer.toString(attempt))
                  .POST(HttpRequest.BodyPublishers.ofByteArray(body));
          for (Header header : rec.headers()) {
            request.header(header.key(), new String(header.value(), StandardCharsets.UTF_8));
          }
          int status;
          try {
            status = http.send(request.build(), HttpResponse.BodyHandlers.discarding()).statusCode();
          } catch (Exception e) {
            failed.incrementAndGet();
            throw new RuntimeException("request failed: " + e, e);
          }
          if (status / 100 != 2) {
            failed.incrementAndGet();
            throw new RuntimeException("answered " + status + ": retry");
          }
          if (answered.add(id)) {
            done.countDown();
          }
        });
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
        (end - start) / 1e9, (end - start) / 1e9, answered.size(), failed.get());
    System.out.flush();
    Runtime.getRuntime().halt(0);
  }
}
