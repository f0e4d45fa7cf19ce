package dev.siding.consumer;

import java.time.Duration;
import java.util.List;
import java.util.Objects;
import java.util.Optional;

/**
 * A handler's answer for one delivery: {@link #ack()}, {@link #retry(Duration, String)}, {@link
 * #dead(String)} or {@link #backoff(Duration, String)}.
 */
public final class Reply {
  private static final Reply ACK = new Reply(Verdict.ACK, null, "", List.of());

  private final Verdict verdict;
  private final Duration after;
  private final String reason;
  private final List<Output> outputs;

  private Reply(Verdict verdict, Duration after, String reason, List<Output> outputs) {
    this.verdict = verdict;
    this.after = after;
    this.reason = reason;
    this.outputs = outputs;
  }

  /** Done with this delivery. */
  public static Reply ack() {
    return ACK;
  }

  /** Done; siding produces {@code outputs} to Kafka before the delivery counts as done (gRPC). */
  public static Reply ack(List<Output> outputs) {
    return new Reply(Verdict.ACK, null, "", List.copyOf(outputs));
  }

  /** Not now: delivered again after the lane's own delay. */
  public static Reply retry(String reason) {
    return new Reply(Verdict.RETRY, null, checkReason(reason), List.of());
  }

  /** Not now: delivered again no earlier than {@code after} from now. */
  public static Reply retry(Duration after, String reason) {
    return new Reply(Verdict.RETRY, checkAfter(after, "retry"), checkReason(reason), List.of());
  }

  /** Never: the delivery goes to the dead-letter topic with {@code reason}. */
  public static Reply dead(String reason) {
    return new Reply(Verdict.DEAD, null, checkReason(reason), List.of());
  }

  /**
   * The consumer cannot take work now (overloaded, a dependency is down): siding slows down and
   * delivers it again in place, without spending an attempt. Unary gRPC and single webhooks say
   * so for one delivery; a stream, a batch frame or a batch request cannot, so there it is a
   * RETRY with {@code after} (a whole HTTP batch that backs off is answered 429).
   */
  public static Reply backoff(Duration after, String reason) {
    return new Reply(
        Verdict.BACKOFF,
        after == null ? null : checkAfter(after, "backoff"),
        checkReason(reason),
        List.of());
  }

  public Verdict verdict() {
    return verdict;
  }

  /** RETRY and BACKOFF: the earliest time to try again, from now; empty: the lane's delay. */
  public Optional<Duration> after() {
    return Optional.ofNullable(after);
  }

  /** RETRY, DEAD, BACKOFF: why; kept with the record in retry lanes and the DLQ. */
  public String reason() {
    return reason;
  }

  /** ACK only: records to produce (docs/outputs.md). */
  public List<Output> outputs() {
    return outputs;
  }

  @Override
  public String toString() {
    return "Reply["
        + verdict
        + (after == null ? "" : ", after=" + after)
        + (reason.isEmpty() ? "" : ", reason=" + reason)
        + (outputs.isEmpty() ? "" : ", outputs=" + outputs.size())
        + "]";
  }

  @Override
  public boolean equals(Object other) {
    return other instanceof Reply r
        && verdict == r.verdict
        && Objects.equals(after, r.after)
        && reason.equals(r.reason)
        && outputs.equals(r.outputs);
  }

  @Override
  public int hashCode() {
    return Objects.hash(verdict, after, reason, outputs);
  }

  private static Duration checkAfter(Duration after, String verb) {
    if (after == null || after.isNegative()) {
      throw new IllegalArgumentException(verb + ": after must be a duration >= 0, not " + after);
    }
    return after;
  }

  private static String checkReason(String reason) {
    return Objects.requireNonNull(reason, "reason");
  }

  /** What a handler returned: anything but a Reply is a handler bug, so RETRY (never an ack). */
  static Reply forReturn(Reply value) {
    return value != null ? value : retry("handler returned null, not a Reply");
  }

  /** What a handler threw: DeadLetter means DEAD; anything else is taken as transient: RETRY. */
  static Reply forThrow(Throwable error) {
    String message = error.getMessage();
    String text = message == null || message.isEmpty() ? error.getClass().getSimpleName() : message;
    return error instanceof DeadLetter ? dead(text) : retry(text);
  }

  /** Seconds as a number, for the wire. */
  static double seconds(Duration duration) {
    return duration.getSeconds() + duration.getNano() / 1e9;
  }
}
