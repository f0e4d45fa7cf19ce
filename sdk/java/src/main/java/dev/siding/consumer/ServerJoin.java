package dev.siding.consumer;

/**
 * What a server does with its builder's {@code join(...)}, for {@link ConsumerServer} and {@link
 * WebhookServer} alike: join the route once the server listens, leave it first thing when the
 * server stops (siding sends nothing new once the leave is answered).
 */
final class ServerJoin {
  private final Registration.Builder join; // null: the server joins nothing
  private Registration registration; // guarded by this

  ServerJoin(Registration.Builder join) {
    this.join = join;
  }

  /**
   * Join as the server listening on {@code host}, bound to {@code port} and reached over {@code
   * transport}. When siding refuses, {@code stopServer} runs before the exception is thrown. A
   * {@link #leave()} meanwhile waits for the join to be answered.
   */
  synchronized void afterListening(String host, int port, String transport, Runnable stopServer)
      throws RegistrationException {
    if (join == null) {
      return;
    }
    registration = join.buildFor(host, port, transport);
    try {
      registration.start();
    } catch (RegistrationException e) {
      stopServer.run();
      throw e;
    }
  }

  /** The route joined, once the server started; null without {@code join(...)}. */
  synchronized Registration registration() {
    return registration;
  }

  /** Leave the route (before the server takes no more deliveries). */
  void leave() {
    Registration joined = registration();
    if (joined != null) {
      joined.stop();
    }
  }
}
