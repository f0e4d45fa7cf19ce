package dev.siding.consumer;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.List;
import java.util.Optional;
import org.junit.jupiter.api.Test;

class ReplyTest {
  @Test
  void theVerbsBuildTheirAnswers() {
    Reply retry = Reply.retry(Duration.ofMillis(1500), "busy");
    assertEquals(Verdict.RETRY, retry.verdict());
    assertEquals(Optional.of(Duration.ofMillis(1500)), retry.after());
    assertEquals("busy", retry.reason());
    assertEquals(1.5, Reply.seconds(retry.after().get()));
    assertEquals(Optional.empty(), Reply.retry("later").after());
    assertEquals(Verdict.DEAD, Reply.dead("x").verdict());
    assertEquals(Verdict.BACKOFF, Reply.backoff(null, "").verdict());
    assertEquals(Verdict.ACK, Reply.ack().verdict());
    assertEquals(1, Reply.ack(List.of(Output.of("out", null, new byte[] {1}))).outputs().size());
  }

  @Test
  void aNegativeDelayIsRefusedNamingIt() {
    var error =
        assertThrows(IllegalArgumentException.class, () -> Reply.retry(Duration.ofSeconds(-1), "x"));
    assertTrue(error.getMessage().contains("retry: after must be a duration >= 0, not PT-1S"));
    assertThrows(IllegalArgumentException.class, () -> Reply.backoff(Duration.ofSeconds(-2), ""));
    assertThrows(NullPointerException.class, () -> Reply.dead(null));
    assertThrows(IllegalArgumentException.class, () -> Output.of("", null, null));
  }

  @Test
  void aThrowIsRetryDeadLetterIsDeadAndNullIsRetry() {
    assertEquals(Reply.retry("boom"), Reply.forThrow(new IllegalStateException("boom")));
    assertEquals(Reply.dead("pill"), Reply.forThrow(new DeadLetter("pill")));
    assertEquals(Reply.retry("NullPointerException"), Reply.forThrow(new NullPointerException()));
    assertEquals(Reply.retry("handler returned null, not a Reply"), Reply.forReturn(null));
  }
}
