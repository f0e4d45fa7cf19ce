package dev.siding.consumer;

import java.io.IOException;

/** siding refused a join: {@link #status()} is its HTTP status, the message its reason. */
public final class RegistrationException extends IOException {
  private static final long serialVersionUID = 1L;
  private final String route;
  private final int status;

  RegistrationException(String route, int status, String reason) {
    super("joining route " + route + " was refused (" + status + "): " + reason);
    this.route = route;
    this.status = status;
  }

  public String route() {
    return route;
  }

  public int status() {
    return status;
  }
}
