package dev.siding.consumer;

/** Throw from a handler to send the delivery to the dead-letter topic with this reason. */
public class DeadLetter extends RuntimeException {
  private static final long serialVersionUID = 1L;

  public DeadLetter(String reason) {
    super(reason);
  }
}
