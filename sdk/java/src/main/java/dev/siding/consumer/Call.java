package dev.siding.consumer;

/**
 * How the delivery a handler is running for arrived, for metrics and logs: {@link #current()}
 * inside a handler.
 */
public final class Call {
  public static final String DELIVER = "Deliver";
  public static final String DELIVER_STREAM = "DeliverStream";
  public static final String DELIVER_BATCHES = "DeliverBatches";
  public static final String WEBHOOK = "webhook";
  public static final String WEBHOOK_BATCH = "webhook-batch";

  private static final ThreadLocal<String> CURRENT = new ThreadLocal<>();

  private Call() {}

  /**
   * "Deliver", "DeliverStream", "DeliverBatches", "webhook" or "webhook-batch" on the thread of a
   * handler; "" elsewhere.
   */
  public static String current() {
    String call = CURRENT.get();
    return call == null ? "" : call;
  }

  static void set(String call) {
    if (call == null) {
      CURRENT.remove();
    } else {
      CURRENT.set(call);
    }
  }
}
