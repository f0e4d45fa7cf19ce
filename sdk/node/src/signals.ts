// Wait for SIGTERM or Ctrl-C, the way a container or a terminal stops a consumer.

export function untilSignalled(signals: readonly NodeJS.Signals[] = ["SIGTERM", "SIGINT"]): Promise<NodeJS.Signals> {
  return new Promise((resolve) => {
    const received = (signal: NodeJS.Signals): void => {
      for (const s of signals) process.off(s, received);
      resolve(signal);
    };
    for (const s of signals) process.once(s, received);
  });
}
