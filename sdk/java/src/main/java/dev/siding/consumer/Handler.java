package dev.siding.consumer;

/**
 * Answers one delivery. Runs on the server's executor, many at once. Throwing {@link DeadLetter}
 * is the same as returning {@link Reply#dead}; any other exception is a RETRY with its message.
 */
@FunctionalInterface
public interface Handler {
  Reply handle(Delivery delivery) throws Exception;
}
