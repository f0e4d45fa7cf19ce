import dev.siding.consumer.ConsumerServer;
import dev.siding.consumer.Reply;
import java.time.Duration;

public class Hello {
  public static void main(String[] args) throws Exception {
    ConsumerServer.serve(d -> {
      if (d.value() == null) return Reply.ack();                             // a tombstone
      if (d.value().length == 0 || d.value()[0] != '{') return Reply.dead("not JSON"); // to the DLQ
      if (!charge(d.id(), d.value())) return Reply.retry(Duration.ofSeconds(30), "provider busy");
      return Reply.ack();
    }, Integer.parseInt(System.getenv().getOrDefault("PORT", "50051"))); // gRPC + health; SIGTERM stops gracefully
  }

  static boolean charge(String id, byte[] value) { return true; } // your work here; deduplicate on id
}
