package dev.siding.consumer;

import java.util.logging.Level;
import java.util.logging.Logger;

/** Runs a handler for one delivery; never throws. */
final class Run {
  private static final Logger LOG = Logger.getLogger("dev.siding.consumer");

  private Run() {}

  static Reply handler(Handler handler, Delivery delivery, String call) {
    Call.set(call);
    try {
      return Reply.forReturn(handler.handle(delivery));
    } catch (Exception | LinkageError | AssertionError e) {
      Reply reply = Reply.forThrow(e);
      if (e instanceof DeadLetter) {
        LOG.fine(() -> "dead letter " + delivery.id() + ": " + reply.reason());
      } else {
        LOG.log(Level.WARNING, "handler threw for " + delivery.id(), e);
      }
      return reply;
    } finally {
      Call.set(null);
    }
  }
}
