package dev.siding.bench.share;

import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ShareGroupDescription;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.GroupIdNotFoundException;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * Kafka's own share groups (KIP-932) as a push proxy: CONSUMERS threads, each with its own
 * {@code KafkaShareConsumer} in share group GROUP, poll TOPIC (at most MAX_POLL_RECORDS records a
 * poll: {@code share.acquire.mode=record_limit}), POST every polled record to URL at once (the
 * benchmark's simulated consumer in HTTP mode, with {@code webhook-id: topic/partition/offset} and
 * every Kafka header, as siding's webhooks), wait for all the answers, then acknowledge each
 * explicitly: ACCEPT on a 2xx, RELEASE otherwise (the broker hands a released record out again and
 * archives it after {@code group.share.delivery.count.limit} deliveries). The acknowledgements
 * travel with the next poll. Before any consumer joins, the group's {@code
 * share.auto.offset.reset} is set to {@code earliest} so records already in the topic are read.
 *
 * <p>Runs until stopped. Prints one JSON line once every consumer has an assignment (a partition of
 * TOPIC to fetch from), and one with its counts when the JVM stops (SIGTERM).
 *
 * <p>Usage: ShareMain BOOTSTRAP TOPIC GROUP URL CONSUMERS MAX_POLL_RECORDS
 */
public final class ShareMain {
  private static final Duration POLL = Duration.ofMillis(500);
  private static final Duration REQUEST_TIMEOUT = Duration.ofSeconds(30);

  private static final AtomicLong ACCEPTED = new AtomicLong();
  private static final AtomicLong RELEASED = new AtomicLong();
  private static final AtomicLong POLLS = new AtomicLong();

  private ShareMain() {}

  public static void main(String[] args) {
    try {
      run(args);
    } catch (Exception exc) {
      exc.printStackTrace();
      fail(exc.toString());
    }
  }

