package dev.siding.consumer;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.protobuf.ByteString;
import io.grpc.ManagedChannel;
import io.grpc.ManagedChannelBuilder;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import siding.v1.ConsumerGrpc;
import siding.v1.ConsumerOuterClass.Delivery;
import siding.v1.ConsumerOuterClass.Verdict;

/** The README's example, run as a user runs it: {@code java -cp ... examples/Hello.java}. */
class HelloTest {
  @Test
  void theReadmesExampleAnswersAndStopsOnSigterm() throws Exception {
    int port;
    try (ServerSocket socket = new ServerSocket(0)) {
      port = socket.getLocalPort();
    }
    Path output = Files.createTempFile("hello", ".out");
    String java = Path.of(System.getProperty("java.home"), "bin", "java").toString();
    ProcessBuilder builder =
        new ProcessBuilder(java, "-cp", System.getProperty("java.class.path"), "examples/Hello.java")
            .redirectErrorStream(true)
            .redirectOutput(output.toFile());
    builder.environment().put("PORT", Integer.toString(port));
    Process process = builder.start();
    try {
      long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
      while (!Files.readString(output).contains("listening on")) {
        assertTrue(process.isAlive(), Files.readString(output));
        assertTrue(System.nanoTime() < deadline, "no 'listening on' in 60 s: " + Files.readString(output));
        Thread.sleep(50);
      }
      ManagedChannel channel = ManagedChannelBuilder.forAddress("127.0.0.1", port).usePlaintext().build();
      var stub = ConsumerGrpc.newBlockingStub(channel).withDeadlineAfter(20, TimeUnit.SECONDS);
      List<Verdict> verdicts = new ArrayList<>();
      for (String value : new String[] {"{\"a\":1}", "plain", null}) {
        Delivery.Builder d = Delivery.newBuilder().setId("t/0/1").setTopic("t").setAttempt(1);
        if (value != null) d.setValue(ByteString.copyFrom(value, StandardCharsets.UTF_8));
        verdicts.add(stub.deliver(d.build()).getVerdict());
      }
      channel.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
      assertEquals(List.of(Verdict.VERDICT_ACK, Verdict.VERDICT_DEAD, Verdict.VERDICT_ACK), verdicts);
      process.destroy(); // SIGTERM
      assertTrue(process.waitFor(30, TimeUnit.SECONDS));
      assertEquals(128 + 15, process.exitValue(), Files.readString(output));
      assertTrue(Files.readString(output).contains("stopping: finishing deliveries in flight"), Files.readString(output));
    } finally {
      process.destroyForcibly();
      Files.deleteIfExists(output);
    }
  }
}
