package dev.siding.consumer;

/**
 * A webhook request is not authentic or not fresh. {@link #problem()} is stable and
 * machine-readable: missing-header, bad-timestamp, stale-timestamp, future-timestamp or
 * bad-signature.
 */
public class WebhookVerificationException extends Exception {
  private static final long serialVersionUID = 1L;
  private final String problem;

  public WebhookVerificationException(String problem, String message) {
    super(message);
    this.problem = problem;
  }

  public String problem() {
    return problem;
  }
}