  private static void run(String[] args) throws Exception {
    if (args.length != 6) {
      fail("usage: ShareMain BOOTSTRAP TOPIC GROUP URL CONSUMERS MAX_POLL_RECORDS");
    }
    String bootstrap = args[0];
    String topic = args[1];
    String group = args[2];
    URI url = URI.create(args[3]);
    int consumers = Integer.parseInt(args[4]);
    int maxPollRecords = Integer.parseInt(args[5]);
    if (consumers < 1 || maxPollRecords < 1) {
      fail("CONSUMERS and MAX_POLL_RECORDS must be at least 1");
    }
    Admin admin = Admin.create(Map.of(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap));
    readFromEarliest(admin, group);

    HttpClient http =
        HttpClient.newBuilder()
            .version(HttpClient.Version.HTTP_1_1)
            .connectTimeout(Duration.ofSeconds(5))
            .build();
    Properties props = new Properties();
    props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    props.put(ConsumerConfig.GROUP_ID_CONFIG, group);
    props.put(ConsumerConfig.SHARE_ACKNOWLEDGEMENT_MODE_CONFIG, "explicit");
    props.put(ConsumerConfig.SHARE_ACQUIRE_MODE_CONFIG, "record_limit");
    props.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, Integer.toString(maxPollRecords));
    String fetchWait = System.getenv("SIDING_BENCH_SHARE_FETCH_MAX_WAIT_MS");
    if (fetchWait != null && !fetchWait.isEmpty()) {
      props.put(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, fetchWait);
    }
    props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
    props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());

    Runtime.getRuntime()
        .addShutdownHook(
            new Thread(
                () -> {
                  System.out.printf(
                      "{\"accepted\": %d, \"released\": %d, \"polls\": %d}%n",
                      ACCEPTED.get(), RELEASED.get(), POLLS.get());
                  System.out.flush();
                }));
    List<Thread> threads = new ArrayList<>();
    for (int i = 0; i < consumers; i++) {
      Properties own = new Properties();
      own.putAll(props);
      own.put(ConsumerConfig.CLIENT_ID_CONFIG, group + "-" + i);
      Thread thread = new Thread(() -> consume(own, topic, http, url), "share-consumer-" + i);
      thread.start();
      threads.add(thread);
    }
    awaitAssigned(admin, group, consumers);
    admin.close();
    System.out.printf(
        "{\"ready\": true, \"consumers\": %d, \"max_poll_records\": %d}%n",
        consumers, maxPollRecords);
    System.out.flush();
    for (Thread thread : threads) {
      thread.join();
    }
  }

  /** One consumer's loop: poll, push the records at once, acknowledge each by its answer. */
  private static void consume(Properties props, String topic, HttpClient http, URI url) {
    try (KafkaShareConsumer<byte[], byte[]> consumer = new KafkaShareConsumer<>(props)) {
      consumer.subscribe(List.of(topic));
      while (true) {
        ConsumerRecords<byte[], byte[]> records = consumer.poll(POLL);
        if (records.isEmpty()) {
          continue;
        }
        POLLS.incrementAndGet();
        List<ConsumerRecord<byte[], byte[]>> polled = new ArrayList<>(records.count());
        List<CompletableFuture<Boolean>> answers = new ArrayList<>(records.count());
        for (ConsumerRecord<byte[], byte[]> record : records) {
          polled.add(record);
          answers.add(push(http, url, record));
        }
        for (int i = 0; i < polled.size(); i++) {
          boolean ok = answers.get(i).join();
          consumer.acknowledge(polled.get(i), ok ? AcknowledgeType.ACCEPT : AcknowledgeType.RELEASE);
          (ok ? ACCEPTED : RELEASED).incrementAndGet();
        }
      }
    } catch (RuntimeException exc) {
      System.err.println(Thread.currentThread().getName() + " stopped: " + exc);
      System.out.printf("{\"error\": \"%s\"}%n", exc.toString().replace('"', '\''));
      System.out.flush();
      Runtime.getRuntime().halt(2);
    }
  }

  /** POST one record; completes with true on a 2xx answer, false on any other or no answer. */
  private static CompletableFuture<Boolean> push(
      HttpClient http, URI url, ConsumerRecord<byte[], byte[]> record) {
    String id = record.topic() + "/" + record.partition() + "/" + record.offset();
    byte[] body = record.value() == null ? new byte[0] : record.value();
    HttpRequest.Builder request =
        HttpRequest.newBuilder(url)
            .timeout(REQUEST_TIMEOUT)
            .header("webhook-id", id)
            .POST(HttpRequest.BodyPublishers.ofByteArray(body));
    for (Header header : record.headers()) {
      byte[] value = header.value() == null ? new byte[0] : header.value();
      request.header(header.key(), new String(value, StandardCharsets.UTF_8));
    }
    return http.sendAsync(request.build(), HttpResponse.BodyHandlers.discarding())
        .handle((response, error) -> error == null && response.statusCode() / 100 == 2);
  }

  /** A new share group starts at the latest offset; the benchmark's records are already there. */
  private static void readFromEarliest(Admin admin, String group) throws Exception {
    ConfigResource resource = new ConfigResource(ConfigResource.Type.GROUP, group);
    AlterConfigOp earliest =
        new AlterConfigOp(
            new ConfigEntry("share.auto.offset.reset", "earliest"), AlterConfigOp.OpType.SET);
    admin.incrementalAlterConfigs(Map.of(resource, List.of(earliest))).all().get();
  }

  /** Until the group has all its members, each with the group's latest assignment. */
  private static void awaitAssigned(Admin admin, String group, int consumers) throws Exception {
    int polls = 0;
    while (true) {
      ShareGroupDescription described;
      try {
        described = admin.describeShareGroups(List.of(group)).describedGroups().get(group).get();
      } catch (ExecutionException exc) {
        if (!(exc.getCause() instanceof GroupIdNotFoundException)) {
          throw exc;
        }
        Thread.sleep(100); // no consumer has joined yet
        continue;
      }
      int epoch = described.targetAssignmentEpoch();
      long assigned =
          described.members().stream()
              .filter(m -> m.memberEpoch() == epoch)
              .filter(m -> !m.assignment().topicPartitions().isEmpty())
              .count();
      if (described.members().size() == consumers && assigned == consumers) {
        return;
      }
      if (++polls % 50 == 0) {
        System.err.printf(
            "waiting for the group: %d of %d members, %d with the assignment of epoch %d (%s)%n",
            described.members().size(), consumers, assigned, epoch, described.members().stream().map(m -> m.memberEpoch() + ":" + m.assignment().topicPartitions()).toList());
      }
      Thread.sleep(100);
    }
  }

  private static void fail(String message) {
    System.out.printf("{\"error\": \"%s\"}%n", message.replace('"', '\''));
    System.out.flush();
    Runtime.getRuntime().halt(2);
  }
}
