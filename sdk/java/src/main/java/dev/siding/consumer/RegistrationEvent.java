package dev.siding.consumer;

/**
 * What happened to a {@link Registration}, for logs and metrics. {@code status} is siding's HTTP
 * status (0 when it did not answer); {@code detail} its reason or the connection error, never the
 * token; {@code consumer} may be null before the first join.
 */
public record RegistrationEvent(Kind kind, String route, String consumer, int status, String detail) {
  public enum Kind {
    JOINED,
    /** A renewal answered 404 (the lease lapsed, or an operator removed it): joining again. */
    LAPSED,
    /** No answer, or a 5xx: trying again after a back-off. */
    UNREACHABLE,
    /** Any other 4xx. */
    REFUSED,
    LEFT
  }
}
