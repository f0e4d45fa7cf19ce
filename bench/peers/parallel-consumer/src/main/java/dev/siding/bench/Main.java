package dev.siding.bench;

import io.confluent.parallelconsumer.ParallelConsumerOptions;
import io.confluent.parallelconsumer.ParallelConsumerOptions.ProcessingOrder;
import io.confluent.parallelconsumer.ParallelStreamProcessor;
import java.util.List;
import java.util.Properties;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.LockSupport;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * Consumes COUNT records of TOPIC with Confluent Parallel Consumer; each record "processes" by
 * sleeping uniform 0..MAX_MS. Prints one JSON line: seconds from the first record handed to the
 * function until the last one is done (the span bench/ computes for siding), and the total
 * including the group join.
 *
 * <p>Usage: Main BOOTSTRAP TOPIC UNORDERED|KEY|PARTITION CONCURRENCY COUNT [MAX_MS] [TIMEOUT_S]
 */
public final class Main {
  public static void main(String[] args) throws InterruptedException {
    String bootstrap = args[0];
    String topic = args[1];
    ProcessingOrder order = ProcessingOrder.valueOf(args[2]);
    int concurrency = Integer.parseInt(args[3]);
    int count = Integer.parseInt(args[4]);
    long maxNanos = TimeUnit.MICROSECONDS.toNanos((long) (1000 * Double.parseDouble(args.length > 5 ? args[5] : "5")));
    long timeoutS = Long.parseLong(args.length > 6 ? args[6] : "300");

    Properties props = new Properties();
    props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    props.put(ConsumerConfig.GROUP_ID_CONFIG, "pc-bench-" + UUID.randomUUID());
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

    Set<Long> seen = ConcurrentHashMap.newKeySet();
    AtomicLong first = new AtomicLong(Long.MAX_VALUE);
    AtomicLong last = new AtomicLong(Long.MIN_VALUE);
    CountDownLatch done = new CountDownLatch(count);
    long start = System.nanoTime();
    ParallelStreamProcessor<byte[], byte[]> pc = ParallelStreamProcessor.createEosStreamProcessor(options);
    pc.subscribe(List.of(topic));
    pc.poll(context -> {
      long received = System.nanoTime();
      first.accumulateAndGet(received, Math::min);
      long until = received + ThreadLocalRandom.current().nextLong(maxNanos + 1);
      for (long left = until - System.nanoTime(); left > 0; left = until - System.nanoTime()) {
        LockSupport.parkNanos(left);
      }
      last.accumulateAndGet(System.nanoTime(), Math::max);
      if (seen.add(context.offset())) {
        done.countDown();
      }
    });
    boolean finished = done.await(timeoutS, TimeUnit.SECONDS);
    long end = System.nanoTime();
    pc.closeDontDrainFirst();
    if (!finished) {
      System.out.printf("{\"error\": \"only %d of %d records processed in %ds\"}%n", seen.size(), count, timeoutS);
      System.exit(2);
    }
    System.out.printf(
        "{\"seconds\": %.4f, \"total_seconds\": %.4f, \"processed\": %d}%n",
        (last.get() - first.get()) / 1e9, (end - start) / 1e9, seen.size());
    System.exit(0);
  }
}
