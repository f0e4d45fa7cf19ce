import dev.siding.consumer.ConsumerServer;
import dev.siding.consumer.Delivery;
import dev.siding.consumer.Reply;
import dev.siding.consumer.WebhookServer;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.util.Base64;

/**
 * The consumer tests/e2e runs against a real siding: gRPC and HTTP webhooks from one handler.
 *
 * <pre>
 * GRPC_PORT=0 HTTP_PORT=0 WEBHOOK_SECRET=whsec_... RECORD=out.jsonl \
 *   java -cp 'target/siding-consumer-0.1.0.jar:target/lib/*' examples/E2eConsumer.java
 * </pre>
 *
 * By key: "retry" is retried once (then acked from retry lane 1), "dead" is dead-lettered, any
 * other key is acked. Every delivery is appended to RECORD as one JSON line. Prints "ready
 * grpc=HOST:PORT http=URL" once serving; on SIGTERM it stops gracefully and prints what each
 * transport carried ("stats grpc=... http=...").
 */
public class E2eConsumer {
  private static OutputStream record;

  public static void main(String[] args) throws Exception {
    String path = System.getenv().getOrDefault("RECORD", "/dev/null");
    record = new FileOutputStream(path, true);
    ConsumerServer grpc = ConsumerServer.builder(E2eConsumer::handle)
        .port(Integer.parseInt(System.getenv().getOrDefault("GRPC_PORT", "0")))
        .build()
        .start();
    String secret = System.getenv("WEBHOOK_SECRET");
    WebhookServer.Builder web = WebhookServer.builder(E2eConsumer::handle)
        .port(Integer.parseInt(System.getenv().getOrDefault("HTTP_PORT", "0")));
    WebhookServer http = (secret == null ? web.unsigned() : web.secret(secret)).build().start();
    Runtime.getRuntime().addShutdownHook(new Thread(() -> {
      grpc.stop();
      http.stop();
      System.out.println("stats grpc=" + grpc.stats() + " http=" + http.stats());
      System.out.flush();
    }));
    System.out.println("ready grpc=" + grpc.target() + " http=" + http.url());
    System.out.flush();
    grpc.awaitTermination();
  }

  static Reply handle(Delivery d) throws IOException {
    String key = d.key() == null ? null : new String(d.key(), StandardCharsets.UTF_8);
    String line = "{\"id\":" + quote(d.id()) + ",\"topic\":" + quote(d.topic())
        + ",\"offset\":" + d.offset() + ",\"key\":" + quote(key)
        + ",\"value_base64\":" + quote(d.value() == null ? null : Base64.getEncoder().encodeToString(d.value()))
        + ",\"attempt\":" + d.attempt() + ",\"lane\":" + d.lane() + "}\n";
    synchronized (E2eConsumer.class) {
      record.write(line.getBytes(StandardCharsets.UTF_8));
      record.flush();
    }
    if ("dead".equals(key)) return Reply.dead("dead on purpose");
    if ("retry".equals(key) && d.attempt() == 1) return Reply.retry("once more");
    return Reply.ack();
  }

  private static String quote(String s) {
    if (s == null) return "null";
    StringBuilder out = new StringBuilder("\"");
    for (char c : s.toCharArray()) {
      if (c == '"' || c == '\\') out.append('\\').append(c);
      else if (c < 0x20) out.append(String.format("\\u%04x", (int) c));
      else out.append(c);
    }
    return out.append('"').toString();
  }
}
