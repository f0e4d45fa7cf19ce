package dev.siding.consumer;

/** What a handler decided about one delivery. */
public enum Verdict {
  /** Done; siding will not deliver it again. */
  ACK,
  /** Not now: delivered again later from the next retry lane (an attempt is spent). */
  RETRY,
  /** Never: to the dead-letter topic with the reason. */
  DEAD,
  /** The consumer cannot take work now: siding slows down and redelivers in place. */
  BACKOFF
}
