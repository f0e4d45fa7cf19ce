import dev.siding.consumer.Call;
import dev.siding.consumer.ConsumerServer;
import dev.siding.consumer.Delivery;
import dev.siding.consumer.Reply;
import dev.siding.consumer.WebhookServer;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * The end-to-end consumer (tests/e2e): serves gRPC and/or signed HTTP webhooks with one handler,
 * answers by the record's key and writes one JSON line per delivery to --record.
 *
 * <pre>
 * java -cp 'target/siding-consumer-0.1.0.jar:target/lib/*' examples/E2eConsumer.java \
 *   --grpc 127.0.0.1:50051 --http 127.0.0.1:8080 --secret whsec_... --record out.jsonl
 *
 * key "dead"  -> dead("dead on purpose")
 * key "retry" -> retry on attempt 1, ack from attempt 2
 * any other   -> ack
 * </pre>
 *
 * A line: {"transport", "call", "id", "key", "attempt", "lane", "value_hex", "verdict"} (the
 * protocol every SDK's e2e consumer shares, docs/sdks.md; "call" is how the delivery arrived).
 * On SIGTERM it stops gracefully, prints what each server carried ("stats grpc=Stats[...]
 * http=Stats[...]") and exits 0.
 */
public class E2eConsumer {
  private static OutputStream record;

  public static void main(String[] argv) throws Exception {
    Map<String, String> args = new LinkedHashMap<>();
    for (int i = 0; i + 1 < argv.length; i += 2) {
      args.put(argv[i].replaceFirst("^--", ""), argv[i + 1]);
    }
    if (!args.containsKey("record") || !(args.containsKey("grpc") || args.containsKey("http"))) {
      System.err.println("usage: E2eConsumer [--grpc HOST:PORT] [--http HOST:PORT] [--secret S] --record FILE");
      System.exit(2);
    }
    record = new FileOutputStream(args.get("record"), true);
    ConsumerServer grpc = null;
    WebhookServer http = null;
    if (args.containsKey("grpc")) {
      String[] at = hostPort(args.get("grpc"));
      grpc = ConsumerServer.builder(handler("grpc")).host(at[0]).port(Integer.parseInt(at[1]))
          .grace(Duration.ofSeconds(5)).build().start();
    }
    if (args.containsKey("http")) {
      String[] at = hostPort(args.get("http"));
      WebhookServer.Builder web = WebhookServer.builder(handler("http")).host(at[0])
          .port(Integer.parseInt(at[1])).grace(Duration.ofSeconds(5));
      http = (args.containsKey("secret") ? web.secret(args.get("secret")) : web.unsigned()).build().start();
    }
    ConsumerServer g = grpc;
    WebhookServer h = http;
    Runtime.getRuntime().addShutdownHook(new Thread(() -> {
      StringBuilder stats = new StringBuilder("stats");
      if (g != null) {
        g.stop();
        stats.append(" grpc=").append(g.stats());
      }
      if (h != null) {
        h.stop();
        stats.append(" http=").append(h.stats());
      }
      System.out.println(stats);
      System.out.flush();
      // Stopped cleanly: exit 0 (the JVM's own exit status on SIGTERM would be 143).
      Runtime.getRuntime().halt(0);
    }));
    System.out.println("ready" + (g != null ? " grpc" : "") + (h != null ? " http" : ""));
    System.out.flush();
    Thread.currentThread().join();
  }

  private static String[] hostPort(String address) {
    int colon = address.lastIndexOf(':');
    return new String[] {address.substring(0, colon), address.substring(colon + 1)};
  }

  static Reply answer(Delivery d) {
    String key = d.key() == null ? null : new String(d.key(), StandardCharsets.UTF_8);
    if ("dead".equals(key)) return Reply.dead("dead on purpose");
    if ("retry".equals(key) && d.attempt() == 1) return Reply.retry("retry once");
    return Reply.ack();
  }

  static dev.siding.consumer.Handler handler(String transport) {
    return d -> {
      Reply reply = answer(d);
      String key = d.key() == null ? "" : new String(d.key(), StandardCharsets.UTF_8);
      String line = "{\"transport\":\"" + transport + "\",\"call\":" + quote(Call.current())
          + ",\"id\":" + quote(d.id())
          + ",\"key\":" + quote(key) + ",\"attempt\":" + d.attempt() + ",\"lane\":" + d.lane()
          + ",\"value_hex\":\"" + (d.value() == null ? "" : HexFormat.of().formatHex(d.value()))
          + "\",\"verdict\":\"" + reply.verdict().name().toLowerCase() + "\"}\n";
      write(line);
      return reply;
    };
  }

  private static synchronized void write(String line) throws IOException {
    record.write(line.getBytes(StandardCharsets.UTF_8));
    record.flush();
  }

  private static String quote(String s) {
    StringBuilder out = new StringBuilder("\"");
    for (char c : s.toCharArray()) {
      if (c == '"' || c == '\\') out.append('\\').append(c);
      else if (c < 0x20) out.append(String.format("\\u%04x", (int) c));
      else out.append(c);
    }
    return out.append('"').toString();
  }
}
